"""Prometheus metrics read from the database at each scrape.

nbcast's state lives in its database, shared by every scheduler, worker and
delivery worker, so the metrics are counts of rows taken when Prometheus scrapes
(:class:`DatabaseCollector`, a ``prometheus_client`` custom collector), not
counters kept in one process: any server of the installation reports the same
numbers, and a restart loses nothing. The counting itself is the governance plane's
(:mod:`nbcast.views.metrics`); this module holds no SQL, only the
families and the bounds on their labels.

===========================================  =======================================
family                                       labels
===========================================  =======================================
``nbcast_up``                                — (0 when the database cannot be read)
``nbcast_runs``                              ``state``
``nbcast_slots_materialized``                ``state``, ``reason`` (scheduled runs:
                                             SKIPPED and MISSED with their reasons)
``nbcast_queue_depth``                       —
``nbcast_tenant_queue_depth``                ``tenant``, ``state`` (QUEUED, LEASED,
                                             RUNNING; administrators only, below)
``nbcast_queue_oldest_age_seconds``          — (the oldest due QUEUED run's wait)
``nbcast_scheduler_lag_seconds``             —
``nbcast_services_alive``                    ``kind``
``nbcast_service_heartbeat_lag_seconds``     ``kind`` (the freshest beat's age)
``nbcast_run_attempts_total``                ``outcome`` (a counter: ended attempts)
``nbcast_run_attempts_in_flight``            — (attempts under way)
``nbcast_run_duration_seconds``              histogram of finished attempts
``nbcast_deliveries_total``                  ``channel``, ``state`` (a counter: SENT,
                                             FAILED, SUPPRESSED — rows that ended)
``nbcast_deliveries_pending``                ``channel``, ``state`` (PENDING, SENDING)
``nbcast_render_duration_seconds``           histogram of rendered renditions
``nbcast_link_opens_total``                  —
``nbcast_sla_misses_total``                  ``state`` (the slot's); for administrators
                                             ``tenant`` too (below)
``nbcast_sla_alerts``                        ``state`` (PENDING, SENT, FAILED, NONE)
===========================================  =======================================

**Bounded labels.** No label carries a run, a definition, a recipient or a host.
Label values come from nbcast's own enumerations (states, reasons, outcomes,
channel and service kinds); each family keeps at most :data:`MAX_LABEL_VALUES`
distinct values and folds the rest into ``other``. The per-tenant queue depth
names tenants, which one tenant must not learn about another, so it is only
served to administrators (``NbcastApp.admin_users``) and on an open endpoint the
operator chose (``metrics_open``), and only for the :data:`MAX_TENANTS` deepest
queues (the rest summed under ``other``): at most ``(MAX_TENANTS + 1) × 3`` series,
each named tenant with all three states (zero included, so a dashboard's series do
not come and go). The SLA misses are counted by tenant on the same terms: the
:data:`MAX_TENANTS` tenants with the most misses by name, the rest as ``other``.

**Counters and gauges.** What only grows is a counter, named ``…_total`` (attempts
that ended, deliveries that ended, link openings, SLA misses); what goes up and down is
a gauge (runs by state, attempts under way, deliveries pending). A counter is a count of
rows, so retention deleting old rows lowers it, which Prometheus reads as a counter
reset (``increase()`` and ``rate()`` carry on).

**Formats.** The answer follows the scraper's ``Accept`` header
(``prometheus_client.exposition.choose_encoder``): OpenMetrics when it is asked for,
else the text format 0.0.4 that Prometheus 2.x expects (``text/plain;
version=0.0.4``), also when no ``Accept`` is sent. ``deploy/prometheus`` holds alert
rules (with ``promtool test rules`` tests) and ``deploy/grafana`` a dashboard.

Every family is one grouped query; on a million runs a scrape costs a few table
scans, so scrape every 15–60 s, not every second.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any

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
from nbcast.delivery.models import DeliveryState
from nbcast.views import metrics as q

__all__ = [
    "DURATION_BUCKETS",
    "MAX_LABEL_VALUES",
    "MAX_TENANTS",
    "OTHER",
    "DatabaseCollector",
    "metrics_registry",
    "sla_misses_family",
    "tenant_queue_family",
]

MAX_LABEL_VALUES = 50
"""Distinct values a label keeps in one family; the rest are ``other``."""

MAX_TENANTS = 50
"""Tenants named in the per-tenant queue depth (the deepest queues)."""

DURATION_BUCKETS = (1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 1800.0, 3600.0)
"""Upper bounds (seconds) of the duration histograms' buckets."""

