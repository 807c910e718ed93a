"""Slot-bound parameter values: a small, closed JSON vocabulary, never code.

A parameter value may be *bound* to the run's period instead of being a literal —
the date a daily report covers, the week a weekly one does. A binding is a JSON
object with the key ``"$period"``; it is validated when the definition is published
(or a manual run is asked for) and resolved **once, when the run row is created**,
into a literal string stored on the run, so what ran is always visible and a later
edit of the definition never changes a queued run::

    {"$period": "slot",                      the base: slot | interval_start | interval_end
     "steps": [{"business_days": -1}],       shifts and snaps, applied in order
     "format": "date"}                       date | datetime | a strftime pattern

**Base.** An instant, read in the definition's zone: ``slot`` is the slot's nominal time
(a manual run: the instant it was asked for), ``interval_start`` / ``interval_end``
the ends of its data interval (:mod:`nbcast.scheduler.period`).

**Steps.** A *shift* is an object with exactly one unit: ``minutes`` and ``hours``
move in absolute time (an hour before 03:00 on a spring-forward night is 01:00);
``days``, ``weeks`` and ``months`` move on the calendar, keeping the wall time
(months clamp to the month's last day: 31 March − 1 month is 28/29 February);
``business_days`` moves over Monday to Friday, skipping the holidays of an optional
``"calendar"`` (a country code of the ``holidays`` package, ``"DE"``, or a
subdivision, ``"US-NY"``); ``{"business_days": 0}`` moves forward to a business day
if it is not on one. A *snap* is ``{"to": ANCHOR}``: ``start_of_day`` (00:00),
``end_of_day`` (23:59:59), ``start_of_week`` / ``end_of_week`` (Monday 00:00 /
Sunday 23:59:59 — weeks start on Monday, ISO 8601), ``start_of_month`` /
``end_of_month``, ``start_of_quarter`` / ``end_of_quarter``.

**Format.** ``date`` (default): ``2026-10-30``; ``datetime``: ISO 8601 with the
zone's offset, ``2026-10-30T00:00:00+01:00``; or a ``strftime`` pattern (at most 64
characters, one of Python's documented directives after each ``%``), e.g. ``"%Y-%m"``.

**DST.** A base is an instant (the second pass of a fold slot is 01:30 *EST*). Minutes
and hours move that instant. Every other step moves its wall time on the calendar, and
the wall time it lands on is read back in the zone by one rule:

- *in a fold* (the wall time happens twice) it is read at the pass the step started
  from — the second pass only if the step started on a second pass — except that a
  snap to a start takes the first pass and a snap to an end the last (a day, week,
  month or quarter holds every instant of its wall times);
- *in a gap* (the wall time does not exist) it stands for the first instant after the
  gap, where the scheduler fires a shifted gap slot — whenever an instant is needed:
  for ``datetime``, a pattern, or a later minutes or hours step. ``date`` is the wall
  time's calendar date, and a later calendar step moves the wall time itself (a day a
  zone skipped, Apia's 30 December 2011, is still a date).

So, in New York on 1 November 2026: from 01:30 EDT (the first pass) ``{"hours": 1}``
is 01:30 EST, and from 01:30 EST (the second pass) ``{"hours": -1}`` is 01:30 EDT;
``{"days": 1}`` from 31 October 01:30 EDT is 1 November 01:30 EDT, while
``{"weeks": 52}`` from 2 November 2025 01:30 EST (that year's second pass) is
1 November 2026 01:30 EST; ``{"days": -1}`` from 9 March 2026 02:30 lands in the
spring-forward gap: its ``date`` is ``2026-03-08``, its ``datetime``
``2026-03-08T03:00:00-04:00``. A pattern's fields and its ``%z`` and ``%Z`` always
describe that one instant.

A binding resolves to a string, so it may only be given to a parameter whose default
is a string (or ``None``). Bounds: at most 16 steps, ``|n|`` at most 10,000 (business
days: 2,000). Examples — the previous business day of the slot:
``{"$period": "slot", "steps": [{"business_days": -1}]}``; the Sunday that ends the last
full week: ``{"$period": "slot", "steps": [{"weeks": -1}, {"to": "end_of_week"}]}``;
the month before the slot's month: ``{"$period": "slot", "steps": [{"months": -1}],
"format": "%Y-%m"}``. Steps that leave the years 1 to 9999 are an error naming the
field, when the run row is made.
"""

