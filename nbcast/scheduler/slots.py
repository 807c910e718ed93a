"""Slots of one definition: its compiled plan, which slots are due, the rows they
become — the pieces the materializer and the scheduler's commands (pause, resume,
backfill) share.

A :class:`Plan` is one stored version as the scheduler holds it: its
:class:`~nbcast.definitions.compiled.CompiledVersion` (spec, compiled schedule,
intervals, zone, audiences — compiled by the definitions plane, never here) — or, for a
version that can no longer be compiled (a *poison* definition), why not (``error``).
:class:`PlanCache` holds each version's plan once per process. :func:`due_slots` lists
the slots after a watermark up to an instant; :func:`slot_rows` turns decided slots
into ``runs`` rows (the version's parameters, the deterministic jitter share, whether
the run is serial); :func:`active_runs` counts what the overlap policy needs.

**Audiences.** A plan carries the audiences of its version's subscriptions
(:attr:`~nbcast.definitions.compiled.CompiledVersion.audiences`: the base audience ``""``
alone for a definition without scoped subscriptions). Every decided slot becomes one row *per
audience* — the same state and reason for all of them, since a slot is decided once —
with ``audience`` its key, ``row_filter`` its filter (None for the base audience) and
``parameters`` the version's overlaid with the audience's, bindings resolved for the
slot's period. So the invariant is one row per (slot, audience), which
``UNIQUE(definition_id, slot_key, audience)`` guards.

**Overlap with several audiences** (:func:`active_runs`): each audience is a stream
of runs of its own, and the slot is decided as its busiest stream would decide it —
``queued`` and ``started`` are each the largest count among the definition's
audiences (runs of audiences a newer version dropped count too). A definition with
one audience counts exactly as before; with three, ``skip`` skips a slot while any
audience's earlier run is still queued or running, and ``buffer_one`` queues it
while no audience has a run waiting. ``replace`` cancels every active run of the
definition, whatever its audience. ``serial`` is set on each row as before; the
executor runs serial runs one at a time per definition (and audience, where its claim
partitions by audience).
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.definitions.audiences import Audience
from nbcast.definitions.bindings import Period
from nbcast.definitions.compiled import CompiledVersion, compile_version
from nbcast.definitions.compiler import CompiledSchedule, Slot
from nbcast.definitions.models import DefinitionVersion
from nbcast.definitions.spec import OverlapPolicy, ReportSpec, ScheduleSpec
from nbcast.errors import ScheduleError
from nbcast.scheduler.models import ACTIVE_STATES, Run, RunKind, RunState
from nbcast.scheduler.period import manual_period, resolve_run, slot_periods
from nbcast.scheduler.policies import ActiveRuns, Decision

__all__ = [
    "EPSILON",
    "Plan",
    "PlanCache",
    "PoisonDefinition",
    "active_runs",
    "due_slots",
    "initial_watermark",
    "manual_rows",
    "next_fire",
    "slot_rows",
    "usable",
]

EPSILON = timedelta(microseconds=1)
"""Watermarks are exclusive: the next slot fires strictly after one."""


@dataclass(frozen=True)
class Plan:
    """One stored version as the scheduler holds it: which version, whose, and its
    :class:`~nbcast.definitions.compiled.CompiledVersion` — or, for a version that
    cannot be compiled, why (``error``; its compiled version is then an empty one)."""

    version_id: int
    version: int
    tenant_id: int
    source: CompiledVersion
    """The compiled version (spec, schedule, intervals, zone, audiences)."""
    error: str | None = None

    @property
    def spec(self) -> ReportSpec:
        return self.source.spec

    @property
    def schedule(self) -> ScheduleSpec | None:
        return self.source.spec.schedule

    @property
    def compiled(self) -> CompiledSchedule | None:
        """The compiled schedule (None: the version runs on request, or is poison)."""
        return None if self.error else self.source.compiled_schedule

    @property
    def intervals(self) -> CompiledSchedule | None:
        """The schedule data intervals are read from (:mod:`nbcast.scheduler.period`)."""
        return None if self.error else self.source.intervals

    @property
    def zone(self) -> ZoneInfo:
        return self.source.zone

    @property
    def bound(self) -> bool:
        """Whether any parameter value is a binding, resolved per slot."""
        return self.source.bound

    @property
    def audiences(self) -> tuple[Audience, ...]:
        """Who receives the version's runs: one row per slot and audience (module
        docstring)."""
        return self.source.audiences

    def parameters_of(self, audience: Audience) -> dict[str, Any]:
        """The version's parameters overlaid with ``audience``'s (unresolved)."""
        return self.source.parameters_of(audience)


class PoisonDefinition(ScheduleError):
    """A definition that cannot be materialized right now (module docstring)."""


class PlanCache:
    """Compiled plans by version id, compiled once per process (bounded)."""

    def __init__(self) -> None:
        self._plans: dict[int, Plan] = {}

    def plan(  # a version compiled, or the reason it cannot be
        self,
        version_id: int,
        version: int,
        tenant_id: int,
        block: dict[str, Any],
        schema: list[dict[str, Any]],
    ) -> Plan:
        """The compiled form of one stored version (cached by version id)."""
        cached = self._plans.get(version_id)
        if cached is not None:
            return cached
        try:
            source = compile_version(block, schema)
            # Everything the scheduler reads, compiled now: a failure is the version's.
            _ = (
                source.compiled_schedule,
                source.intervals,
                source.zone,
                source.audiences,
                source.bound,
            )
            plan = Plan(version_id, version, tenant_id, source)
        except Exception as exc:  # a poison version: recorded on its definition
            empty = CompiledVersion(ReportSpec(), ())
            plan = Plan(version_id, version, tenant_id, empty, str(exc)[:400])
        if len(self._plans) > 100_000:
            self._plans.clear()
        self._plans[version_id] = plan
        return plan

    def load(
        self, session: Session, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], Plan]:
        """Plans for (definition_id, version) pairs, loading uncached versions at once."""
        plans: dict[tuple[int, int], Plan] = {}
        wanted = set(keys)
        ids = sorted({definition_id for definition_id, _ in wanted})
        for start in range(0, len(ids), 1000):  # bounded IN lists
            # A plain IN on definition_id uses the index; a row-value IN does not.
            rows = session.execute(
                sa.select(
                    DefinitionVersion.id,
                    DefinitionVersion.definition_id,
                    DefinitionVersion.version,
                    DefinitionVersion.tenant_id,
                    DefinitionVersion.spec,
                    DefinitionVersion.parameter_schema,
                ).where(
                    DefinitionVersion.definition_id.in_(ids[start : start + 1000]),
                    DefinitionVersion.version.in_({v for _, v in wanted}),
                )
            ).all()
            for r in rows:
                if (r.definition_id, r.version) in wanted:
                    plans[(r.definition_id, r.version)] = self.plan(
                        r.id, r.version, r.tenant_id, r.spec, r.parameter_schema
                    )
        return plans


def active_runs(session: Session, ids: list[int]) -> dict[int, ActiveRuns]:
    """How many runs of each definition in ``ids`` are QUEUED and under way: for
    each, the largest count among its audiences (module docstring)."""
    per_audience: dict[tuple[int, str], ActiveRuns] = {}
    rows = session.execute(
        sa.select(Run.definition_id, Run.audience, Run.state, sa.func.count())
        .where(
            Run.definition_id.in_(ids),
            Run.state.in_([s.value for s in ACTIVE_STATES]),
            Run.kind != RunKind.test.value,  # a test run is nobody's: overlap ignores it
        )
        .group_by(Run.definition_id, Run.audience, Run.state)
    ).all()
    for definition_id, audience, state, count in rows:
        key = (definition_id, audience)
        current = per_audience.get(key, ActiveRuns())
        if state == RunState.QUEUED:
            current = ActiveRuns(current.queued + count, current.started)
        else:
            current = ActiveRuns(current.queued, current.started + count)
        per_audience[key] = current
    counts: dict[int, ActiveRuns] = {}
    for (definition_id, _), active in per_audience.items():
        busiest = counts.get(definition_id, ActiveRuns())
        counts[definition_id] = ActiveRuns(
            max(busiest.queued, active.queued), max(busiest.started, active.started)
        )
    return counts


def initial_watermark(first_publish: datetime, schedule: ScheduleSpec | None) -> datetime:
    """Where a new definition's materialization starts (module docstring)."""
    if schedule is None or schedule.start is None or schedule.every is not None:
        return first_publish
    start = schedule.start.replace(tzinfo=ZoneInfo(schedule.timezone))
    # The watermark is exclusive; a slot exactly at ``start`` must be materialized.
    return max(first_publish, start.astimezone(first_publish.tzinfo) - EPSILON)


