"""A definition's next fire times, in its own zone, with what DST does to each.

:func:`upcoming` gives the next ``count`` slots after an instant — the definition's
real schedule and policies, as the scheduler will record them — each with a
:attr:`UpcomingFire.note` when daylight saving time touches it:

- a wall time that happens twice (fall back): "01:30 happens twice on 2026-11-01:
  runs both" (or "runs the first pass, EDT" / "runs the second pass, EST");
- a wall time that does not exist (spring forward): "02:30 does not exist on
  2026-03-08: runs at 03:00 EDT" (gap ``shift``) or "…: skipped" (gap ``skip``).

The status page and the API's definition list show these, so a user sees before the
night what the schedule will do.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from itertools import islice
from typing import Any
from zoneinfo import ZoneInfo

from nbcast.clock import format_instant
from nbcast.definitions.compiler import (
    CompiledSchedule,
    CronSchedule,
    Slot,
    SlotStatus,
    compile_schedule,
    load_zone,
)
from nbcast.definitions.spec import ScheduleSpec

__all__ = ["MAX_UPCOMING", "UpcomingFire", "dst_note", "slot_notes", "upcoming"]

MAX_UPCOMING = 100
"""Fire times one call returns at most."""
MAX_LOOK_AHEAD = 100_000
"""Slots the DST notes look at beyond the listed ones (a fold's worth, at most)."""

_HORIZON = timedelta(days=366 * 30)
"""How far ahead the next slots are looked for (a cron on 29 February that must fall on
a Monday fires once in 28 years)."""


@dataclass(frozen=True, kw_only=True)
class UpcomingFire:
    """One coming slot."""

    slot_key: str
    local: datetime
    """When it fires, in the definition's zone."""
    fire_at: datetime
    """The same instant in UTC."""
    status: str
    """``scheduled``, or ``skipped`` (a DST-gap slot under ``skip``)."""
    reason: str | None
    note: str | None
    """What DST does to it (module docstring); None on an ordinary day."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "slot_key": self.slot_key,
            "local": self.local.isoformat(),
            "fire_at": format_instant(self.fire_at),
            "status": self.status,
            "reason": self.reason,
            "note": self.note,
        }


def _passes(wall: datetime, zone: ZoneInfo) -> tuple[datetime, datetime]:
    first = wall.replace(tzinfo=zone, fold=0)
    second = wall.replace(tzinfo=zone, fold=1)
    return first, second


def _exists(wall: datetime, zone: ZoneInfo) -> bool:
    aware = wall.replace(tzinfo=zone)
    return aware.astimezone(UTC).astimezone(zone).replace(tzinfo=None) == wall


def dst_note(slot: Slot, zone: ZoneInfo, *, both: bool) -> str | None:
    """The DST note of ``slot`` (module docstring), None on an ordinary day; ``both``
    says whether the schedule fires both passes of a repeated wall time."""
    wall = slot.wall
    clock = f"{wall:%H:%M}"
    day = f"{wall:%Y-%m-%d}"
    if not _exists(wall, zone):
        if slot.status is SlotStatus.skipped:
            return f"{clock} does not exist on {day} (clocks go forward): skipped"
        return (
            f"{clock} does not exist on {day} (clocks go forward): runs at "
            f"{slot.local:%H:%M} {slot.local.tzname()}"
        )
    first, second = _passes(wall, zone)
    if first.utcoffset() == second.utcoffset():
        return None
    twice = f"{clock} happens twice on {day}"
    if slot.key.endswith("~2"):
        return f"{twice}: this is the second pass ({second.tzname()})"
    if both:
        return f"{twice}: runs both ({first.tzname()}, then {second.tzname()})"
    if slot.local.utcoffset() == second.utcoffset():
        return f"{twice}: runs the second pass only ({second.tzname()})"
    return f"{twice}: runs the first pass only ({first.tzname()})"


def upcoming(spec: ScheduleSpec, after: datetime, count: int = 3) -> list[UpcomingFire]:
    """The next ``count`` (at most :data:`MAX_UPCOMING`) slots of ``spec`` firing after
    ``after`` (module docstring)."""
    count = max(0, min(count, MAX_UPCOMING))
    schedule = compile_schedule(spec)
    zone = load_zone(spec.timezone)
    try:
        far = after + _HORIZON
    except OverflowError:
        far = datetime.max.replace(tzinfo=UTC)
    start = after + timedelta(microseconds=1)
    slots = list(islice(schedule.slots(start, far), count))
    notes = slot_notes(schedule, slots, zone)
    return [
        UpcomingFire(
            slot_key=slot.key,
            local=slot.local,
            fire_at=slot.fire_at.astimezone(UTC),
            status=slot.status.value,
            reason=slot.reason,
            note=note,
        )
        for slot, note in zip(slots, notes, strict=True)
    ]


def slot_notes(
    schedule: CompiledSchedule, slots: Sequence[Slot], zone: ZoneInfo
) -> list[str | None]:
    """The DST note of each of ``slots`` (:func:`dst_note`). An interval (``every``)
    schedule moves in absolute time: its slots have none."""
    if not isinstance(schedule, CronSchedule):
        return [None] * len(slots)

    def fold_length(slot: Slot) -> timedelta:
        """How long ``slot``'s wall time is repeated (zero: it is not)."""
        first, second = _passes(slot.wall, zone)
        return abs((first.utcoffset() or timedelta(0)) - (second.utcoffset() or timedelta(0)))

    lengths = [fold_length(slot) for slot in slots]
    keys = {slot.key for slot in slots}
    # The second pass of a repeated wall time fires at most a fold's length later: when
    # ``slots`` end before some fold does, one look-ahead to the latest such end adds
    # the keys beyond them (a fold of any length — Apia's 24 hours in 1892 — at the
    # cost of one enumeration, however many slots the fold holds).
    if slots:
        last = slots[-1].fire_at
        ends = [s.fire_at + n for s, n in zip(slots, lengths, strict=True) if n]
        horizon = max(ends, default=last - timedelta(minutes=1)) + timedelta(minutes=1)
        if horizon > last:
            beyond = islice(schedule.slots(last, horizon), MAX_LOOK_AHEAD)
            keys.update(s.key for s in beyond)
    return [
        dst_note(slot, zone, both=bool(n) and f"{slot.key}~2" in keys)
        for slot, n in zip(slots, lengths, strict=True)
    ]
