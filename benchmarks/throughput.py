"""Sustained trivial runs per hour on this machine, local engine and Ray, side by side.

Prints JSON. N trivial pandas runs (default 120: at 40 a pass takes 6 s and the on/off
ratio swung from 0.85 to 1.1 between runs) are queued in PostgreSQL and one
``nbcast worker`` per engine (concurrency = CPU count) drains them; runs/hour is N
divided by the worker's wall time from first claim to last completion. The local
engine uses warm kernel pools; the Ray engine starts a local Ray once (not counted)
and runs one task per attempt. Each engine drains twice, side by side: with every
kernel in its sandbox (the default, :mod:`nbcast.sandbox`) and with ``--sandbox off``;
``sandbox_ratio`` is the first's runs/hour over the second's. Targets: ≥ 6,250
runs/hour (150,000 runs a day); sandbox on ≥ 0.9 × sandbox off.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from benchmarks._common import scratch_database, trivial_notebook
from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.engines import engines
from nbcast.executor.worker import Worker
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import get_tenant, set_quota


def drain(engine_name: str, runs: int, concurrency: int, sandbox: bool) -> dict[str, Any]:
    with scratch_database() as url, tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        db = Database.open(url)
        with db.session() as session:
            set_quota(
                session,
                "default",
                max_concurrent_runs=concurrency,
                cpus_per_run=1,
                memory_mb_per_run=256,
            )
            # A local Ray without a token (RAY_AUTH_MODE=disabled, as `make` runs it) takes
            # no sandboxed report on the host's network; these need none.
            get_tenant(session, "default").sandbox_network = "none"
        publish(db, trivial_notebook(folder), caller=Caller(tenant="default", user="bench"))
        for i in range(runs):
            run_now(db, SystemClock(), Caller(tenant="default", user="bench"), "trivial", {"n": i})
        options: dict[str, Any] = {"capacity": concurrency}
        if engine_name == "ray":
            options.update(
                tenants={"default": concurrency},
                num_cpus=concurrency,
                temp_dir=f"/tmp/nbcast-bench-ray-{os.getpid()}",
                include_dashboard=False,
            )
        with engines.create(engine_name, **options) as engine:
            pool = getattr(engine, "_pool", None)
            if pool is not None:
                pool.wait_ready(60)
            worker = Worker(
                db,
                SystemClock(),
                engine,
                name=f"bench-{engine_name}",
                artifacts=str(folder / "a"),
                work_dir=str(folder / "runs"),
                poll_interval=0.01,
                sandbox=sandbox,
            )
            started = time.perf_counter()
            stats = worker.run(exit_when_idle=True)
            elapsed = time.perf_counter() - started
        db.dispose()
    if engine_name == "ray":
        import ray

        ray.shutdown()
    return {
        "engine": engine_name,
        "sandbox": "on" if sandbox else "off",
        "runs": runs,
        "succeeded": stats.succeeded,
        "seconds": round(elapsed, 2),
        "runs_per_hour": round(runs / elapsed * 3600),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=120)
    parser.add_argument("--concurrency", type=int, default=os.cpu_count() or 2)
    parser.add_argument("--engines", default="local,ray")
    parser.add_argument("--sandbox", choices=["on", "off", "both"], default="both")
    args = parser.parse_args()
    modes = {"on": [True], "off": [False], "both": [True, False]}[args.sandbox]
    results = [
        drain(name, args.runs, args.concurrency, sandbox)
        for name in args.engines.split(",")
        for sandbox in modes
    ]
    ratios = {}
    for name in args.engines.split(","):
        rates = {r["sandbox"]: r["runs_per_hour"] for r in results if r["engine"] == name}
        if {"on", "off"} <= set(rates):
            ratios[name] = round(rates["on"] / rates["off"], 3)
    print(
        json.dumps(
            {
                "benchmark": "throughput",
                "concurrency": args.concurrency,
                "results": results,
                "sandbox_ratio": ratios,
                "target_runs_per_hour": 6250,
                "target_sandbox_ratio": 0.9,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