def jitter_of(schedule: ScheduleSpec, definition_id: int, key: str) -> timedelta:
    """A slot's deterministic share of the schedule's ``jitter`` (a hash of the
    definition and the slot key), so replays compute the same ``not_before``."""
    if not schedule.jitter:
        return timedelta(0)
    digest = hashlib.sha256(f"{definition_id}/{key}".encode()).digest()
    share = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(seconds=int(schedule.jitter.total_seconds() * share))


def usable(plan: Plan | None) -> Plan:
    """``plan``, or :class:`PoisonDefinition` saying why it cannot be used."""
    if plan is None:
        raise PoisonDefinition("its version could not be loaded")
    if plan.error is not None:
        raise PoisonDefinition(f"its version cannot be compiled: {plan.error}")
    return plan


def next_fire(plan: Plan, watermark: datetime) -> datetime | None:
    """The first fire time after ``watermark`` (None: the schedule never fires again)."""
    return plan.compiled.next_fire_after(watermark) if plan.compiled else None


def due_slots(
    plan: Plan, watermark: datetime, now: datetime, limit: int | None = None
) -> list[Slot]:
    """The slots firing after ``watermark`` up to and including ``now`` (at most
    ``limit``), in fire order."""
    if plan.compiled is None:
        return []
    return list(islice(plan.compiled.slots(watermark + EPSILON, now + EPSILON), limit))


