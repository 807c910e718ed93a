"""Shared set-up for the benchmarks: scratch PostgreSQL databases and small notebooks."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from nbcast.db import Database
from nbcast.testing.postgres import scratch_database as scratch_pg_database

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
    """A fresh, migrated PostgreSQL database on ``$NBCAST_BENCH_PG``'s server, dropped
    afterwards (:func:`nbcast.testing.postgres.scratch_database`)."""
    with scratch_pg_database(ADMIN, prefix="nbcast_bench") as url:
        Database.open(url).dispose()
        yield url


def smtp_sink(port: int) -> subprocess.Popen[bytes]:
    """aiosmtpd's ``Sink`` on 127.0.0.1:``port``, in its own process, once it listens
    (so the benchmark's own process measures only the sending side)."""
    handler = "aiosmtpd.handlers.Sink"
    listen = f"127.0.0.1:{port}"
    proc = subprocess.Popen([sys.executable, "-m", "aiosmtpd", "-n", "-c", handler, "-l", listen])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise RuntimeError("the SMTP sink did not start")