from __future__ import annotations

import calendar as _calendar
import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from nbcast.errors import MetadataError
from nbcast.limits import clip

__all__ = [
    "BASES",
    "SNAPS",
    "UNITS",
    "Binding",
    "Period",
    "is_binding",
    "parse_binding",
    "resolve",
    "resolve_parameters",
]

KEY = "$period"
BASES = ("slot", "interval_start", "interval_end")
UNITS = ("minutes", "hours", "days", "weeks", "months", "business_days")
SNAPS = (
    "start_of_day",
    "end_of_day",
    "start_of_week",
    "end_of_week",
    "start_of_month",
    "end_of_month",
    "start_of_quarter",
    "end_of_quarter",
)
MAX_STEPS = 16
MAX_SHIFT = 10_000
MAX_BUSINESS_DAYS = 2_000
_DIRECTIVES = set("aAwdbBmyYHIpMSfzZjUWcxXGuV%")
_CALENDAR = re.compile(r"[A-Z]{2,3}(-[A-Z0-9]{1,8})?", re.ASCII)


@dataclass(frozen=True, slots=True)
class PeriodStep:
    """One shift (``unit``, ``n``, optional ``calendar``) or snap (``to``)."""

    unit: str | None = None
    n: int = 0
    calendar: str | None = None
    to: str | None = None


@dataclass(frozen=True, slots=True)
class Binding:
    """A validated binding (module docstring)."""

    base: str
    steps: tuple[PeriodStep, ...]
    format: str
    path: str = field(default="", compare=False)
    """The field it was given in (``report_date``), named by resolution errors."""


@dataclass(frozen=True, slots=True)
class Period:
    """What a binding is resolved against: the run's nominal time and data interval
    (aware datetimes) and the definition's zone."""

    nominal: datetime
    interval_start: datetime
    interval_end: datetime
    zone: ZoneInfo


def is_binding(value: Any) -> bool:
    """Whether ``value`` is a binding (an object with the key ``$period``)."""
    return isinstance(value, dict) and KEY in value


def parse_binding(value: Any, path: str) -> Binding:
    """Validate a binding; :class:`MetadataError` naming ``path`` (and the part of
    the binding that is wrong) otherwise."""
    if not isinstance(value, dict):
        raise MetadataError(path, "a binding must be an object with '$period'")
    unknown = set(value) - {KEY, "steps", "format"}
    if unknown:
        raise MetadataError(
            path, f"unknown key {clip(sorted(unknown)[0])} (allowed: $period, steps, format)"
        )
    base = value.get(KEY)
    if base not in BASES:
        raise MetadataError(f"{path}.$period", f"{clip(base)} is not one of {'|'.join(BASES)}")
    steps_value = value.get("steps", [])
    if not isinstance(steps_value, list):
        raise MetadataError(f"{path}.steps", "must be a list")
    if len(steps_value) > MAX_STEPS:
        raise MetadataError(f"{path}.steps", f"at most {MAX_STEPS} steps")
    steps = tuple(_step(item, f"{path}.steps[{i}]") for i, item in enumerate(steps_value))
    fmt = value.get("format", "date")
    if not isinstance(fmt, str):
        raise MetadataError(f"{path}.format", "must be date, datetime or a strftime pattern")
    if fmt not in ("date", "datetime"):
        _check_pattern(fmt, f"{path}.format")
    return Binding(base=base, steps=steps, format=fmt, path=path)


def _step(item: Any, path: str) -> PeriodStep:
    if not isinstance(item, dict) or not item:
        raise MetadataError(path, 'a step is an object: one unit (e.g. {"days": -1}) or {"to": …}')
    if "to" in item:
        if len(item) != 1:
            raise MetadataError(path, "a snap has only 'to'")
        if item["to"] not in SNAPS:
            raise MetadataError(f"{path}.to", f"{clip(item['to'])} is not one of {'|'.join(SNAPS)}")
        return PeriodStep(to=item["to"])
    extra = set(item) - set(UNITS) - {"calendar"}
    if extra:
        raise MetadataError(
            path, f"unknown unit {clip(sorted(extra)[0])} (units: {', '.join(UNITS)})"
        )
    units = [key for key in item if key in UNITS]
    if len(units) != 1:
        raise MetadataError(path, "a shift has exactly one unit")
    unit, n = units[0], item[units[0]]
    if isinstance(n, bool) or not isinstance(n, int):
        raise MetadataError(f"{path}.{unit}", "must be a whole number")
    bound = MAX_BUSINESS_DAYS if unit == "business_days" else MAX_SHIFT
    if abs(n) > bound:
        raise MetadataError(f"{path}.{unit}", f"must be between -{bound:,} and {bound:,}")
    calendar = item.get("calendar")
    if calendar is not None:
        if unit != "business_days":
            raise MetadataError(f"{path}.calendar", "only business_days take a calendar")
        _check_calendar(calendar, f"{path}.calendar")
    return PeriodStep(unit=unit, n=n, calendar=calendar)


