"""A time zone's UTC-offset transitions, found once and cached: what the schedule
compiler needs to tell ordinary days from DST days.

Transitions are found by sampling a zone's offset once per UTC day and bisecting a
change to the second, 32 UTC days at a time, cached per (zone, block) — tzdata never
changes an offset twice within a day (the closest pair is about four days apart).
:class:`Neighbourhood` holds the constant-offset periods around a window: a wall time
inside one period exists once, inside two is a fold, inside none is a gap.
Everything here is in whole UTC seconds since the Unix epoch.
"""

from __future__ import annotations

from datetime import UTC, date, datetime, time, timedelta
from functools import lru_cache
from typing import NamedTuple
from zoneinfo import ZoneInfo

__all__ = [
    "DAY",
    "Neighbourhood",
    "Transition",
    "day_start",
    "offset_at",
    "range_bound",
    "transitions",
]

DAY = 86_400
_SECOND = timedelta(seconds=1)


class Transition(NamedTuple):
    """One change of a zone's UTC offset."""

    at: int  # UTC seconds of the first instant with the new offset
    before: int  # offset in seconds before it
    after: int  # offset in seconds from it on


def offset_at(zone: ZoneInfo, seconds: int) -> int:
    """The zone's UTC offset, in seconds, at the UTC second ``seconds``."""
    off = datetime.fromtimestamp(seconds, zone).utcoffset()
    return 0 if off is None else off // _SECOND


def day_start(day: date, zone: ZoneInfo) -> datetime:
    """The instant (UTC) a calendar day starts in ``zone``: its local midnight, or —
    where a DST gap swallows midnight (Santiago, Havana) — the instant after the gap,
    and where midnight repeats, its first pass."""
    return datetime.combine(day, time(), tzinfo=zone).astimezone(UTC)  # fold=0


def range_bound(value: date | datetime, zone: ZoneInfo) -> datetime:
    """A range's end as a command takes it: an instant as is (UTC), a bare date as the
    start of that day in ``zone`` (:func:`day_start`) — so ``--from 2026-10-05 --to
    2026-10-10`` means Monday to Friday in the schedule's own zone."""
    if isinstance(value, datetime):
        return value.astimezone(UTC)
    return day_start(value, zone)


_BUCKET = 32 * DAY  # transitions are found and cached 32 UTC days at a time


@lru_cache(maxsize=65_536)
def _buckettransitions(zone: ZoneInfo, bucket: int) -> tuple[Transition, ...]:
    """Offset changes ``t`` with ``bucket * _BUCKET < t <= (bucket + 1) * _BUCKET``.

    The offset is sampled once per UTC day and a change is bisected to the second;
    tzdata never changes offsets twice within a day (module docstring).
    """
    low, high = bucket * _BUCKET, (bucket + 1) * _BUCKET
    found: list[Transition] = []
    a, off_a = low, offset_at(zone, low)
    while a < high:
        b = min(a + DAY, high)
        off_b = offset_at(zone, b)
        if off_b == off_a:
            a = b
            continue
        lo, hi = a, b  # off(lo) == off_a != off(hi): bisect to the first changed second
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if offset_at(zone, mid) == off_a:
                lo = mid
            else:
                hi = mid
        after = offset_at(zone, hi)
        found.append(Transition(hi, off_a, after))
        a, off_a = hi, after
    return tuple(found)


def transitions(zone: ZoneInfo, low: int, high: int) -> list[Transition]:
    """Offset changes ``t`` of ``zone`` with ``low < t <= high`` (UTC seconds)."""
    return [
        t
        for bucket in range(low // _BUCKET, (high - 1) // _BUCKET + 1)
        for t in _buckettransitions(zone, bucket)
        if low < t.at <= high
    ]


class OffsetSpan(NamedTuple):
    """A stretch of UTC seconds with one offset."""

    start: int  # UTC seconds, inclusive
    stop: int  # UTC seconds, exclusive
    offset: int


class Neighbourhood:
    """The constant-offset periods of a zone around one UTC window, to classify walls."""

    __slots__ = ("periods", "transitions")

    def __init__(self, zone: ZoneInfo, low: int, high: int) -> None:
        self.transitions = transitions(zone, low, high)
        periods: list[OffsetSpan] = []
        start, offset = low, offset_at(zone, low)
        for t in self.transitions:
            periods.append(OffsetSpan(start, t.at, offset))
            start, offset = t.at, t.after
        periods.append(OffsetSpan(start, high + 1, offset))
        self.periods = periods

    def instants(self, wall: int) -> list[int]:
        """UTC seconds at which the wall time ``wall`` (seconds) happens, earliest first."""
        return [wall - p.offset for p in self.periods if p.start <= wall - p.offset < p.stop]

    def gap_end(self, wall: int) -> int:
        """The transition instant that ends the gap containing the nonexistent ``wall``."""
        for t in self.transitions:
            if t.at + t.before <= wall < t.at + t.after:
                return t.at
        raise AssertionError(f"wall second {wall} is in no gap")  # pragma: no cover
