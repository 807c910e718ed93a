"""Claims per second from a PostgreSQL queue of 100,000 runs with 4 claimers.

Prints JSON. Four claimer processes do what a worker does with each run, until the
queue is empty: lease a batch (``RunQueue.claim``: fair-share order, a tenant lock,
the recount under it, ``FOR UPDATE SKIP LOCKED``, attempt rows — one round trip,
the server-side function of migration 0004), mark the batch RUNNING
(``start_many``) and record the batch's successes (``succeed_many``: fenced, attempt
rows closed, committed durably). Completing every run keeps the measurement in a
worker's steady state, where leases end and live counts stay small.

Side by side, two references on the same seeded queue:

- ``reference_lifecycle``: the same three transactions per batch in plain SQL — an
  ``UPDATE … WHERE id IN (SELECT … FOR UPDATE SKIP LOCKED LIMIT k) RETURNING id``,
  then ``UPDATE … SET state = 'RUNNING'`` and ``UPDATE … SET state = 'SUCCEEDED'``
  by id — with no quotas, fairness, fencing or attempt rows, and with the index
  such a queue would have (``(not_before, id) WHERE state = 'QUEUED'``): the ratio is
  what quotas, fairness, fencing and attempt records cost;
- ``reference_claim_only``: the plain claim statement alone (nothing started or
  completed), the floor of any claim on this machine.

This machine's PostgreSQL runs with ``autovacuum = off``. A queue table needs
vacuuming as it churns (dead index entries are what the quota count and the queue
scan step over), so when the server's autovacuum is off, each measurement runs a
``VACUUM (ANALYZE) runs, run_attempts`` every 2 s beside the claimers — what
autovacuum does with the per-table settings nbcast's migration 0004 gives these
tables — and reports how many passes ran. References and nbcast get the same.

Target: ≥ 2,000 claims/s.

**Governance** (``--governance on|off|both``, default ``both``; ``--repeat N``, default
2). Every tenant is seeded with daily budgets no run can spend (1 PB of warehouse
bytes, 10⁹ CPU seconds) and every success reports 0.01 CPU seconds, on both sides;
only the claimers' accounting (``RunQueue(accounting=…)``) differs:

- *on* (nbcast as shipped): the claim function reads each tenant's use of the day
  against its budgets (``p_budgets`` true, one ``tenant_usage_days`` lookup per
  tenant claimed for) and every ``succeed_many`` upserts the batch's CPU seconds and
  attempts into ``tenant_usage_days`` in its transaction (``add_usage``);
- *off*: neither (``p_budgets`` false, no upsert).

Roles are checked in the command layer only and audit entries are not written on
this path, so budgets and usage are all that governance adds here. ``both`` runs
on, off, on, off … each on a freshly seeded queue and prints every pass
(``nbcast.governance_on`` / ``governance_off``, in that order of passes), and
``governance_overhead``: the medians of ``claims_per_s`` and their ratio off/on
(target: on within 10 % of off), and ``governance_overhead_claimers_cpu``: the same
for ``claimers_cpu_ms_per_claim``, the claimer processes' own CPU time per claim
(``getrusage`` of the children), which the other work on a shared machine disturbs
far less than the wall time. ``usage_attempts`` counts the attempts the pass
added to ``tenant_usage_days`` (0 when off). The references run once: governance
does not touch them. ``nbcast_over_reference_lifecycle`` is the governance-on median's.
"""

from __future__ import annotations

import argparse
import functools
import json
import multiprocessing
import threading
import time
from typing import Any

import sqlalchemy as sa

from benchmarks._common import (
    NEVER_SPENT_BYTES,
    NEVER_SPENT_CPU_S,
    add_governance_arguments,
    children_cpu_s,
    governance_passes,
    machine_load,
    overhead,
    scratch_database,
)
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.executor.leases import Success
from nbcast.executor.queue import RunQueue

TENANTS = 10
CPU_S = 0.01
"""CPU seconds each success reports (what governance-on adds to the day's use)."""


