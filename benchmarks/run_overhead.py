"""Per-run overhead: raw papermill vs nbcast (queue → lease → execute → artifact stored).

Prints JSON. The same trivial pandas notebook is executed N times (default 10):

- by the raw ``papermill`` CLI, one process per run (the reference);
- by nbcast: N manual runs queued on the embedded database, then a worker with the
  local engine and concurrency 1 claims, executes (warm kernel pool, one fresh kernel
  per run), stores the executed notebook content-addressed and records each run.
  The nbcast figure is the worker's wall time divided by N, so it includes every
  claim, heartbeat, fenced completion and artifact write.

Target: nbcast ≤ 0.25 × raw papermill per run.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from benchmarks._common import trivial_notebook
from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.worker import Worker
from nbcast.scheduler.control import run_now


def raw_papermill(notebook: Path, folder: Path, runs: int) -> list[float]:
    papermill = Path(sys.executable).parent / "papermill"
    times = []
    for i in range(runs):
        started = time.perf_counter()
        subprocess.run(
            [
                str(papermill),
                str(notebook),
                str(folder / f"out-{i}.ipynb"),
                "-p",
                "n",
                str(i),
                "--log-level",
                "ERROR",
                "--no-progress-bar",
            ],
            check=True,
            capture_output=True,
        )
        times.append(time.perf_counter() - started)
    return times


def nbcast_runs(notebook: Path, folder: Path, runs: int, pool_size: int) -> dict[str, float]:
    db = Database.open(f"sqlite:///{folder / 'nbcast.db'}")
    publish(db, notebook, caller=Caller(tenant="default", user="bench"))
    for i in range(runs):
        run_now(db, SystemClock(), Caller(tenant="default", user="bench"), "trivial", {"n": i})
    with LocalEngine(capacity=1, pool_size=pool_size) as engine:
        engine._pool.wait_ready(60)  # start-up, as in a long-running worker
        worker = Worker(
            db,
            SystemClock(),
            engine,
            name="bench",
            artifacts=str(folder / "a"),
            work_dir=str(folder / "runs"),
            poll_interval=0.01,
        )
        started = time.perf_counter()
        stats = worker.run(exit_when_idle=True)
        elapsed = time.perf_counter() - started
    db.dispose()
    assert stats.succeeded == runs, stats
    return {"per_run_s": elapsed / runs, "total_s": elapsed}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--pool-size", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        notebook = trivial_notebook(folder)
        raw = raw_papermill(notebook, folder, args.runs)
        ours = nbcast_runs(notebook, folder, args.runs, args.pool_size)
    raw_per_run = statistics.mean(raw)
    print(
        json.dumps(
            {
                "benchmark": "run_overhead",
                "runs": args.runs,
                "pool_size": args.pool_size,
                "raw_papermill_per_run_s": round(raw_per_run, 3),
                "raw_papermill_median_s": round(statistics.median(raw), 3),
                "nbcast_per_run_s": round(ours["per_run_s"], 3),
                "ratio_nbcast_over_papermill": round(ours["per_run_s"] / raw_per_run, 3),
                "target_ratio": 0.25,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
