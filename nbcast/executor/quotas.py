"""Tenant quotas as the execution plane applies them: what one run may use, how many
may run at once, and the daily budgets.

A tenant's quota lives on its row in ``tenants`` (the governance plane's; admins set
it with ``nbcast tenants set-quota``). The claim (:mod:`nbcast.executor.queue`) reads
it under the tenant's lock on every claim, so a change applies to the next claim:

- **concurrency** — ``max_concurrent_runs``: the claim counts the tenant's leased and
  running runs (:func:`live_runs`) *after* locking the tenant and leases at most the
  difference;
- **per run** — ``cpus_per_run``, ``memory_mb_per_run``, ``run_timeout_s``,
  ``max_attempts``, ``max_processes_per_run``: carried by each lease as a
  :class:`Quota` (the engine turns the first two into task resources, the sandbox the
  memory and processes into limits, the worker bounds the timeout with
  :func:`nbcast.executor.bounds.run_timeout`);
- **fair share** — ``share``: the claim's order among tenants with work;
- **daily budgets** — warehouse bytes and kernel CPU seconds per UTC day
  (:mod:`nbcast.tenancy.budgets`): :func:`record_usage` writes one
  ``warehouse_usage`` row per query an attempt made and adds the attempt's use to
  its tenant's day; a tenant whose budget is spent gets no run leased — its due runs
  wait QUEUED with reason ``budget`` (:func:`hold_over_budget`) until the next day.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.executor import bounds
from nbcast.executor.sql import RUNS, USAGE
from nbcast.leasing import rowcount
from nbcast.scheduler.models import LEASED_STATES, RunReason, RunState

__all__ = [
    "Quota",
    "hold_over_budget",
    "live_runs",
    "record_usage",
]


class _QuotaColumns(Protocol):
    """Anything with a tenant's quota columns: a ``Tenant`` or a claimed row."""

    max_concurrent_runs: int
    cpus_per_run: float
    memory_mb_per_run: int
    run_timeout_s: int
    max_attempts: int
    max_processes_per_run: int


@dataclass(frozen=True, kw_only=True)
class Quota:
    """What one run of a tenant may use (module docstring)."""

    max_concurrent_runs: int
    cpus_per_run: float
    memory_mb_per_run: int
    run_timeout_s: int
    max_attempts: int
    max_processes_per_run: int = 256

    @classmethod
    def of(cls, row: _QuotaColumns) -> Quota:
        """The quota held by ``row``: a :class:`~nbcast.tenancy.models.Tenant`, or a
        row of the server-side claim, which returns the same columns."""
        return cls(
            max_concurrent_runs=row.max_concurrent_runs,
            cpus_per_run=row.cpus_per_run,
            memory_mb_per_run=row.memory_mb_per_run,
            run_timeout_s=row.run_timeout_s,
            max_attempts=row.max_attempts,
            max_processes_per_run=row.max_processes_per_run,
        )


def live_runs(session: Session, tenant_id: int) -> int:
    """The tenant's runs that hold a lease (LEASED or RUNNING): what its concurrency
    quota limits. Count it after locking the tenant, so it sees every committed claim."""
    return int(
        session.scalar(
            sa.select(sa.func.count())
            .select_from(RUNS)
            .where(RUNS.c.tenant_id == tenant_id, RUNS.c.state.in_(LEASED_STATES))
        )
        or 0
    )


def hold_over_budget(session: Session, tenant_id: int, now: datetime) -> int:
    """Mark the tenant's due QUEUED runs as waiting for its budget (reason ``budget``;
    the claim clears it when it leases them); return how many were newly marked."""
    result = session.connection().execute(
        sa.update(RUNS)
        .where(
            RUNS.c.tenant_id == tenant_id,
            RUNS.c.state == RunState.QUEUED,
            RUNS.c.not_before <= now,
            sa.or_(RUNS.c.reason.is_(None), RUNS.c.reason != RunReason.budget),
        )
        .values(reason=RunReason.budget)
    )
    return rowcount(result)


def record_usage(
    conn: sa.Connection,
    *,
    tenant_id: int,
    run_id: int,
    attempt: int,
    usage: Sequence[dict[str, Any]],
    now: datetime,
) -> int:
    """Record the warehouse queries one attempt made, each figure bounded
    (:mod:`nbcast.executor.bounds`); return the bytes they read (what the daily budget
    counts)."""
    if not usage:
        return 0
    conn.execute(
        sa.insert(USAGE),
        [
            {
                "tenant_id": tenant_id,
                "run_id": run_id,
                "attempt": attempt,
                "connection": str(item.get("connection", "default")),
                "sql_sha256": str(item.get("sql_sha256", "")),
                "rows": bounds.counter(item.get("rows", 0)),
                "bytes": bounds.counter(item.get("bytes", 0)),
                "seconds": bounds.usage_seconds(item.get("seconds", 0.0)),
                "error": item.get("error"),
                "recorded_at": now,
            }
            for item in usage
        ],
    )
    return sum(bounds.counter(item.get("bytes", 0)) for item in usage)
