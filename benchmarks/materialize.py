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

Usage: ``python -m benchmarks.materialize [--definitions N] [--latency-minutes M]
[--governance on|off|both] [--repeat N] [--sla-every K]``. Needs the PostgreSQL on
127.0.0.1:5432 (``NBCAST_BENCH_PG`` overrides the admin URL).

**Governance** (``--governance``, default ``both``; ``--repeat N``, default 2). Every
``--sla-every``-th definition (default 100: 1 %, a mix of minutely, hourly and daily
ones) declares ``sla: {delivered_within: "1m"}`` in its stored version spec, on both
sides, so the SLA monitor has slots to judge (nothing is ever delivered here, so every
judged slot is a miss: a ``sla_misses`` row and an ``sla.missed`` audit entry each).
The materializer itself has no governance on its path; what differs is what a
scheduler replica runs after its tick:

- *on* (nbcast as shipped): each throughput replica runs one
  ``JobRunner(db, clock, owner).step()`` on its fixed clock right after its
  ``tick`` — the SLA monitor over every definition with an SLA, and the daily
  retention job, leased by one replica (no tenant has a policy, so it finds nothing)
  — inside the timed span; beside the fire-latency services runs one oversight
  service per replica, as ``nbcast oversight`` does (SLA checks every 30 s of clock
  time, retention once), sharing the database;
  the materializer has no accounting of its own;
- *off*: no governance step and no oversight service.

Roles are checked in the command layer only, not here. ``both`` runs on, off, on, off
… each on a freshly seeded database (throughput with 1 replica, with 3, then fire
latency), prints every pass (``governance_on`` / ``governance_off`` lists in place of
each figure) and ``governance_overhead``: for ``slots_per_s`` (1 and 3 replicas) the
medians and their ratio off/on, for fire latency p50/p99 the same with the overhead
as on/off (lower is better); target: on within 10 % of off. ``*_cpu_ms_per_slot``
compares ``replicas_cpu_ms_per_slot``, the replica processes' own CPU time per slot
(``getrusage`` of the children; the database server's is not in it), which the other
work on a shared machine disturbs far less than the wall time. Each on pass reports
what the governance step did (``governance``: SLA slots judged, misses, retention
runs, seconds, and ``share_of_seconds``, the longest replica's step over the pass's
seconds; their median is ``governance_overhead.*_governance_step_share``, the part of
the on passes' time that is the governance step itself). The reference insert runs
once, on the last pass's database, and ``one_replica_over_reference`` is the
governance-on median's.
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

from benchmarks._common import (
    add_governance_arguments,
    children_cpu_s,
    governance_passes,
    machine_load,
    overhead,
    scratch_database,
)
from nbcast.clock import FixedClock, SystemClock
from nbcast.db import Database
from nbcast.oversight.jobs import JobRunner
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run

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
SLA = {"delivered_within": "1m"}
"""The promise of every ``--sla-every``-th definition: the shortest, so the monitor has
slots to judge within the benchmark's minutes."""


def schedule_for(i: int) -> dict[str, Any]:
    zone = ZONES[i % len(ZONES)]
    kind = i % 3
    if kind == 0:
        return {"cron": "* * * * *", "timezone": zone, "overlap": "allow"}
    if kind == 1:
        return {"cron": f"{i % 60} * * * *", "timezone": zone}
    return {"cron": f"{i % 60} {i % 24} * * *", "timezone": zone}


def spec_for(i: int, sla_every: int) -> dict[str, Any]:
    spec: dict[str, Any] = {"schedule": schedule_for(i)}
    if sla_every > 0 and i % sla_every == 0:
        spec["sla"] = dict(SLA)
    return spec


def seed(db: Database, count: int, published: datetime, sla_every: int = 0) -> None:
    """Insert ``count`` definitions with one version each (setup, not measured), every
    ``sla_every``-th with an SLA."""
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
                        "spec": json.dumps(spec_for(i, sla_every)),
                        "at": published,
                    }
                    for i in ids
                ],
            )


def reset(db: Database) -> None:
    """Back to the seeded definitions: no runs, no schedule state, nothing judged (the
    audit log is append-only and keeps its entries)."""
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "TRUNCATE runs, schedule_states, sla_misses, sla_watermarks, governance_jobs "
                "CASCADE"
            )
        )


def _replica(url: str, now: datetime, index: int, out: Any, governed: bool) -> None:
    db = Database.open(url, upgrade=False)
    clock = FixedClock(now)
    result = Materializer(db, clock, name=f"bench-{index}", batch=500).tick(now)
    ran: dict[str, dict[str, Any]] = {}
    if governed:  # what a scheduler service replica runs after its tick
        ran = JobRunner(db, clock, owner=f"bench-{index}").step()
    out.put((result.slots, ran))
    db.dispose()


