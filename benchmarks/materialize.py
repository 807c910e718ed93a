"""Materialization throughput and fire latency on PostgreSQL.

Prints one JSON object:

- ``throughput``: slots/s materialized into PostgreSQL with 1 and with 3 replicas
  (processes), for 100,000 definitions — a third every minute, a third hourly, a
  third daily, across zones — each with 10 minutes of due slots, side by side with
  the reference: a plain ``INSERT … ON CONFLICT DO NOTHING`` of the same number of
  pre-built rows (``reference_insert_rows_per_s``), so the ratio shows what
  scheduling itself costs over the insert.
- ``fire_latency``: due instant → row committed, p50/p99/max in seconds, measured
  with the real clock over ``--latency-minutes`` minutes with the real scheduler
  service loop.

Usage: ``python -m benchmarks.materialize [--definitions N] [--latency-minutes M]``.
Needs the PostgreSQL on 127.0.0.1:5432 (``NBCAST_BENCH_PG`` overrides the admin URL).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import statistics
import threading
import time
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa

from benchmarks._common import scratch_database
from nbcast.clock import FixedClock, SystemClock
from nbcast.db import Database
from nbcast.executor.models import Run
from nbcast.scheduler.materializer import Materializer

ZONES = [
    "UTC",
    "America/New_York",
    "Europe/Berlin",
    "Asia/Kolkata",
    "Australia/Sydney",
    "America/Los_Angeles",
    "Asia/Tokyo",
    "Europe/London",
]
T0 = datetime(2026, 6, 15, 9, 0, tzinfo=UTC)  # an ordinary day in every zone


def schedule_for(i: int) -> dict[str, Any]:
    zone = ZONES[i % len(ZONES)]
    kind = i % 3
    if kind == 0:
        return {"cron": "* * * * *", "timezone": zone, "overlap": "allow"}
    if kind == 1:
        return {"cron": f"{i % 60} * * * *", "timezone": zone}
    return {"cron": f"{i % 60} {i % 24} * * *", "timezone": zone}


def seed(db: Database, count: int, published: datetime) -> None:
    """Insert ``count`` definitions with one version each (setup, not measured)."""
    notebook = json.dumps({"cells": [], "metadata": {}, "nbformat": 4, "nbformat_minor": 5})
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO users (tenant_id, name, role, created_at) "
                "VALUES (1, 'bench', 'author', now())"
            )
        )
        for start in range(0, count, 10_000):
            ids = range(start + 1, min(start + 10_000, count) + 1)
            conn.execute(
                sa.text(
                    "INSERT INTO report_definitions (id, tenant_id, name, source_path, created_by,"
                    " created_at, latest_version) VALUES (:id, 1, :name, :path, 1, :at, 1)"
                ),
                [
                    {"id": i, "name": f"def-{i}", "path": f"/bench/{i}.ipynb", "at": published}
                    for i in ids
                ],
            )
            conn.execute(
                sa.text(
                    "INSERT INTO definition_versions (tenant_id, definition_id, version, sha256,"
                    " notebook_json, parameter_schema, spec, author_id, message, created_at)"
                    " VALUES (1, :id, 1, :sha, :nb, '[]', CAST(:spec AS jsonb), 1, '', :at)"
                ),
                [
                    {
                        "id": i,
                        "sha": f"{i:064d}",
                        "nb": notebook,
                        "spec": json.dumps({"schedule": schedule_for(i)}),
                        "at": published,
                    }
                    for i in ids
                ],
            )


def reset(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(sa.text("TRUNCATE runs, schedule_states CASCADE"))


def _replica(url: str, now: datetime, index: int, out: Any) -> None:
    db = Database.open(url, upgrade=False)
    result = Materializer(db, FixedClock(now), name=f"bench-{index}", batch=500).tick(now)
    out.put(result.slots)
    db.dispose()


def throughput(url: str, replicas: int, now: datetime) -> dict[str, Any]:
    db = Database.open(url, upgrade=False)
    reset(db)
    started = time.perf_counter()
    Materializer(db, FixedClock(now), name="sync").sync()
    sync_seconds = time.perf_counter() - started
    queue: Any = multiprocessing.get_context("fork").Queue()
    procs = [
        multiprocessing.get_context("fork").Process(target=_replica, args=(url, now, i, queue))
        for i in range(replicas)
    ]
    started = time.perf_counter()
    for p in procs:
        p.start()
    slots = sum(queue.get() for _ in procs)
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    with db.session() as session:
        rows = session.scalar(sa.select(sa.func.count()).select_from(Run))
    db.dispose()
    return {
        "replicas": replicas,
        "slots": slots,
        "rows": rows,
        "seconds": round(elapsed, 2),
        "slots_per_s": round(slots / elapsed),
        "sync_seconds": round(sync_seconds, 2),
    }


def reference_insert(url: str, rows: int) -> dict[str, Any]:
    """A plain batched INSERT … ON CONFLICT DO NOTHING of ``rows`` pre-built runs."""
    db = Database.open(url, upgrade=False)
    reset(db)
    from nbcast.db import insert_many_ignore

    built = [
        {
            "tenant_id": 1,
            "definition_id": 1 + i % 1000,
            "version_id": 1 + i % 1000,
            "version": 1,
            "kind": "scheduled",
            "slot_key": f"k{i}",
            "fire_at": T0,
            "state": "QUEUED",
            "reason": None,
            "parameters": {},
            "serial": True,
            "not_before": T0,
            "created_at": T0,
        }
        for i in range(rows)
    ]
    started = time.perf_counter()
    for start in range(0, rows, 20_000):
        with db.session() as session:
            insert_many_ignore(session, Run, built[start : start + 20_000])
    elapsed = time.perf_counter() - started
    db.dispose()
    return {"rows": rows, "seconds": round(elapsed, 2), "rows_per_s": round(rows / elapsed)}


class _Recording(Materializer):
    """Records, after each committed batch, how late each of its slots was."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.samples: list[tuple[datetime, float]] = []
        self._local = threading.local()  # a pass drains on several threads

    def _insert(self, session: Any, rows: list[dict[str, Any]]) -> int:
        self._local.batch = [r["fire_at"] for r in rows]
        return super()._insert(session, rows)

    def _materialize_batch(self, now: datetime, result: Any) -> int:
        self._local.batch = []
        claimed = super()._materialize_batch(now, result)
        committed = datetime.now(UTC)
        self.samples.extend(
            (fire, (committed - fire).total_seconds()) for fire in self._local.batch
        )
        return claimed


