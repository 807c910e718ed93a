"""An independent oracle for slot bindings, for the property tests.

It shares no code with :mod:`nbcast.definitions.bindings` and works differently: the
instants of a wall time are found by trying every UTC offset the zone uses within two
days (sampled hour by hour), not with PEP 495's ``fold``; a gap's end is found by
walking minute by minute, then second by second; months, business days and snaps walk
the calendar one day at a time. It follows the rule the bindings module documents
("DST"): minutes and hours move the instant; other steps move the wall time, which is
read back at the pass the step started from (snaps: a start's first pass, an end's
last), and in a gap stands for the first instant after the gap.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import holidays

__all__ = ["Wall", "expected", "gap_end", "instant_of", "instants", "wall_of"]


@functools.lru_cache(maxsize=4096)
def _offsets(zone: ZoneInfo, day: date) -> tuple[timedelta, ...]:
    """Every UTC offset ``zone`` has within two days of ``day`` (hourly samples)."""
    start = datetime(day.year, day.month, day.day, tzinfo=UTC) - timedelta(days=2)
    seen = set()
    for hour in range(24 * 5):
        offset = (start + timedelta(hours=hour)).astimezone(zone).utcoffset()
        assert offset is not None
        seen.add(offset)
    return tuple(sorted(seen))


def _local(instant: datetime, zone: ZoneInfo) -> datetime:
    """The naive wall time ``instant`` shows in ``zone``: UTC plus the zone's offset."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    return (instant + offset).replace(tzinfo=None)


def instants(wall: datetime, zone: ZoneInfo) -> list[datetime]:
    """The UTC instants whose wall time in ``zone`` is ``wall``, earliest first."""
    found = set()
    for offset in _offsets(zone, wall.date()):
        candidate = (wall - offset).replace(tzinfo=UTC)
        if _local(candidate, zone) == wall:
            found.add(candidate)
    return sorted(found)


def gap_end(wall: datetime, zone: ZoneInfo) -> datetime:
    """The first instant after the gap ``wall`` falls in (UTC)."""
    offsets = _offsets(zone, wall.date())
    moment = (wall - max(offsets)).replace(tzinfo=UTC)  # its wall time is <= ``wall``
    while _local(moment, zone) <= wall:
        moment += timedelta(minutes=1)
    while _local(moment - timedelta(seconds=1), zone) > wall:
        moment -= timedelta(seconds=1)
    return moment


@dataclass(frozen=True)
class Wall:
    """A wall time and the index of the pass it means (0: first)."""

    time: datetime
    index: int


def _keep(time: datetime, index: int, zone: ZoneInfo) -> Wall:
    count = len(instants(time, zone))
    return Wall(time, index if index < count else 0)


def wall_of(instant: datetime, zone: ZoneInfo) -> Wall:
    """The wall time of ``instant`` and which of its passes it is."""
    time = _local(instant, zone)
    return Wall(time, instants(time, zone).index(instant.astimezone(UTC)))


def instant_of(wall: Wall, zone: ZoneInfo) -> datetime:
    """The instant a wall time stands for (UTC)."""
    found = instants(wall.time, zone)
    return found[wall.index] if found else gap_end(wall.time, zone)


def _working(day: date, calendar: str | None) -> bool:
    if day.isoweekday() in (6, 7):
        return False
    if calendar is None:
        return True
    country, _, region = calendar.partition("-")
    return day not in holidays.country_holidays(country, subdiv=region or None, years=day.year)


def _business(day: date, n: int, calendar: str | None) -> date:
    if n == 0:
        while not _working(day, calendar):
            day += timedelta(days=1)
        return day
    moved = 0
    while moved < abs(n):
        day += timedelta(days=1 if n > 0 else -1)
        moved += _working(day, calendar)
    return day


def _months(day: date, n: int) -> date:
    """Walk ``n`` month starts, then back off to the last day the month has."""
    first = day.replace(day=1)
    for _ in range(abs(n)):
        if n > 0:
            first = (first + timedelta(days=32)).replace(day=1)
        else:
            first = (first - timedelta(days=1)).replace(day=1)
    result = first
    while result.day < day.day and (result + timedelta(days=1)).month == first.month:
        result += timedelta(days=1)
    return result


def _snap(day: date, anchor: str) -> date:
    kind = anchor.split("_of_")[1]

    def begins(d: date) -> bool:
        if kind == "day":
            return True
        if kind == "week":
            return d.isoweekday() == 1
        if kind == "month":
            return d.day == 1
        return d.day == 1 and d.month in (1, 4, 7, 10)

    if anchor.startswith("start"):
        while not begins(day):
            day -= timedelta(days=1)
        return day
    while not begins(day + timedelta(days=1)):
        day += timedelta(days=1)
    return day


def _step(wall: Wall, step: dict[str, Any], zone: ZoneInfo) -> Wall:
    if "to" in step:
        anchor = str(step["to"])
        day = _snap(wall.time.date(), anchor)
        if anchor.startswith("start"):
            return Wall(datetime(day.year, day.month, day.day), 0)
        time = datetime(day.year, day.month, day.day, 23, 59, 59)
        return Wall(time, max(len(instants(time, zone)) - 1, 0))
    if "minutes" in step or "hours" in step:
        seconds = 60 * int(step.get("minutes", 0)) + 3600 * int(step.get("hours", 0))
        return wall_of(instant_of(wall, zone) + timedelta(seconds=seconds), zone)
    clock = wall.time.time()
    if "days" in step or "weeks" in step:
        days = int(step.get("days", 0)) + 7 * int(step.get("weeks", 0))
        day = wall.time.date()
        for _ in range(abs(days)):
            day += timedelta(days=1 if days > 0 else -1)
    elif "months" in step:
        day = _months(wall.time.date(), int(step["months"]))
    else:
        day = _business(wall.time.date(), int(step["business_days"]), step.get("calendar"))
    return _keep(datetime.combine(day, clock), wall.index, zone)


def _iso(instant: datetime, zone: ZoneInfo) -> str:
    """ISO 8601 with the zone's offset, spelled out by hand."""
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    local = _local(instant, zone)
    sign = "-" if offset < timedelta(0) else "+"
    minutes = abs(int(offset.total_seconds())) // 60
    text = f"{local:%Y-%m-%dT%H:%M:%S}"
    if local.microsecond:
        text += f".{local.microsecond:06d}"
    return f"{text}{sign}{minutes // 60:02d}:{minutes % 60:02d}"


def expected(base: datetime, steps: list[dict[str, Any]], fmt: str, zone: ZoneInfo) -> str:
    """What ``{"$period": …, "steps": steps, "format": fmt}`` must resolve to, for a
    base instant ``base``."""
    wall = wall_of(base.astimezone(UTC), zone)
    for step in steps:
        wall = _step(wall, step, zone)
    if fmt == "date":
        return wall.time.date().isoformat()
    instant = instant_of(wall, zone)
    if fmt == "datetime":
        return _iso(instant, zone)
    offset = instant.astimezone(zone).utcoffset()
    assert offset is not None
    name = instant.astimezone(zone).tzname()
    assert name is not None
    return _local(instant, zone).replace(tzinfo=timezone(offset, name)).strftime(fmt)