def seed(url: str, runs: int) -> None:
    db = Database.open(url, upgrade=False)
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "INSERT INTO tenants (name, created_at, max_concurrent_runs, cpus_per_run, "
                "memory_mb_per_run, run_timeout_s, max_attempts, share, "
                "budget_warehouse_bytes_per_day, budget_cpu_s_per_day) SELECT 't' || g, now(), "
                "1000000, 1, 512, 60, 3, 1, :bytes, :cpu FROM generate_series(1, :n) g"
            ),
            {"n": TENANTS, "bytes": NEVER_SPENT_BYTES, "cpu": NEVER_SPENT_CPU_S},
        )
        conn.execute(
            sa.text(
                "INSERT INTO users (tenant_id, name, role, created_at) "
                "VALUES (1, 'bench', 'author', now())"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO report_definitions (tenant_id, name, source_path, created_by, "
                "created_at, latest_version) SELECT id, 'r', '/r.ipynb', 1, now(), 1 FROM tenants"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO definition_versions (tenant_id, definition_id, version, sha256, "
                "notebook_json, parameter_schema, spec, author_id, message, created_at) "
                "SELECT tenant_id, id, 1, 'x', '{}', '[]', '{}', 1, '', now() "
                "FROM report_definitions"
            )
        )
        conn.execute(
            sa.text(
                "INSERT INTO runs (tenant_id, definition_id, version_id, version, kind, slot_key, "
                "fire_at, state, parameters, serial, not_before, created_at) "
                "SELECT d.tenant_id, d.id, v.id, 1, 'manual', NULL, now(), 'QUEUED', '{}', false, "
                "now() - interval '1 minute', now() FROM generate_series(1, :n) g "
                "JOIN report_definitions d ON d.id = 1 + g % (SELECT count(*) FROM tenants) "
                "JOIN definition_versions v ON v.definition_id = d.id"
            ),
            {"n": runs},
        )
        conn.execute(sa.text("ANALYZE"))
    db.dispose()


def _claimer(url: str, index: int, batch: int, out: Any, accounting: bool = True) -> None:
    db = Database.open(url, upgrade=False)
    queue = RunQueue(db, SystemClock(), owner=f"claimer-{index}", accounting=accounting)
    claimed = 0
    while True:
        leases = queue.start_many(queue.claim(batch))
        if not leases and _drained(db):
            break
        queue.succeed_many(
            [
                Success(lease=lease, artifact_sha256=None, duration_s=0.0, cpu_s=CPU_S)
                for lease in leases
            ]
        )
        claimed += len(leases)
    out.put(claimed)
    db.dispose()


def _plain_queue_index(url: str) -> None:
    """The index a plain queue (no tenants) would have: due order over QUEUED rows."""
    engine = sa.create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            sa.text("CREATE INDEX ix_plain_queue ON runs (not_before, id) WHERE state = 'QUEUED'")
        )
        conn.execute(sa.text("ANALYZE runs"))
    engine.dispose()


def _reference(url: str, index: int, batch: int, out: Any, lifecycle: bool = True) -> None:
    db = Database.open(url, upgrade=False)
    claimed = 0
    while True:
        with db.engine.begin() as conn:
            ids = list(
                conn.execute(
                    sa.text(
                        "UPDATE runs SET state = 'LEASED', attempt = attempt + 1, "
                        "lease_owner = :o, lease_expires_at = now() + interval '30 seconds' "
                        "WHERE id IN (SELECT id FROM runs WHERE state = 'QUEUED' "
                        "ORDER BY not_before, id LIMIT :k FOR UPDATE SKIP LOCKED) RETURNING id"
                    ),
                    {"o": f"ref-{index}", "k": batch},
                ).scalars()
            )
        if ids and lifecycle:
            for state in ("RUNNING", "SUCCEEDED"):
                with db.engine.begin() as conn:
                    conn.execute(
                        sa.text("UPDATE runs SET state = :s WHERE id = ANY(:ids)"),
                        {"s": state, "ids": ids},
                    )
        if not ids and _drained(db):
            break
        claimed += len(ids)
    out.put(claimed)
    db.dispose()


def _reference_claim_only(url: str, index: int, batch: int, out: Any) -> None:
    _reference(url, index, batch, out, lifecycle=False)


def _stand_in_for_autovacuum(url: str, stop: threading.Event, every: float = 2.0) -> int:
    """VACUUM the queue tables every ``every`` seconds, as autovacuum would with the
    per-table settings of migration 0004, when the server runs without autovacuum
    (this machine's does). Returns how many passes ran."""
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    passes = 0
    with engine.connect() as conn:
        if conn.execute(sa.text("SHOW autovacuum")).scalar() == "on":
            return 0
        while not stop.wait(every):
            conn.execute(sa.text("VACUUM (ANALYZE) runs, run_attempts"))
            passes += 1
    engine.dispose()
    return passes


def measure(url: str, target: Any, claimers: int, batch: int) -> dict[str, Any]:
    context = multiprocessing.get_context("fork")
    queue: Any = context.Queue()
    procs = [context.Process(target=target, args=(url, i, batch, queue)) for i in range(claimers)]
    stop = threading.Event()
    vacuums: list[int] = []
    vacuum = threading.Thread(
        target=lambda: vacuums.append(_stand_in_for_autovacuum(url, stop)), daemon=True
    )
    cpu = children_cpu_s()
    started = time.perf_counter()
    vacuum.start()
    for p in procs:
        p.start()
    total = sum(queue.get() for _ in procs)
    for p in procs:
        p.join()
    elapsed = time.perf_counter() - started
    cpu = children_cpu_s() - cpu
    stop.set()
    vacuum.join()
    return {
        "claimed": total,
        "seconds": round(elapsed, 2),
        "claims_per_s": round(total / elapsed),
        "vacuum_passes": vacuums[0] if vacuums else 0,
        "claimers_cpu_ms_per_claim": round(1000 * cpu / max(total, 1), 3),
    }


def _drained(db: Database) -> bool:
    with db.engine.connect() as conn:
        return not conn.execute(
            sa.text("SELECT EXISTS (SELECT 1 FROM runs WHERE state = 'QUEUED')")
        ).scalar()


def _usage_attempts(url: str) -> int:
    engine = sa.create_engine(url)
    with engine.connect() as conn:
        n = conn.execute(sa.text("SELECT coalesce(sum(attempts), 0) FROM tenant_usage_days"))
        total = int(n.scalar() or 0)
    engine.dispose()
    return total


def measure_nbcast(runs: int, claimers: int, batch: int, on: bool) -> dict[str, Any]:
    """One pass of nbcast's claimers on a freshly seeded queue, accounting ``on`` or not
    (each claimer's ``RunQueue(accounting=…)``)."""
    with scratch_database() as url:
        seed(url, runs)
        result = measure(url, functools.partial(_claimer, accounting=on), claimers, batch)
        result["usage_attempts"] = _usage_attempts(url)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=100_000)
    parser.add_argument("--claimers", type=int, default=4)
    parser.add_argument("--batch", type=int, default=10, help="runs per claim call")
    add_governance_arguments(parser)
    args = parser.parse_args()
    load_before = machine_load()
    passes = governance_passes(args.governance, args.repeat)
    sides: dict[bool, list[dict[str, Any]]] = {True: [], False: []}
    for on in passes:
        sides[on].append(measure_nbcast(args.runs, args.claimers, args.batch, on))
    references: dict[str, Any] = {}
    for name, target in (
        ("reference_lifecycle", _reference),
        ("reference_claim_only", _reference_claim_only),
    ):
        with scratch_database() as url:
            seed(url, args.runs)
            _plain_queue_index(url)
            references[name] = measure(url, target, args.claimers, args.batch)
    reference = references["reference_lifecycle"]["claims_per_s"]
    governed: dict[str, Any] = {"governance": args.governance}
    results: dict[str, Any]
    if args.governance == "both":
        governed["repeat"] = args.repeat
        cost = overhead(
            "claims_per_s",
            [r["claims_per_s"] for r in sides[True]],
            [r["claims_per_s"] for r in sides[False]],
        )
        cpu = overhead(
            "claimers_cpu_ms_per_claim",
            [r["claimers_cpu_ms_per_claim"] for r in sides[True]],
            [r["claimers_cpu_ms_per_claim"] for r in sides[False]],
            higher_is_better=False,
        )
        results = {
            "nbcast": {"governance_on": sides[True], "governance_off": sides[False]},
            "governance_overhead": cost,
            "governance_overhead_claimers_cpu": cpu,
            **references,
            "nbcast_over_reference_lifecycle": round(cost["median_on"] / reference, 3),
            "governance_off_over_reference_lifecycle": round(cost["median_off"] / reference, 3),
        }
    else:
        [nbcast] = sides[passes[0]]
        results = {
            "nbcast": nbcast,
            **references,
            "nbcast_over_reference_lifecycle": round(nbcast["claims_per_s"] / reference, 3),
        }
    print(
        json.dumps(
            {
                "benchmark": "claims",
                "runs": args.runs,
                "claimers": args.claimers,
                "batch": args.batch,
                "tenants": TENANTS,
                **governed,
                **results,
                "target_claims_per_s": 2000,
                "machine": {"before": load_before, "after": machine_load()},
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
