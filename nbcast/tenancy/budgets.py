"""Daily budgets: what a tenant's runs may use per UTC day, and the use that counts.

A tenant may have a **warehouse budget** (bytes its runs' queries may read per day,
``budget_warehouse_bytes_per_day``) and a **CPU budget** (kernel CPU seconds per day,
``budget_cpu_s_per_day``); None is no budget. ``tenant_usage_days`` holds each
tenant's use per UTC day, added to by the execution plane in the transaction that
records an attempt's end (:func:`add_usage`): the attempt's kernel CPU seconds and the
bytes its queries returned.

Once a budget is spent, the claim (:mod:`nbcast.executor.queue`) leases none of the
tenant's runs: their due QUEUED runs wait with reason ``budget`` — visible in ``runs
list``, the API and the status pages — until the next UTC day, when the use starts
again from zero and the claim takes them as usual. Other tenants are not touched.
Inside a run, a query that would read past the bytes left when its run was claimed
fails with :class:`~nbcast.errors.BudgetExhausted` (``limit`` ``budget``). Runs
already under way finish: a budget can be overshot by what the tenant's running runs
use after it is spent (at most its concurrency quota times one run each).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite

from nbcast.tenancy.models import Tenant, TenantUsageDay

__all__ = ["BudgetState", "Use", "add_usage", "budget_state", "usage_day"]


def usage_day(now: datetime) -> date:
    """The UTC day ``now`` falls in: the period of every budget."""
    return now.astimezone(UTC).date()


@dataclass(frozen=True)
class Use:
    """What one attempt used, as :func:`add_usage` adds it."""

    tenant_id: int
    cpu_s: float
    warehouse_bytes: int


def add_usage(conn: sa.Connection, uses: Iterable[Use], now: datetime) -> None:
    """Add ``uses`` to their tenants' use of ``now``'s UTC day (one upsert per tenant)."""
    totals: dict[int, list[Any]] = {}
    for use in uses:
        entry = totals.setdefault(use.tenant_id, [0.0, 0, 0])
        entry[0] += max(0.0, float(use.cpu_s or 0.0))
        entry[1] += max(0, int(use.warehouse_bytes or 0))
        entry[2] += 1
    if not totals:
        return
    day = usage_day(now)
    rows = [
        {"tenant_id": t, "day": day, "cpu_s": c, "warehouse_bytes": b, "attempts": n}
        for t, (c, b, n) in sorted(totals.items())
    ]
    table = TenantUsageDay.__table__
    insert: Any = (postgresql if conn.dialect.name == "postgresql" else sqlite).insert(table)
    statement = insert.on_conflict_do_update(
        index_elements=["tenant_id", "day"],
        set_={
            "cpu_s": table.c.cpu_s + insert.excluded.cpu_s,
            "warehouse_bytes": table.c.warehouse_bytes + insert.excluded.warehouse_bytes,
            "attempts": table.c.attempts + insert.excluded.attempts,
        },
    )
    conn.execute(statement, rows)


@dataclass(frozen=True)
class BudgetState:
    """A tenant's budgets against today's use."""

    spent: bool
    """A budget is used up: the tenant's runs wait until the next UTC day."""
    bytes_left: int | None
    """Warehouse bytes left today (None: no warehouse budget)."""


def budget_state(conn: sa.Connection, tenant: Tenant, now: datetime) -> BudgetState:
    """``tenant``'s budgets against its use today (one row read; none without budgets)."""
    byte_budget, cpu_budget = tenant.budget_warehouse_bytes_per_day, tenant.budget_cpu_s_per_day
    if byte_budget is None and cpu_budget is None:
        return BudgetState(False, None)
    row = conn.execute(
        sa.select(TenantUsageDay.cpu_s, TenantUsageDay.warehouse_bytes).where(
            TenantUsageDay.tenant_id == tenant.id, TenantUsageDay.day == usage_day(now)
        )
    ).first()
    cpu, used = (float(row[0]), int(row[1])) if row is not None else (0.0, 0)
    left = None if byte_budget is None else max(0, byte_budget - used)
    spent = (left is not None and left <= 0) or (cpu_budget is not None and cpu >= cpu_budget)
    return BudgetState(spent, left)