def fire_latency(url: str, minutes: float, active: int, replicas: int = 1) -> dict[str, Any]:
    """Run the real scheduler service for ``minutes`` with ``active`` definitions
    (the rest paused) and measure due instant -> row committed for every slot that
    fell due after the service was up."""
    from nbcast.scheduler.service import SchedulerService

    db = Database.open(url, upgrade=False)
    reset(db)
    now = datetime.now(UTC)
    with db.engine.begin() as conn:  # re-publish "now" so nothing is a catch-up
        conn.execute(sa.text("UPDATE definition_versions SET created_at = :now"), {"now": now})
    Materializer(db, SystemClock(), name="sync").sync()
    with db.engine.begin() as conn:
        conn.execute(
            sa.text("UPDATE schedule_states SET paused = (definition_id > :n)"), {"n": active}
        )
        conn.execute(sa.text("ANALYZE"))
    measured_from = datetime.now(UTC)
    services = []
    for i in range(replicas):
        service = SchedulerService(db, SystemClock(), name=f"latency-{i}", batch=500, max_sleep=1.0)
        service.materializer = _Recording(db, service.clock, name=f"latency-{i}", batch=500)
        services.append(service)
    threads = [threading.Thread(target=s.run) for s in services]
    for t in threads:
        t.start()
    time.sleep(minutes * 60)
    for s in services:
        s.stop()
    for t in threads:
        t.join()
    values = sorted(
        v for s in services for fire, v in s.materializer.samples if fire >= measured_from
    )
    db.dispose()
    if not values:
        return {"samples": 0}
    return {
        "active_definitions": active,
        "replicas": replicas,
        "samples": len(values),
        "p50_s": round(statistics.median(values), 3),
        "p99_s": round(values[int(len(values) * 0.99) - 1], 3),
        "max_s": round(values[-1], 3),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--definitions", type=int, default=100_000)
    parser.add_argument("--minutes-due", type=int, default=10)
    parser.add_argument("--latency-minutes", type=float, default=2.0)
    args = parser.parse_args()
    with scratch_database() as url:
        db = Database.open(url)
        seed(db, args.definitions, T0)
        db.dispose()
        now = T0 + timedelta(minutes=args.minutes_due)
        one = throughput(url, 1, now)
        three = throughput(url, 3, now)
        reference = reference_insert(url, one["slots"])
        latency = {}
        if args.latency_minutes > 0:
            latency = {
                f"{n}_definitions": fire_latency(url, args.latency_minutes, n)
                for n in (10_000, args.definitions)
            }
    print(
        json.dumps(
            {
                "benchmark": "materialize",
                "definitions": args.definitions,
                "minutes_due": args.minutes_due,
                "throughput": {
                    "one_replica": one,
                    "three_replicas": three,
                    "reference_insert_rows_per_s": reference["rows_per_s"],
                    "one_replica_over_reference": round(
                        one["slots_per_s"] / reference["rows_per_s"], 3
                    ),
                },
                "fire_latency": latency,
                "targets": {"slots_per_s_one_replica": 20_000, "p99_fire_latency_s": 1.0},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