def _check_pattern(pattern: str, path: str) -> None:
    if not pattern or len(pattern) > 64 or "%" not in pattern:
        raise MetadataError(
            path, "must be date, datetime or a strftime pattern (with %, at most 64)"
        )
    if not pattern.isprintable():
        raise MetadataError(path, "must be printable text")
    index = 0
    while (index := pattern.find("%", index)) != -1:
        directive = pattern[index + 1 : index + 2]
        if directive not in _DIRECTIVES:
            raise MetadataError(path, f"'%{directive}' is not a strftime directive nbcast supports")
        index += 2


def _check_calendar(code: Any, path: str) -> None:
    if not isinstance(code, str) or not _CALENDAR.fullmatch(code):
        raise MetadataError(path, f"{clip(code)} is not a holiday calendar like 'DE' or 'US-NY'")
    try:
        _holidays(code, 2026)
    except (KeyError, NotImplementedError, ValueError):
        raise MetadataError(
            path, f"{clip(code)} is not a calendar the holidays package knows"
        ) from None


@functools.lru_cache(maxsize=512)
def _holidays(code: str, year: int) -> frozenset[date]:
    """The holidays of ``code`` (``DE``, ``US-NY``) in ``year``."""
    import holidays

    country, _, subdivision = code.partition("-")
    if country not in holidays.list_supported_countries():
        raise KeyError(code)
    days = holidays.country_holidays(country, subdiv=subdivision or None, years=year)
    return frozenset(days)


# -- resolution -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _Wall:
    """A wall time in the zone (naive, ``fold=0``; it may fall in a gap) and whether its
    second pass is meant, should it happen twice. ``late`` is only ever true for a wall
    time that happens twice (:func:`_wall`)."""

    time: datetime
    late: bool


def resolve(binding: Binding, period: Period) -> str:
    """The literal string ``binding`` means for ``period`` (module docstring, "DST").

    :class:`MetadataError` naming the binding's field if its steps leave the years
    1 to 9999."""
    base = {
        "slot": period.nominal,
        "interval_start": period.interval_start,
        "interval_end": period.interval_end,
    }[binding.base]
    zone = period.zone
    try:
        # Through UTC, so the pass comes from the instant, not from a ``fold`` the
        # caller's datetime may or may not carry.
        wall = _wall_of(base.astimezone(UTC).astimezone(zone))
        for step in binding.steps:
            wall = _apply(step, wall, zone)
        if binding.format == "date":
            return wall.time.date().isoformat()
        aware = _localize(wall, zone)
        if binding.format == "datetime":
            return aware.isoformat()
        return aware.strftime(binding.format)
    except (OverflowError, ValueError):
        raise MetadataError(
            binding.path or KEY, "its steps move outside the years 1 to 9999"
        ) from None


def _wall_of(aware: datetime) -> _Wall:
    """The wall time of an aware datetime of the zone, and its pass (zoneinfo sets
    ``fold=1`` on the second pass of an ambiguous time it converted from UTC)."""
    return _Wall(aware.replace(tzinfo=None, fold=0), late=aware.fold == 1)


def _wall(time: datetime, late: bool, zone: ZoneInfo) -> _Wall:
    """``time`` at its second pass if ``late`` and it has one, else its first."""
    return _Wall(time, late=late and len(_instants(time, zone)) > 1)


