"""Tenant quotas as the execution plane applies them: what one run may use, how many
may run at once, and the warehouse budget.

A tenant's quota lives on its row in ``tenants`` (the governance plane's; admins set
it with ``nbcast tenants set-quota``). The claim (:mod:`nbcast.executor.queue`) reads
it under the tenant's lock on every claim, so a change applies to the next claim:

- **concurrency** — ``max_concurrent_runs``: the claim counts the tenant's leased and
  running runs (:func:`live_runs`) *after* locking the tenant and leases at most the
  difference;
- **per run** — ``cpus_per_run``, ``memory_mb_per_run``, ``run_timeout_s``,
  ``max_attempts``: carried by each lease as a :class:`Quota` (the engine turns the
  first two into task resources, the worker bounds the timeout with
  :func:`nbcast.executor.bounds.run_timeout`);
- **fair share** — ``share``: the claim's order among tenants with work;
- **warehouse budget** — ``warehouse_budget_bytes`` per calendar month (UTC), counted
  from ``warehouse_usage`` (:func:`record_usage` writes one row per query an attempt
  made). A tenant whose budget is spent gets no new run admitted: the claim fails
  its due runs ``budget_exceeded`` (:func:`fail_over_budget`) — failing, not
  waiting, so the owner sees at once why the report did not come, instead of a
  queue that silently grows.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.executor import bounds
from nbcast.executor.models import LEASED_STATES, RunReason, RunState, WarehouseUsage
from nbcast.executor.sql import RUNS, USAGE, rowcount
from nbcast.governance.models import Tenant

__all__ = [
    "Quota",
    "budget_spent",
    "fail_over_budget",
    "live_runs",
    "month_start",
    "record_usage",
]


class _QuotaColumns(Protocol):
    """Anything with a tenant's quota columns: a ``Tenant`` or a claimed row."""

    max_concurrent_runs: int
    cpus_per_run: float
    memory_mb_per_run: int
    run_timeout_s: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class Quota:
    """What one run of a tenant may use (module docstring)."""

    max_concurrent_runs: int
    cpus_per_run: float
    memory_mb_per_run: int
    run_timeout_s: int
    max_attempts: int

    @classmethod
    def of(cls, row: _QuotaColumns) -> Quota:
        """The quota held by ``row``: a :class:`~nbcast.governance.models.Tenant`, or a
        row of the server-side claim, which returns the same columns."""
        return cls(
            max_concurrent_runs=row.max_concurrent_runs,
            cpus_per_run=row.cpus_per_run,
            memory_mb_per_run=row.memory_mb_per_run,
            run_timeout_s=row.run_timeout_s,
            max_attempts=row.max_attempts,
        )


def month_start(now: datetime) -> datetime:
    """The start of ``now``'s calendar month: the budget's period."""
    return now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)


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


def budget_spent(session: Session, tenant: Tenant, now: datetime) -> bool:
    """Whether ``tenant`` has scanned its warehouse budget this month (never, without one)."""
    if tenant.warehouse_budget_bytes is None:
        return False
    spent = session.scalar(
        sa.select(sa.func.coalesce(sa.func.sum(WarehouseUsage.bytes), 0)).where(
            WarehouseUsage.tenant_id == tenant.id, WarehouseUsage.recorded_at >= month_start(now)
        )
    )
    return int(spent or 0) >= tenant.warehouse_budget_bytes


def fail_over_budget(session: Session, tenant_id: int, now: datetime) -> int:
    """End the tenant's due QUEUED runs FAILED ``budget_exceeded``; return how many."""
    result = session.connection().execute(
        sa.update(RUNS)
        .where(
            RUNS.c.tenant_id == tenant_id,
            RUNS.c.state == RunState.QUEUED,
            RUNS.c.not_before <= now,
        )
        .values(
            state=RunState.FAILED,
            reason=RunReason.budget_exceeded,
            finished_at=now,
            error={
                "reason": RunReason.budget_exceeded.value,
                "message": "the tenant's warehouse budget for this month is spent",
            },
        )
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
) -> None:
    """Record the warehouse queries one attempt made (what the budget counts), each
    figure bounded (:mod:`nbcast.executor.bounds`)."""
    if not usage:
        return
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
