"""The period a run covers: its nominal time and its data interval.

Every run carries a frozen **context** (stored on the run row when it is created, the
same for every attempt): which slot it is, the slot's *nominal* time — its wall time in
the definition's zone, as an aware datetime — its fire instant, and its **data
interval** ``[start, end)``:

- a cron slot's interval runs from the nominal time of the previous slot that fires to
  its own, by the schedule. Every slot of the schedule counts — missed ones (a later
  backfill reproduces a MISSED slot's own interval, and the next run's starts where
  it ends) and both passes of a kept fold included — but a slot the schedule itself
  skips for a DST gap (``gap: skip``, or ``auto`` on an at-least-hourly schedule):
  it never runs, so its time goes to the next slot that does. An hourly New York
  schedule on 2026-03-08 gives the 03:00 run ``[01:00 EST, 03:00 EDT)`` — the skipped
  02:00's hour included — and ``30 2 * * *`` with ``gap: skip`` gives 9 March's run
  the two days since 7 March's. So the intervals of consecutive slots that fire tile
  time with neither a gap nor an overlap, across DST changes too (a skipped slot's
  own interval, never used, ends at its nominal time like the others). The first slot
  has one as well: its previous slot is looked up in the schedule even if it fell
  before the first publish (or before ``start``). A DST-gap slot's nominal time is
  the instant after the gap, where it fires (or would fire);
- an interval schedule's (``every``) slot covers ``[fire_at - every, fire_at)``;
- a manual run's nominal time is the instant it was asked for (``--at``, else when it
  was queued), and its interval is that of the slot whose interval holds that instant
  (a definition without a schedule: the empty interval at that instant).

Bindings (:mod:`nbcast.definitions.bindings`) resolve against this; the executor hands
it to the notebook as :func:`nbcast.context`. :func:`resolve_run` is the one place a
run's context and parameters are made from its period — for the scheduler's slots and
backfills (:func:`nbcast.scheduler.slots.slot_rows`), a manual run
(:func:`nbcast.scheduler.control.run_now`) and the preview
(:func:`nbcast.scheduler.preview.preview_definition`).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from nbcast.clock import format_instant
from nbcast.definitions.bindings import Period, resolve_parameters
from nbcast.definitions.compiler import CompiledSchedule, IntervalSchedule, Slot, SlotStatus

__all__ = [
    "context_of",
    "manual_period",
    "resolve_run",
    "slot_periods",
]

_LOOKBACK_LIMIT = timedelta(days=366 * 30)
"""How far back a previous slot is looked for (a cron that fires once in 28 years —
29 February on a Monday — still finds its previous one)."""
_UTC_ZONE = ZoneInfo("UTC")


def _before(schedule: CompiledSchedule, slot: Slot) -> datetime | None:
    """The nominal time of the last slot before ``slot`` in ``schedule`` that fires
    (a DST-gap slot the schedule skips hands its time on: module docstring)."""
    span = timedelta(hours=1)
    key = (slot.fire_at, slot.key)
    while span <= _LOOKBACK_LIMIT:
        found = [
            s
            for s in schedule.slots(slot.fire_at - span, slot.fire_at + timedelta(microseconds=1))
            if (s.fire_at, s.key) < key and s.status is not SlotStatus.skipped
        ]
        if found:
            return found[-1].local
        span *= 4
    return None


def slot_periods(schedule: CompiledSchedule, zone: ZoneInfo, slots: Sequence[Slot]) -> list[Period]:
    """The period of each of ``slots`` (consecutive slots of ``schedule``, in fire
    order): one look-up for the first one's previous slot, then a chain."""
    if not slots:
        return []
    if isinstance(schedule, IntervalSchedule):
        return [
            Period(s.local, (s.fire_at - schedule.every).astimezone(zone), s.local, zone)
            for s in slots
        ]
    previous = _before(schedule, slots[0])
    periods = []
    for slot in slots:
        start = previous if previous is not None else slot.local
        periods.append(Period(slot.local, start, slot.local, zone))
        if slot.status is not SlotStatus.skipped:
            previous = slot.local
    return periods


def manual_period(schedule: CompiledSchedule | None, zone: ZoneInfo, at: datetime) -> Period:
    """A manual run's period: ``at`` and the interval of the slot that holds it."""
    nominal = at.astimezone(zone)
    if schedule is None:
        return Period(nominal, nominal, nominal, zone)
    upcoming = next(iter(schedule.slots(at + timedelta(microseconds=1), _far(at))), None)
    if upcoming is None:  # the schedule has ended: the empty interval at ``at``
        return Period(nominal, nominal, nominal, zone)
    (period,) = slot_periods(schedule, zone, [upcoming])
    return Period(nominal, period.interval_start, period.interval_end, zone)


def _far(at: datetime) -> datetime:
    try:
        return at + _LOOKBACK_LIMIT
    except OverflowError:
        return datetime.max.replace(tzinfo=UTC)


def context_of(
    *, kind: str, slot_key: str | None, fire_at: datetime, period: Period
) -> dict[str, Any]:
    """The run context as stored on the run row (JSON): what :func:`nbcast.context`
    returns inside the kernel, but for tenant, definition, version, run and attempt,
    which the row itself holds."""
    zone = period.zone
    return {
        "kind": kind,
        "slot_key": slot_key,
        "timezone": zone.key if zone is not _UTC_ZONE else "UTC",
        "nominal": period.nominal.isoformat(),
        "fire_at": format_instant(fire_at),
        "interval_start": period.interval_start.isoformat(),
        "interval_end": period.interval_end.isoformat(),
    }


def resolve_run(
    values: dict[str, Any],
    period: Period | None,
    *,
    kind: str,
    slot_key: str | None,
    fire_at: datetime,
    bound: bool = True,
) -> tuple[dict[str, Any] | None, dict[str, Any]]:
    """A run's context and parameters: the period's context (:func:`context_of`) and
    ``values`` with their slot bindings resolved for that period (``bound`` false: the
    values hold no binding, nothing to resolve). Without a period (a definition whose
    schedule has no intervals) there is no context and the values are as given."""
    if period is None:
        return None, dict(values)
    context = context_of(kind=kind, slot_key=slot_key, fire_at=fire_at, period=period)
    return context, (resolve_parameters(values, period) if bound else dict(values))
