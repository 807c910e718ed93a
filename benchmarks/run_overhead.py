"""Per-run overhead: raw papermill vs nbcast (queue → lease → execute → artifact stored).

Prints JSON. The same trivial pandas notebook is executed N times (default 10):

- by the raw ``papermill`` CLI, one process per run (the reference);
- by nbcast: N manual runs queued on the embedded database, then a worker with the
  local engine and concurrency 1 claims, executes (warm kernel pool, one fresh kernel
  per run), stores the executed notebook content-addressed and records each run.
  The nbcast figure is the worker's wall time divided by N, so it includes every
  claim, heartbeat, fenced completion and artifact write;
- nbcast twice, side by side: with each kernel in its sandbox (the default: a
  bubblewrap sandbox, cgroup and run folder per kernel, :mod:`nbcast.sandbox`) and with
  ``--sandbox off``. Each worker first runs one run that is not counted: a sandboxed
  pool keeps kernels per tenant, so it has none ready before the tenant's first run
  (a long-running worker pays that once).

Targets: nbcast ≤ 0.25 × raw papermill per run; with the sandbox on ≤ 0.15×.
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


def nbcast_runs(
    notebook: Path, folder: Path, runs: int, pool_size: int, *, sandbox: bool
) -> dict[str, float]:
    folder = folder / ("sandbox-on" if sandbox else "sandbox-off")
    folder.mkdir()
    db = Database.open(f"sqlite:///{folder / 'nbcast.db'}")
    caller = Caller(tenant="default", user="bench")
    publish(db, notebook, caller=caller)
    with LocalEngine(capacity=1, pool_size=pool_size) as engine:
        worker = Worker(
            db,
            SystemClock(),
            engine,
            name="bench",
            artifacts=str(folder / "a"),
            work_dir=str(folder / "runs"),
            poll_interval=0.01,
            sandbox=sandbox,
        )
        # Start-up, as in a long-running worker: one run not counted, a full pool.
        run_now(db, SystemClock(), caller, "trivial", {"n": -1})
        worker.run(exit_when_idle=True)
        engine._pool.wait_ready(60)
        for i in range(runs):
            run_now(db, SystemClock(), caller, "trivial", {"n": i})
        started = time.perf_counter()
        stats = worker.run(exit_when_idle=True)
        elapsed = time.perf_counter() - started
    db.dispose()
    assert stats.succeeded == runs + 1, stats
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
        boxed = nbcast_runs(notebook, folder, args.runs, args.pool_size, sandbox=True)
        plain = nbcast_runs(notebook, folder, args.runs, args.pool_size, sandbox=False)
    raw_per_run = statistics.mean(raw)
    print(
        json.dumps(
            {
                "benchmark": "run_overhead",
                "runs": args.runs,
                "pool_size": args.pool_size,
                "raw_papermill_per_run_s": round(raw_per_run, 3),
                "raw_papermill_median_s": round(statistics.median(raw), 3),
                "nbcast_sandbox_on_per_run_s": round(boxed["per_run_s"], 3),
                "nbcast_sandbox_off_per_run_s": round(plain["per_run_s"], 3),
                "ratio_sandbox_on_over_papermill": round(boxed["per_run_s"] / raw_per_run, 3),
                "ratio_sandbox_off_over_papermill": round(plain["per_run_s"] / raw_per_run, 3),
                "target_ratio_sandbox_on": 0.15,
                "target_ratio": 0.25,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