def _apply(step: PeriodStep, wall: _Wall, zone: ZoneInfo) -> _Wall:
    if step.to is not None:
        # A start is the period's first instant, an end its last: in a fold, the first
        # and the last pass.
        return _wall(_snap(step.to, wall.time), step.to.startswith("end"), zone)
    n = step.n
    if step.unit in ("minutes", "hours"):
        # Absolute time: an hour is an hour, also across a DST change.
        delta = timedelta(minutes=n) if step.unit == "minutes" else timedelta(hours=n)
        return _wall_of((_localize(wall, zone).astimezone(UTC) + delta).astimezone(zone))
    if step.unit == "days":
        moved = wall.time + timedelta(days=n)
    elif step.unit == "weeks":
        moved = wall.time + timedelta(weeks=n)
    elif step.unit == "months":
        moved = _add_months(wall.time, n)
    else:
        moved = _business_days(wall.time, n, step.calendar)
    return _wall(moved, wall.late, zone)


def _add_months(wall: datetime, n: int) -> datetime:
    months = wall.year * 12 + (wall.month - 1) + n
    year, month = divmod(months, 12)
    month += 1
    day = min(wall.day, _calendar.monthrange(year, month)[1])
    return wall.replace(year=year, month=month, day=day)


def _is_business_day(day: date, calendar: str | None) -> bool:
    if day.weekday() >= 5:
        return False
    return calendar is None or day not in _holidays(calendar, day.year)


def _business_days(wall: datetime, n: int, calendar: str | None) -> datetime:
    day = wall.date()
    if n == 0:
        while not _is_business_day(day, calendar):
            day += timedelta(days=1)
    step = 1 if n > 0 else -1
    for _ in range(abs(n)):
        day += timedelta(days=step)
        while not _is_business_day(day, calendar):
            day += timedelta(days=step)
    return datetime.combine(day, wall.time())


def _snap(anchor: str, wall: datetime) -> datetime:
    day = wall.date()
    if anchor.endswith("_week"):
        first = day - timedelta(days=day.weekday())
        last = first + timedelta(days=6)
    elif anchor.endswith("_month"):
        first = day.replace(day=1)
        last = day.replace(day=_calendar.monthrange(day.year, day.month)[1])
    elif anchor.endswith("_quarter"):
        start_month = 3 * ((day.month - 1) // 3) + 1
        first = date(day.year, start_month, 1)
        end_month = start_month + 2
        last = date(day.year, end_month, _calendar.monthrange(day.year, end_month)[1])
    else:  # the day
        first = last = day
    if anchor.startswith("start"):
        return datetime.combine(first, datetime.min.time())
    return datetime.combine(last, datetime.max.time().replace(microsecond=0))


def _instants(time: datetime, zone: ZoneInfo) -> list[datetime]:
    """The UTC instants whose wall time in ``zone`` is ``time``, earliest first: one,
    two in a fold, none in a gap."""
    found: list[datetime] = []
    for fold in (0, 1):
        instant = time.replace(tzinfo=zone, fold=fold).astimezone(UTC)
        if instant.astimezone(zone).replace(tzinfo=None) == time and instant not in found:
            found.append(instant)
    return sorted(found)


def _localize(wall: _Wall, zone: ZoneInfo) -> datetime:
    """The instant a wall time names, as an aware datetime of the zone: its second pass
    if ``wall.late``, else its first; in a gap, the first instant after the gap — where
    the scheduler fires a shifted gap slot."""
    instants = _instants(wall.time, zone)
    if instants:
        return (instants[-1] if wall.late else instants[0]).astimezone(zone)
    # In a gap: the transition lies between the two readings PEP 495 gives; find the
    # first second whose wall time is later than ``wall``.
    time = wall.time
    low = int(time.replace(tzinfo=zone, fold=1).astimezone(UTC).timestamp())
    high = int(time.replace(tzinfo=zone, fold=0).astimezone(UTC).timestamp())
    low, high = min(low, high), max(low, high)
    while high - low > 1:
        middle = (low + high) // 2
        if datetime.fromtimestamp(middle, zone).replace(tzinfo=None) > time:
            high = middle
        else:
            low = middle
    return datetime.fromtimestamp(high, zone)


def resolve_parameters(values: Mapping[str, Any], period: Period) -> dict[str, Any]:
    """``values`` with every binding resolved for ``period`` (literals unchanged)."""
    return {
        name: resolve(parse_binding(value, name), period) if is_binding(value) else value
        for name, value in values.items()
    }
