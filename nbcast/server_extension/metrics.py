"""Prometheus metrics read from the database at each scrape.

nbcast's state lives in its database, shared by every scheduler, worker and
delivery worker, so the metrics are counts of rows taken when Prometheus scrapes
(:class:`DatabaseCollector`, a ``prometheus_client`` custom collector), not
counters kept in one process: any server of the installation reports the same
numbers, and a restart loses nothing.

===========================================  =======================================
family                                       labels
===========================================  =======================================
``nbcast_up``                                — (0 when the database cannot be read)
``nbcast_runs``                              ``state``
``nbcast_slots_materialized``                ``state``, ``reason`` (scheduled runs:
                                             SKIPPED and MISSED with their reasons)
``nbcast_queue_depth``                       —
``nbcast_tenant_queue_depth``                ``tenant`` (administrators only, below)
``nbcast_queue_oldest_age_seconds``          — (the oldest due QUEUED run's wait)
``nbcast_scheduler_lag_seconds``             —
``nbcast_services_alive``                    ``kind``
``nbcast_service_heartbeat_lag_seconds``     ``kind`` (the freshest beat's age)
``nbcast_run_attempts``                      ``outcome``
``nbcast_run_duration_seconds``              histogram of finished attempts
``nbcast_deliveries``                        ``channel``, ``state``
``nbcast_render_duration_seconds``           histogram of rendered renditions
``nbcast_link_opens_total``                  —
===========================================  =======================================

**Bounded labels.** No label carries a run, a definition, a recipient or a host.
Label values come from nbcast's own enumerations (states, reasons, outcomes,
channel and service kinds); each family keeps at most :data:`MAX_LABEL_VALUES`
distinct values and folds the rest into ``other``. The per-tenant queue depth
names tenants, which one tenant must not learn about another, so it is only
served to administrators (``NbcastApp.admin_users``) and on an open endpoint the
operator chose (``metrics_open``), and only for the :data:`MAX_TENANTS` deepest
queues (the rest summed under ``other``).

Every family is one grouped query; on a million runs a scrape costs a few table
scans, so scrape every 15–60 s, not every second.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector, CollectorRegistry
from sqlalchemy.orm import Session

from nbcast.clock import Clock
from nbcast.db import Database

__all__ = [
    "DURATION_BUCKETS",
    "MAX_LABEL_VALUES",
    "MAX_TENANTS",
    "DatabaseCollector",
    "metrics_registry",
]

MAX_LABEL_VALUES = 50
"""Distinct values a label keeps in one family; the rest are ``other``."""

MAX_TENANTS = 50
"""Tenants named in the per-tenant queue depth (the deepest queues)."""

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Upper bounds (seconds) of the duration histograms' buckets."""

OTHER = "other"
log = logging.getLogger(__name__)
SERVICE_KINDS = ("scheduler", "worker", "delivery-worker")


def _bounded(
    counts: Iterable[tuple[tuple[str, ...], float]],
) -> list[tuple[tuple[str, ...], float]]:
    """Label tuples with their values, at most :data:`MAX_LABEL_VALUES` distinct
    values per label position (the largest kept), the rest folded into ``other``."""
    rows = [
        (tuple("" if v is None else str(v)[:64] for v in labels), value) for labels, value in counts
    ]
    if not rows:
        return []
    width = len(rows[0][0])
    keep: list[set[str]] = []
    for position in range(width):
        totals: dict[str, float] = {}
        for labels, value in rows:
            totals[labels[position]] = totals.get(labels[position], 0.0) + value
        largest = sorted(totals, key=lambda name: (-totals[name], name))[:MAX_LABEL_VALUES]
        keep.append(set(largest))
    merged: dict[tuple[str, ...], float] = {}
    for labels, value in rows:
        key = tuple(v if v in keep[i] else OTHER for i, v in enumerate(labels))
        merged[key] = merged.get(key, 0.0) + value
    return sorted(merged.items())


def _gauge(name: str, doc: str, labels: Sequence[str], rows: Any) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc, labels=list(labels))
    for values, value in _bounded((tuple(row[:-1]), float(row[-1])) for row in rows):
        family.add_metric(list(values), value)
    return family


def _histogram(session: Session, name: str, doc: str, column: Any, where: Any) -> Metric:
    """A histogram of ``column`` (seconds) over the rows ``where`` selects: one query
    that counts each bucket."""
    cases = [sa.func.sum(sa.case((column <= bound, 1), else_=0)) for bound in DURATION_BUCKETS]
    row = session.execute(
        sa.select(sa.func.count(), sa.func.coalesce(sa.func.sum(column), 0.0), *cases).where(
            where, column.is_not(None)
        )
    ).one()
    count, total = int(row[0]), float(row[1])
    buckets = [(repr(bound), float(row[2 + i] or 0)) for i, bound in enumerate(DURATION_BUCKETS)]
    buckets.append(("+Inf", float(count)))
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], buckets, sum_value=total)
    return family


