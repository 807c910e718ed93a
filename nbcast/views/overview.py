"""What the status page's overview shows a tenant, read in one call.

:func:`overview` gathers, for the caller's tenant only: the services' health (rows of
the installation, shared by every tenant: :mod:`nbcast.views.health`), its queue
against its quota, what its runs and deliveries did in the last 24 hours, its
definitions with their next fire and last state, its newest runs (SKIPPED and MISSED
slots with their reasons among them: why each slot did what it did) and its failed
deliveries. It reads the other planes' rows through their own queries.

Since the services' health is the installation's, the overview is for operators and
people with a role in an existing tenant
(:func:`~nbcast.tenancy.roles.require_role_or_operator`, checked first: a user
without one gets :class:`~nbcast.errors.AccessDeniedError`, and a user mapped to a
tenant that does not exist too). The check claims a tenant without members for its
first person, as any act does; nothing else is written. An operator mapped to a
tenant that does not exist gets an empty overview around the services' health.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.delivery.models import DeliveryState
from nbcast.delivery.queries import DeliveryRecord, list_deliveries
from nbcast.executor.records import RunRecord
from nbcast.scheduler.models import ACTIVE_STATES, RunState
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.roles import require_role_or_operator
from nbcast.views.definitions import DefinitionRecord, list_definitions
from nbcast.views.health import Health, health

__all__ = [
    "MAX_OVERVIEW_ITEMS",
    "WINDOW",
    "Overview",
    "QueueUse",
    "overview",
    "tenant_known",
]

WINDOW = timedelta(hours=24)
"""The window of the overview's counts."""

MAX_OVERVIEW_ITEMS = 500
"""The most definitions, runs or failed deliveries one overview lists."""


@dataclass(frozen=True, kw_only=True)
class QueueUse:
    """A tenant's runs waiting and running, against its quota."""

    queued: int = 0
    running: int = 0
    """LEASED and RUNNING: held by a worker."""
    max_concurrent_runs: int = 0


@dataclass(frozen=True, kw_only=True)
class Overview:
    """The overview of one tenant (module docstring)."""

    tenant: str
    checked_at: datetime
    health: Health
    queue: QueueUse
    runs_24h: dict[str, int] = field(default_factory=dict)
    """Runs whose fire time lies in the last :data:`WINDOW`, by state."""
    deliveries_24h: dict[str, int] = field(default_factory=dict)
    """Ledger rows made in the last :data:`WINDOW`, by state."""
    definitions: list[DefinitionRecord] = field(default_factory=list)
    more_definitions: bool = False
    recent_runs: list[RunRecord] = field(default_factory=list)
    """Newest first."""
    failed_deliveries: list[DeliveryRecord] = field(default_factory=list)
    """Newest first."""

    @property
    def active(self) -> bool:
        """Whether something of the tenant is queued or running (the page refreshes)."""
        return bool(self.queue.queued or self.queue.running) or any(
            r.state in ACTIVE_STATES for r in self.recent_runs
        )


def _bounded(value: int) -> int:
    return max(1, min(int(value), MAX_OVERVIEW_ITEMS))


def overview(
    session: Session,
    caller: Caller,
    now: datetime,
    *,
    definitions: int = 100,
    runs: int = 30,
    failed_deliveries: int = 20,
) -> Overview:
    """The overview of the caller's tenant as of ``now`` (module docstring); each list
    holds at most its count (1 to :data:`MAX_OVERVIEW_ITEMS`)."""
    from nbcast.delivery.models import Delivery
    from nbcast.executor.queries import list_runs
    from nbcast.scheduler.models import Run

    require_role_or_operator(session, caller, "reading the overview", now)
    services = health(session, now)
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == caller.tenant))
    if tenant is None:
        return Overview(tenant=caller.tenant, checked_at=now, health=services, queue=QueueUse())
    active = dict(
        session.execute(
            sa.select(Run.state, sa.func.count())
            .where(Run.tenant_id == tenant.id, Run.state.in_([s.value for s in ACTIVE_STATES]))
            .group_by(Run.state)
        ).all()
    )
    queue = QueueUse(
        queued=int(active.get(RunState.QUEUED, 0)),
        running=int(active.get(RunState.LEASED, 0)) + int(active.get(RunState.RUNNING, 0)),
        max_concurrent_runs=tenant.max_concurrent_runs,
    )
    since = now - WINDOW
    runs_24h = {
        state: int(n)
        for state, n in session.execute(
            sa.select(Run.state, sa.func.count())
            .where(Run.tenant_id == tenant.id, Run.fire_at >= since, Run.fire_at <= now)
            .group_by(Run.state)
        ).all()
    }
    deliveries_24h = {
        state: int(n)
        for state, n in session.execute(
            sa.select(Delivery.state, sa.func.count())
            .where(Delivery.tenant_id == tenant.id, Delivery.created_at >= since)
            .group_by(Delivery.state)
        ).all()
    }
    listed = list_definitions(session, caller, limit=_bounded(definitions))
    recent = list_runs(session, caller, order="desc", limit=_bounded(runs))
    failed = list_deliveries(
        session, caller, state=DeliveryState.FAILED.value, limit=_bounded(failed_deliveries)
    )
    return Overview(
        tenant=caller.tenant,
        checked_at=now,
        health=services,
        queue=queue,
        runs_24h=runs_24h,
        deliveries_24h=deliveries_24h,
        definitions=listed.items,
        more_definitions=listed.next_after is not None,
        recent_runs=recent.items,
        failed_deliveries=failed.items,
    )


def tenant_known(session: Session, caller: Caller) -> bool:
    """Whether the caller's tenant has a row yet (a page of an unknown tenant's object
    is "not found"; its lists are empty)."""
    return session.scalar(sa.select(Tenant.id).where(Tenant.name == caller.tenant)) is not None