def _governance_summary(steps: list[dict[str, dict[str, Any]]], elapsed: float) -> dict[str, Any]:
    """What the replicas' governance steps did, added up; ``share_of_seconds`` is the
    longest replica's step over the measurement's seconds (what the step adds to a
    replica's time, whatever the machine's load does to the rest)."""
    sla = [step["sla"] for step in steps if "sla" in step]
    longest = max((sum(j.get("seconds", 0.0) for j in step.values()) for step in steps), default=0)
    return {
        "share_of_seconds": round(longest / elapsed, 3) if elapsed else None,
        "sla_checks": len(sla),
        "sla_definitions": sum(s.get("definitions", 0) for s in sla),
        "sla_slots": sum(s.get("slots", 0) for s in sla),
        "sla_misses": sum(s.get("misses", 0) for s in sla),
        "sla_failed": sum(s.get("failed", 0) for s in sla),
        "retention_runs": sum(1 for step in steps if "retention" in step),
        "sla_seconds": [s.get("seconds", 0.0) for s in sla],
        "retention_seconds": [
            step["retention"].get("seconds", 0.0) for step in steps if "retention" in step
        ],
    }


def throughput(url: str, replicas: int, now: datetime, governed: bool = False) -> dict[str, Any]:
    db = Database.open(url, upgrade=False)
    reset(db)
    started = time.perf_counter()
    Materializer(db, FixedClock(now), name="sync").sync()
    sync_seconds = time.perf_counter() - started
    queue: Any = multiprocessing.get_context("fork").Queue()
    procs = [
        multiprocessing.get_context("fork").Process(
            target=_replica, args=(url, now, i, queue, governed)
        )
        for i in range(replicas)
    ]
    cpu = children_cpu_s()
    started = time.perf_counter()
    for p in procs:
        p.start()
    answers = [queue.get() for _ in procs]
    slots = sum(n for n, _ in answers)
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    cpu = children_cpu_s() - cpu
    with db.session() as session:
        rows = session.scalar(sa.select(sa.func.count()).select_from(Run))
    db.dispose()
    result = {
        "replicas": replicas,
        "slots": slots,
        "rows": rows,
        "seconds": round(elapsed, 2),
        "slots_per_s": round(slots / elapsed),
        "sync_seconds": round(sync_seconds, 2),
        "replicas_cpu_ms_per_slot": round(1000 * cpu / max(slots, 1), 4),
    }
    if governed:
        result["governance"] = _governance_summary([ran for _, ran in answers], elapsed)
    return result


