"""The counts behind ``/nbcast/metrics``: grouped reads of every plane's rows.

A read model above every plane (and the oversight layer's SLA misses): it reads
their rows and never writes them: each function here is one grouped ``SELECT``
over the installation's runs, attempts, deliveries, renditions or link openings,
across every tenant, returning plain values. The server extension turns them into
Prometheus families (:mod:`nbcast.server_extension.metrics`), holding no SQL of its
own; the bounding of label values is its business, not these queries'.

The per-tenant counts name tenants, which one tenant must not learn about another:
the caller decides who may see them (the metrics handler serves them to
administrators only).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.delivery.models import Delivery, LinkOpen, Rendition
from nbcast.executor.models import RunAttempt
from nbcast.oversight.models import SlaMiss
from nbcast.scheduler.models import ACTIVE_STATES, Run, RunState
from nbcast.tenancy.models import Tenant

__all__ = [
    "IN_FLIGHT",
    "QUEUE_STATES",
    "DurationHistogram",
    "TenantQueue",
    "attempt_durations",
    "attempts_by_outcome",
    "deliveries_by_channel_and_state",
    "link_opens_total",
    "oldest_due_queued",
    "queue_by_tenant_and_state",
    "queue_depth",
    "render_durations",
    "runs_by_state",
    "sla_alerts_by_state",
    "sla_misses_by_tenant_and_state",
    "slots_by_state_and_reason",
]

QUEUE_STATES: tuple[str, ...] = tuple(s.value for s in ACTIVE_STATES)
"""The states a run is in while it is in the queue: waiting (QUEUED), claimed by a
worker (LEASED), executing (RUNNING)."""

IN_FLIGHT = "in_flight"
"""The outcome reported for an attempt that has not ended."""


def _text(value: Any) -> str:
    """A state, reason or channel as its text (an enum member as its value)."""
    return "" if value is None else str(getattr(value, "value", value))


@dataclass(frozen=True, kw_only=True)
class DurationHistogram:
    """Durations in seconds, counted into buckets with the given upper bounds."""

    count: int
    total: float
    """The sum of every duration counted."""
    buckets: tuple[tuple[float, int], ...]
    """``(upper bound, how many durations are at most it)``, cumulative, in the
    order of the bounds asked for."""


@dataclass(frozen=True, kw_only=True)
class TenantQueue:
    """One tenant's runs in the queue, by state (every state of
    :data:`QUEUE_STATES` present, zero when it has none)."""

    tenant: str
    counts: dict[str, int]

    @property
    def total(self) -> int:
        """Every run of the tenant in the queue, whatever its state."""
        return sum(self.counts.values())


def runs_by_state(session: Session) -> list[tuple[str, int]]:
    """How many runs are in each state (states without runs are absent)."""
    rows = session.execute(sa.select(Run.state, sa.func.count()).group_by(Run.state))
    return [(_text(state), int(count)) for state, count in rows]


def slots_by_state_and_reason(session: Session) -> list[tuple[str, str, int]]:
    """Scheduled slots (runs with a slot key) by their run's state and reason (``""``:
    no reason), so SKIPPED and MISSED slots come with why."""
    rows = session.execute(
        sa.select(Run.state, sa.func.coalesce(Run.reason, ""), sa.func.count())
        .where(Run.slot_key.is_not(None))
        .group_by(Run.state, Run.reason)
    )
    return [(_text(state), _text(reason), int(count)) for state, reason, count in rows]


def queue_depth(session: Session) -> int:
    """How many runs wait for a worker (QUEUED, due or not)."""
    return int(
        session.scalar(sa.select(sa.func.count()).where(Run.state == RunState.QUEUED.value)) or 0
    )


def oldest_due_queued(session: Session, now: datetime) -> datetime | None:
    """When the oldest QUEUED run that is due at ``now`` became due (None: none is)."""
    return session.scalar(
        sa.select(sa.func.min(Run.not_before)).where(
            Run.state == RunState.QUEUED.value, Run.not_before <= now
        )
    )


def queue_by_tenant_and_state(session: Session) -> list[TenantQueue]:
    """Every tenant with runs in the queue, with how many are in each of
    :data:`QUEUE_STATES`; the deepest queue first (then by name). One grouped query
    (the runs' ``state`` index keeps it to the active rows)."""
    rows = session.execute(
        sa.select(Tenant.name, Run.state, sa.func.count())
        .select_from(Run)
        .join(Tenant, Tenant.id == Run.tenant_id)
        .where(Run.state.in_(QUEUE_STATES))
        .group_by(Tenant.name, Run.state)
    )
    counts: dict[str, dict[str, int]] = {}
    for name, state, count in rows:
        per_state = counts.setdefault(str(name), dict.fromkeys(QUEUE_STATES, 0))
        per_state[_text(state)] = int(count)
    queues = [TenantQueue(tenant=name, counts=c) for name, c in counts.items()]
    return sorted(queues, key=lambda q: (-q.total, q.tenant))


def attempts_by_outcome(session: Session) -> list[tuple[str, int]]:
    """Run attempts by outcome (:data:`IN_FLIGHT`: not ended)."""
    rows = session.execute(
        sa.select(sa.func.coalesce(RunAttempt.outcome, IN_FLIGHT), sa.func.count()).group_by(
            RunAttempt.outcome
        )
    )
    return [(_text(outcome), int(count)) for outcome, count in rows]


def deliveries_by_channel_and_state(session: Session) -> list[tuple[str, str, int]]:
    """Ledger rows by channel and state."""
    rows = session.execute(
        sa.select(Delivery.channel, Delivery.state, sa.func.count()).group_by(
            Delivery.channel, Delivery.state
        )
    )
    return [(_text(channel), _text(state), int(count)) for channel, state, count in rows]


def link_opens_total(session: Session) -> int:
    """How many times signed links were opened (every recorded opening)."""
    return int(session.scalar(sa.select(sa.func.count(LinkOpen.id))) or 0)


def sla_misses_by_tenant_and_state(session: Session) -> list[tuple[str, str, int]]:
    """SLA misses (:mod:`nbcast.oversight.sla`) by tenant and the slot's state."""
    rows = session.execute(
        sa.select(Tenant.name, SlaMiss.state, sa.func.count())
        .select_from(SlaMiss)
        .join(Tenant, Tenant.id == SlaMiss.tenant_id)
        .group_by(Tenant.name, SlaMiss.state)
    )
    return [(str(name), _text(state), int(count)) for name, state, count in rows]


def sla_alerts_by_state(session: Session) -> list[tuple[str, int]]:
    """SLA misses by the state of their alert (PENDING, SENT, FAILED, NONE)."""
    rows = session.execute(
        sa.select(SlaMiss.alert_state, sa.func.count()).group_by(SlaMiss.alert_state)
    )
    return [(_text(state), int(count)) for state, count in rows]


def _histogram(
    session: Session, column: Any, where: Any, bounds: Sequence[float]
) -> DurationHistogram:
    """``column`` (seconds) over the rows ``where`` selects, in one query that counts
    each bucket."""
    cases = [sa.func.sum(sa.case((column <= bound, 1), else_=0)) for bound in bounds]
    row = session.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(column), 0.0), *cases).where(
            where, column.is_not(None)
        )
    ).one()
    return DurationHistogram(
        count=int(row[0]),
        total=float(row[1]),
        buckets=tuple((float(bound), int(row[2 + i] or 0)) for i, bound in enumerate(bounds)),
    )


def attempt_durations(session: Session, bounds: Sequence[float]) -> DurationHistogram:
    """How long the finished run attempts took, in buckets of ``bounds`` seconds."""
    return _histogram(session, RunAttempt.duration_s, RunAttempt.ended_at.is_not(None), bounds)


def render_durations(session: Session, bounds: Sequence[float]) -> DurationHistogram:
    """How long rendering each rendered rendition took, in buckets of ``bounds``
    seconds."""
    return _histogram(session, Rendition.seconds, Rendition.rendered_at.is_not(None), bounds)
