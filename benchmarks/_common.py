"""Shared set-up for the benchmarks: scratch PostgreSQL databases and small notebooks."""

from __future__ import annotations

import json
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import sqlalchemy as sa

from nbcast.db import Database

ADMIN = os.environ.get("NBCAST_BENCH_PG", "postgresql+psycopg://postgres@127.0.0.1:5432/test")

TRIVIAL_PANDAS = {
    "cells": [
        {
            "cell_type": "code",
            "id": "p",
            "metadata": {"tags": ["parameters"]},
            "source": "n = 10\n",
            "outputs": [],
            "execution_count": None,
        },
        {
            "cell_type": "code",
            "id": "b",
            "metadata": {},
            "source": "import pandas as pd\ndf = pd.DataFrame({'x': range(n)})\ndf.describe()",
            "outputs": [],
            "execution_count": None,
        },
    ],
    "metadata": {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
    },
    "nbformat": 4,
    "nbformat_minor": 5,
}


def trivial_notebook(folder: Path, name: str = "trivial") -> Path:
    """Write the trivial pandas notebook every execution benchmark runs."""
    nb = json.loads(json.dumps(TRIVIAL_PANDAS))
    nb["metadata"]["nbcast"] = {"name": name}
    path = folder / f"{name}.ipynb"
    path.write_text(json.dumps(nb))
    return path


@contextmanager
def scratch_database() -> Iterator[str]:
    """A fresh, migrated PostgreSQL database, dropped afterwards."""
    admin = sa.create_engine(ADMIN, isolation_level="AUTOCOMMIT")
    name = f"nbcast_bench_{uuid.uuid4().hex[:8]}"
    with admin.connect() as conn:
        conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    url = sa.engine.make_url(ADMIN).set(database=name).render_as_string(hide_password=False)
    try:
        Database.open(url).dispose()
        yield url
    finally:
        with admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"
                ),
                {"n": name},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
        admin.dispose()