OTHER = "other"
"""The label value that stands for every value past a family's bound."""
SERVICE_KINDS = ("scheduler", "worker", "delivery-worker", "oversight")

PENDING_DELIVERY = frozenset({DeliveryState.PENDING.value, DeliveryState.SENDING.value})
"""Delivery states a ledger row leaves again (every other state is final)."""


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


def _labelled(
    kind: type[GaugeMetricFamily] | type[CounterMetricFamily],
    name: str,
    doc: str,
    labels: Sequence[str],
    rows: Iterable[Sequence[Any]],
) -> Metric:
    """A family of ``kind`` from rows of label values and a count, labels bounded."""
    family = kind(name, doc, labels=list(labels))
    for values, value in _bounded((tuple(row[:-1]), float(row[-1])) for row in rows):
        family.add_metric(list(values), value)
    return family


def _gauge(name: str, doc: str, labels: Sequence[str], rows: Iterable[Sequence[Any]]) -> Metric:
    return _labelled(GaugeMetricFamily, name, doc, labels, rows)


def _counter(name: str, doc: str, labels: Sequence[str], rows: Iterable[Sequence[Any]]) -> Metric:
    return _labelled(CounterMetricFamily, name, doc, labels, rows)


def _scalar(name: str, doc: str, value: float) -> GaugeMetricFamily:
    family = GaugeMetricFamily(name, doc)
    family.add_metric([], value)
    return family


def _histogram(name: str, doc: str, counted: q.DurationHistogram) -> Metric:
    buckets = [(repr(bound), float(n)) for bound, n in counted.buckets]
    buckets.append(("+Inf", float(counted.count)))
    family = HistogramMetricFamily(name, doc)
    family.add_metric([], buckets, sum_value=counted.total)
    return family


def tenant_queue_family(queues: Sequence[q.TenantQueue]) -> GaugeMetricFamily:
    """``nbcast_tenant_queue_depth``: the :data:`MAX_TENANTS` deepest queues by name,
    each with every state of :data:`~nbcast.views.metrics.QUEUE_STATES`;
    the rest summed per state under ``other`` (``queues`` deepest first, as
    :func:`~nbcast.views.metrics.queue_by_tenant_and_state` gives them)."""
    family = GaugeMetricFamily(
        "nbcast_tenant_queue_depth",
        f"Runs in the queue (QUEUED, LEASED, RUNNING), by tenant and state (the "
        f"{MAX_TENANTS} deepest queues; the rest as other).",
        labels=["tenant", "state"],
    )
    deepest = sorted(queues, key=lambda queue: (-queue.total, queue.tenant))
    rest = dict.fromkeys(q.QUEUE_STATES, 0)
    for i, queue in enumerate(deepest):
        if i < MAX_TENANTS and queue.tenant != OTHER:
            for state in q.QUEUE_STATES:
                family.add_metric([queue.tenant[:64], state], float(queue.counts.get(state, 0)))
        else:
            for state in q.QUEUE_STATES:
                rest[state] += queue.counts.get(state, 0)
    if any(rest.values()):
        for state in q.QUEUE_STATES:
            family.add_metric([OTHER, state], float(rest[state]))
    return family