def slot_rows(
    definition_id: int, plan: Plan, decisions: Iterable[Decision], kind: RunKind, now: datetime
) -> list[dict[str, Any]]:
    """The ``runs`` rows of decided slots (consecutive slots, in fire order): one per
    slot and audience (module docstring), pinned to the plan's version, with the
    audience's parameters — bindings resolved for each slot's period — and the run
    context; serial unless the overlap policy is ``allow`` (backfills always are). A
    run that follows MISSED slots of the same pass says how many in its context
    (``missed_before``): its own interval starts where theirs end, and a report that
    should cover them can widen its query or the admin backfill them."""
    schedule = plan.schedule or ScheduleSpec()
    decided = list(decisions)
    if plan.intervals is None:
        periods: list[Period | None] = [None] * len(decided)
    else:
        periods = list(slot_periods(plan.intervals, plan.zone, [d.slot for d in decided]))
    rows = []
    missed = 0  # MISSED slots just before this one, in this pass
    for d, period in zip(decided, periods, strict=True):
        row = _row(definition_id, plan, schedule, d, kind, now)
        for audience in plan.audiences:
            context, parameters = resolve_run(
                plan.parameters_of(audience),
                period,
                kind=kind.value,
                slot_key=d.slot.key,
                fire_at=d.slot.fire_at,
                bound=plan.bound,
            )
            if context is not None and missed and d.state is RunState.QUEUED:
                context = {**context, "missed_before": missed}
            rows.append(
                {
                    **row,
                    "audience": audience.key,
                    "row_filter": audience.row_filter or None,
                    "parameters": parameters,
                    "context": context,
                }
            )
        missed = missed + 1 if d.state is RunState.MISSED else 0
    return rows


def manual_rows(
    definition_id: int,
    plan: Plan,
    values: dict[str, Any],
    at: datetime,
    now: datetime,
    kind: RunKind = RunKind.manual,
) -> list[dict[str, Any]]:
    """The ``runs`` rows of a run asked for by a person — a manual run, or a test run
    without a slot (``kind``): one per audience, no slot, not serial, due ``now``, with
    the version's parameters overlaid by ``values`` (validated ``-p`` values) and then
    the audience's own, bindings resolved for ``at``'s period
    (:func:`~nbcast.scheduler.period.manual_period`); the context is a manual run's."""
    period = manual_period(plan.intervals, plan.zone, at)
    rows = []
    for audience in plan.audiences:
        context, resolved = resolve_run(
            {**plan.spec.parameters, **values, **audience.parameters},
            period,
            kind=RunKind.manual.value,
            slot_key=None,
            fire_at=now,
        )
        rows.append(
            {
                "tenant_id": plan.tenant_id,
                "definition_id": definition_id,
                "version_id": plan.version_id,
                "version": plan.version,
                "kind": kind.value,
                "slot_key": None,
                "audience": audience.key,
                "row_filter": audience.row_filter or None,
                "fire_at": now,
                "state": RunState.QUEUED.value,
                "reason": None,
                "parameters": resolved,
                "context": context,
                "serial": False,
                "not_before": now,
                "created_at": now,
            }
        )
    return rows


def _row(
    definition_id: int,
    plan: Plan,
    schedule: ScheduleSpec,
    d: Decision,
    kind: RunKind,
    now: datetime,
) -> dict[str, Any]:
    return {
        "tenant_id": plan.tenant_id,
        "definition_id": definition_id,
        "version_id": plan.version_id,
        "version": plan.version,
        "kind": kind.value,
        "slot_key": d.slot.key,
        "fire_at": d.slot.fire_at,
        "state": d.state.value,
        "reason": None if d.reason is None else str(d.reason),
        "serial": kind is RunKind.backfill or schedule.overlap is not OverlapPolicy.allow,
        "not_before": d.slot.fire_at + jitter_of(schedule, definition_id, d.slot.key),
        "created_at": now,
    }