def reference_insert(url: str, rows: int) -> dict[str, Any]:
    """A plain batched INSERT … ON CONFLICT DO NOTHING of ``rows`` pre-built runs."""
    db = Database.open(url, upgrade=False)
    reset(db)
    from nbcast.db import insert_many_ignore

    built: list[dict[str, Any]] = [
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


def fire_latency(
    url: str, minutes: float, active: int, replicas: int = 1, governed: bool = False
) -> dict[str, Any]:
    """Run the real scheduler service for ``minutes`` with ``active`` definitions
    (the rest paused) and measure due instant -> row committed for every slot that
    fell due after the service was up; with ``governed`` an oversight service per
    replica runs beside them."""
    from nbcast.oversight.service import OversightService
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
    services: list[Any] = []
    overseers: list[OversightService] = []
    recorders: list[_Recording] = []
    for i in range(replicas):
        service = SchedulerService(db, SystemClock(), name=f"latency-{i}", batch=500, max_sleep=1.0)
        service.materializer = recorder = _Recording(
            db, service.clock, name=f"latency-{i}", batch=500
        )
        recorders.append(recorder)
        services.append(service)
        if governed:
            overseers.append(OversightService(db, SystemClock(), {}, name=f"oversight-{i}"))
    threads = [threading.Thread(target=s.run) for s in [*services, *overseers]]
    for t in threads:
        t.start()
    time.sleep(minutes * 60)
    for s in [*services, *overseers]:
        s.stop()
    for t in threads:
        t.join()
    values = sorted(v for r in recorders for fire, v in r.samples if fire >= measured_from)
    with db.engine.connect() as conn:
        misses = int(conn.execute(sa.text("SELECT count(*) FROM sla_misses")).scalar() or 0)
    db.dispose()
    if not values:
        return {"samples": 0}
    result: dict[str, Any] = {
        "active_definitions": active,
        "replicas": replicas,
        "samples": len(values),
        "p50_s": round(statistics.median(values), 3),
        "p99_s": round(values[int(len(values) * 0.99) - 1], 3),
        "max_s": round(values[-1], 3),
    }
    if governed:
        result["governance"] = {
            "sla_misses": misses,
            "failures": sum(o.jobs.failures for o in overseers),
        }
    return result


def one_pass(args: argparse.Namespace, on: bool, reference: bool) -> dict[str, Any]:
    """Throughput (1 and 3 replicas) and fire latency on a freshly seeded database,
    governance ``on`` or not (set before the replicas fork); with ``reference``, the
    reference insert too."""
    figures: dict[str, Any] = {}
    with scratch_database() as url:
        db = Database.open(url)
        seed(db, args.definitions, T0, args.sla_every)
        db.dispose()
        now = T0 + timedelta(minutes=args.minutes_due)
        figures["one_replica"] = throughput(url, 1, now, on)
        figures["three_replicas"] = throughput(url, 3, now, on)
        figures["fire_latency"] = {}
        if args.latency_minutes > 0:
            for n in sorted({10_000, args.definitions}):
                figures["fire_latency"][f"{n}_definitions"] = fire_latency(
                    url, args.latency_minutes, n, governed=on
                )
        if reference:
            figures["reference"] = reference_insert(url, figures["one_replica"]["slots"])
    return figures


def _both(passes: list[dict[str, Any]], on: list[bool], pick: Any) -> dict[str, Any]:
    return {
        "governance_on": [pick(p) for p, o in zip(passes, on, strict=True) if o],
        "governance_off": [pick(p) for p, o in zip(passes, on, strict=True) if not o],
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--definitions", type=int, default=100_000)
    parser.add_argument("--minutes-due", type=int, default=10)
    parser.add_argument("--latency-minutes", type=float, default=2.0)
    parser.add_argument(
        "--sla-every", type=int, default=100, help="every K-th definition declares an SLA"
    )
    add_governance_arguments(parser)
    args = parser.parse_args()
    load_before = machine_load()
    order = governance_passes(args.governance, args.repeat)
    passes = [one_pass(args, on, i == len(order) - 1) for i, on in enumerate(order)]
    reference = passes[-1]["reference"]
    governed: dict[str, Any] = {"governance": args.governance}
    if args.governance != "both":
        [figures] = passes
        one, three = figures["one_replica"], figures["three_replicas"]
        latency = figures["fire_latency"]
        one_rate: float = one["slots_per_s"]
        overheads: dict[str, Any] = {}
    else:
        governed["repeat"] = args.repeat
        one = _both(passes, order, lambda p: p["one_replica"])
        three = _both(passes, order, lambda p: p["three_replicas"])
        latency = {
            key: _both(passes, order, lambda p, k=key: p["fire_latency"][k])
            for key in passes[0]["fire_latency"]
        }
        overheads = {}
        for name, sides in (("one_replica", one), ("three_replicas", three)):
            overheads[f"{name}_slots_per_s"] = overhead(
                "slots_per_s",
                [r["slots_per_s"] for r in sides["governance_on"]],
                [r["slots_per_s"] for r in sides["governance_off"]],
            )
            overheads[f"{name}_cpu_ms_per_slot"] = overhead(
                "replicas_cpu_ms_per_slot",
                [r["replicas_cpu_ms_per_slot"] for r in sides["governance_on"]],
                [r["replicas_cpu_ms_per_slot"] for r in sides["governance_off"]],
                higher_is_better=False,
            )
            shares = [r["governance"]["share_of_seconds"] for r in sides["governance_on"]]
            overheads[f"{name}_governance_step_share"] = {
                "on": shares,
                "median_on": round(statistics.median(shares), 3),
            }
        for key, sides in latency.items():
            if not all(r.get("samples") for side in sides.values() for r in side):
                continue
            for figure in ("p50_s", "p99_s"):
                overheads[f"fire_latency_{key}_{figure}"] = overhead(
                    figure,
                    [r[figure] for r in sides["governance_on"]],
                    [r[figure] for r in sides["governance_off"]],
                    higher_is_better=False,
                )
        one_rate = overheads["one_replica_slots_per_s"]["median_on"]
    print(
        json.dumps(
            {
                "benchmark": "materialize",
                "definitions": args.definitions,
                "minutes_due": args.minutes_due,
                **governed,
                "sla_every": args.sla_every,
                "throughput": {
                    "one_replica": one,
                    "three_replicas": three,
                    "reference_insert_rows_per_s": reference["rows_per_s"],
                    "one_replica_over_reference": round(one_rate / reference["rows_per_s"], 3),
                },
                "fire_latency": latency,
                **({"governance_overhead": overheads} if overheads else {}),
                "targets": {"slots_per_s_one_replica": 20_000, "p99_fire_latency_s": 1.0},
                "machine": {"before": load_before, "after": machine_load()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