def sla_misses_family(
    rows: Sequence[tuple[str, str, int]], *, per_tenant: bool
) -> CounterMetricFamily:
    """``nbcast_sla_misses_total`` from ``(tenant, state, count)`` rows
    (:func:`~nbcast.views.metrics.sla_misses_by_tenant_and_state`): by
    state, and with ``per_tenant`` by tenant too — the :data:`MAX_TENANTS` tenants with
    the most misses by name, the rest summed as ``other``."""
    doc = "Slots not delivered within their definition's SLA, by the slot's state"
    if not per_tenant:
        family = CounterMetricFamily("nbcast_sla_misses", doc + ".", labels=["state"])
        totals: dict[str, float] = {}
        for _, state, count in rows:
            totals[state] = totals.get(state, 0.0) + count
        for values, value in _bounded(((state,), n) for state, n in totals.items()):
            family.add_metric(list(values), value)
        return family
    family = CounterMetricFamily(
        "nbcast_sla_misses",
        f"{doc} and tenant (the {MAX_TENANTS} with the most; the rest as other).",
        labels=["tenant", "state"],
    )
    by_tenant: dict[str, int] = {}
    for tenant, _, count in rows:
        by_tenant[tenant] = by_tenant.get(tenant, 0) + count
    named = set(sorted(by_tenant, key=lambda t: (-by_tenant[t], t))[:MAX_TENANTS]) - {OTHER}
    merged: dict[tuple[str, str], float] = {}
    for tenant, state, count in rows:
        key = (tenant[:64] if tenant in named else OTHER, state)
        merged[key] = merged.get(key, 0.0) + count
    for (tenant, state), value in sorted(merged.items()):  # states: a run's, a few
        family.add_metric([tenant, state[:64]], value)
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
        from nbcast.views.health import health

        yield _gauge("nbcast_runs", "Runs by state.", ["state"], q.runs_by_state(session))
        yield _gauge(
            "nbcast_slots_materialized",
            "Scheduled slots materialized, by the state and reason of their run "
            "(SKIPPED and MISSED slots with why).",
            ["state", "reason"],
            q.slots_by_state_and_reason(session),
        )
        yield _scalar(
            "nbcast_queue_depth", "Runs waiting for a worker.", float(q.queue_depth(session))
        )
        if self.per_tenant:
            yield tenant_queue_family(q.queue_by_tenant_and_state(session))
        oldest = q.oldest_due_queued(session, now)
        yield _scalar(
            "nbcast_queue_oldest_age_seconds",
            "How long the oldest due QUEUED run has waited (0: none waits).",
            max((now - oldest).total_seconds(), 0.0) if oldest else 0.0,
        )

        report = health(session, now)
        yield _scalar(
            "nbcast_scheduler_lag_seconds",
            "How long the oldest due slot has waited.",
            report.scheduler_lag_s,
        )
        alive = GaugeMetricFamily(
            "nbcast_services_alive", "Service processes alive, by kind.", labels=["kind"]
        )
        lag = GaugeMetricFamily(
            "nbcast_service_heartbeat_lag_seconds",
            "Age of the freshest heartbeat of each kind of service.",
            labels=["kind"],
        )
        for kind in SERVICE_KINDS:
            alive.add_metric([kind], float(report.alive_count(kind)))
            ages = [s.lag_s for s in report.services if s.kind == kind]
            if ages:
                lag.add_metric([kind], min(ages))
        yield alive
        yield lag

        attempts = q.attempts_by_outcome(session)
        yield _counter(
            "nbcast_run_attempts",
            "Run attempts that ended, by outcome.",
            ["outcome"],
            [row for row in attempts if row[0] != q.IN_FLIGHT],
        )
        yield _scalar(
            "nbcast_run_attempts_in_flight",
            "Run attempts under way.",
            float(sum(count for outcome, count in attempts if outcome == q.IN_FLIGHT)),
        )
        yield _histogram(
            "nbcast_run_duration_seconds",
            "How long finished run attempts took.",
            q.attempt_durations(session, DURATION_BUCKETS),
        )
        deliveries = q.deliveries_by_channel_and_state(session)
        yield _counter(
            "nbcast_deliveries",
            "Deliveries (ledger rows) that ended, by channel and state.",
            ["channel", "state"],
            [row for row in deliveries if row[1] not in PENDING_DELIVERY],
        )
        yield _gauge(
            "nbcast_deliveries_pending",
            "Deliveries (ledger rows) not ended yet, by channel and state.",
            ["channel", "state"],
            [row for row in deliveries if row[1] in PENDING_DELIVERY],
        )
        yield _histogram(
            "nbcast_render_duration_seconds",
            "How long rendering a rendition took.",
            q.render_durations(session, DURATION_BUCKETS),
        )
        opens = CounterMetricFamily("nbcast_link_opens", "Signed links opened.")
        opens.add_metric([], float(q.link_opens_total(session)))
        yield opens
        yield sla_misses_family(
            q.sla_misses_by_tenant_and_state(session), per_tenant=self.per_tenant
        )
        yield _gauge(
            "nbcast_sla_alerts",
            "SLA misses by the state of their alert to the definition's owner.",
            ["state"],
            q.sla_alerts_by_state(session),
        )


def metrics_registry(db: Database, clock: Clock, *, per_tenant: bool) -> CollectorRegistry:
    """A registry of the database's families and this process's own (CPU, memory,
    open files, Python's garbage collector)."""
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector(db, clock, per_tenant=per_tenant))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return registry