class DatabaseCollector(Collector):
    """The module's families, counted in the database at each :meth:`collect`."""

    def __init__(self, db: Database, clock: Clock, *, per_tenant: bool = False) -> None:
        self.db = db
        self.clock = clock
        self.per_tenant = per_tenant

    def collect(self) -> Iterator[Metric]:
        """Every family; only ``nbcast_up 0`` when the database cannot be read."""
        try:
            with self.db.session() as session:
                families = list(self._families(session, self.clock.now()))
        except Exception:
            families = []
        up = GaugeMetricFamily("nbcast_up", "Whether nbcast's database could be read.")
        up.add_metric([], 1.0 if families else 0.0)
        yield up
        yield from families

    def _families(self, session: Session, now: datetime) -> Iterator[Metric]:
        from nbcast.delivery.models import Delivery, LinkOpen, Rendition
        from nbcast.executor.models import Run, RunAttempt, RunState
        from nbcast.governance.health import health
        from nbcast.governance.models import Tenant

        yield _gauge(
            "nbcast_runs",
            "Runs by state.",
            ["state"],
            session.execute(sa.select(Run.state, sa.func.count()).group_by(Run.state)),
        )
        yield _gauge(
            "nbcast_slots_materialized",
            "Scheduled slots materialized, by the state and reason of their run "
            "(SKIPPED and MISSED slots with why).",
            ["state", "reason"],
            session.execute(
                sa.select(Run.state, sa.func.coalesce(Run.reason, ""), sa.func.count())
                .where(Run.slot_key.is_not(None))
                .group_by(Run.state, Run.reason)
            ),
        )
        queued = Run.state == RunState.QUEUED.value
        depth = session.scalar(sa.select(sa.func.count()).where(queued)) or 0
        family = GaugeMetricFamily("nbcast_queue_depth", "Runs waiting for a worker.")
        family.add_metric([], float(depth))
        yield family
        if self.per_tenant:
            yield self._tenant_depth(session, Run, Tenant)
        oldest = session.scalar(
            sa.select(sa.func.min(Run.not_before)).where(queued, Run.not_before <= now)
        )
        family = GaugeMetricFamily(
            "nbcast_queue_oldest_age_seconds",
            "How long the oldest due QUEUED run has waited (0: none waits).",
        )
        family.add_metric([], max((now - oldest).total_seconds(), 0.0) if oldest else 0.0)
        yield family

        report = health(session, now)
        family = GaugeMetricFamily(
            "nbcast_scheduler_lag_seconds", "How long the oldest due slot has waited."
        )
        family.add_metric([], report.scheduler_lag_s)
        yield family
        alive = GaugeMetricFamily(
            "nbcast_services_alive", "Service processes alive, by kind.", labels=["kind"]
        )
        lag = GaugeMetricFamily(
            "nbcast_service_heartbeat_lag_seconds",
            "Age of the freshest heartbeat of each kind of service.",
            labels=["kind"],
        )
        for kind in SERVICE_KINDS:
            alive.add_metric([kind], float(report.alive(kind)))
            ages = [s.lag_s for s in report.services if s.kind == kind]
            if ages:
                lag.add_metric([kind], min(ages))
        yield alive
        yield lag

        yield _gauge(
            "nbcast_run_attempts",
            "Run attempts by outcome (in_flight: not ended).",
            ["outcome"],
            session.execute(
                sa.select(
                    sa.func.coalesce(RunAttempt.outcome, "in_flight"), sa.func.count()
                ).group_by(RunAttempt.outcome)
            ),
        )
        yield _histogram(
            session,
            "nbcast_run_duration_seconds",
            "How long finished run attempts took.",
            RunAttempt.duration_s,
            RunAttempt.ended_at.is_not(None),
        )
        yield _gauge(
            "nbcast_deliveries",
            "Deliveries (ledger rows) by channel and state.",
            ["channel", "state"],
            session.execute(
                sa.select(Delivery.channel, Delivery.state, sa.func.count()).group_by(
                    Delivery.channel, Delivery.state
                )
            ),
        )
        yield _histogram(
            session,
            "nbcast_render_duration_seconds",
            "How long rendering a rendition took.",
            Rendition.seconds,
            Rendition.rendered_at.is_not(None),
        )
        opens = CounterMetricFamily("nbcast_link_opens", "Signed links opened.")
        opens.add_metric([], float(session.scalar(sa.select(sa.func.count(LinkOpen.id))) or 0))
        yield opens

    def _tenant_depth(self, session: Session, run: Any, tenant: Any) -> Metric:
        from nbcast.executor.models import RunState

        rows = session.execute(
            sa.select(tenant.name, sa.func.count())
            .select_from(run)
            .join(tenant, tenant.id == run.tenant_id)
            .where(run.state == RunState.QUEUED.value)
            .group_by(tenant.name)
            .order_by(sa.func.count().desc(), tenant.name)
        ).all()
        family = GaugeMetricFamily(
            "nbcast_tenant_queue_depth",
            f"Runs waiting for a worker, by tenant (the {MAX_TENANTS} deepest; the rest as other).",
            labels=["tenant"],
        )
        rest = 0
        for i, (name, count) in enumerate(rows):
            if i < MAX_TENANTS:
                family.add_metric([str(name)], float(count))
            else:
                rest += int(count)
        if rest:
            family.add_metric([OTHER], float(rest))
        return family


def metrics_registry(db: Database, clock: Clock, *, per_tenant: bool) -> CollectorRegistry:
    """A registry of the database's families and this process's own (CPU, memory,
    open files, Python's garbage collector)."""
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(db, clock, per_tenant=per_tenant))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry
