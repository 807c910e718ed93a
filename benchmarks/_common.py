"""Shared set-up for the benchmarks: scratch PostgreSQL databases, small notebooks,
and the governance switch (``--governance on|off|both``)."""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import statistics
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

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


GOVERNANCE_TARGET_PCT = 10.0
"""Issue 13: each hot path within 10 % of its figure without governance."""

NEVER_SPENT_BYTES = 10**15
"""A daily warehouse budget no benchmark can spend (1 PB): the check runs, never holds."""

NEVER_SPENT_CPU_S = 10.0**9
"""A daily CPU budget no benchmark can spend."""


def add_governance_arguments(parser: argparse.ArgumentParser) -> None:
    """``--governance on|off|both`` (default both) and ``--repeat N`` (default 2)."""
    parser.add_argument(
        "--governance",
        choices=("on", "off", "both"),
        default="both",
        help="measure with governance on, off, or both alternating (on, off, on, off …)",
    )
    parser.add_argument(
        "--repeat", type=int, default=2, help="passes of each side with --governance both"
    )


def governance_passes(mode: str, repeat: int) -> list[bool]:
    """The passes to run, in order: True is governance on. ``both`` alternates, on
    first, so a drift in the machine's load over the run falls on both sides."""
    if mode == "both":
        return [True, False] * max(1, repeat)
    return [mode == "on"]


def overhead(
    figure: str, on: list[float], off: list[float], *, higher_is_better: bool = True
) -> dict[str, Any]:
    """Governance-on beside governance-off for one figure: every pass, the medians, their
    ratio off/on and the overhead — how much more time governance-on takes per item
    (``off/on - 1`` for a rate, ``on/off - 1`` for a latency), in percent, against
    :data:`GOVERNANCE_TARGET_PCT`."""
    median_on, median_off = statistics.median(on), statistics.median(off)
    ratio = median_off / median_on if median_on else float("inf")
    slower = ratio if higher_is_better else (1 / ratio if ratio else float("inf"))
    pct = round((slower - 1) * 100, 1)
    return {
        "figure": figure,
        "higher_is_better": higher_is_better,
        "on": on,
        "off": off,
        "median_on": round(median_on, 3),
        "median_off": round(median_off, 3),
        "off_over_on": round(ratio, 3),
        "overhead_pct": pct,
        "target_pct": GOVERNANCE_TARGET_PCT,
        "within_target": pct <= GOVERNANCE_TARGET_PCT,
    }


def machine_load() -> dict[str, Any]:
    """The load average and CPU count: these benchmarks share the machine with other work."""
    one, five, fifteen = os.getloadavg()
    return {
        "load_average": [round(one, 2), round(five, 2), round(fifteen, 2)],
        "cpus": os.cpu_count(),
    }


def children_cpu_s() -> float:
    """CPU seconds (user + system) of this process's children that have been waited
    for: the difference around forked workers is what they used, a figure the load
    of other work on the machine disturbs far less than their wall time."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def own_cpu_s() -> float:
    """CPU seconds (user + system) of this process, all its threads."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime
