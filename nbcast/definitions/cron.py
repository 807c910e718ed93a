"""Cron expressions with cronie's (Vixie cron's) syntax and day rule.

Five fields: minute (0-59), hour (0-23), day of month (1-31), month (1-12 or
``jan``-``dec``), day of week (0-7 or ``sun``-``sat``; 0 and 7 are Sunday). Each field
is a comma-separated list of ``*``, ``N``, ``A-B``, ``*/S``, ``A-B/S`` or ``A/S``
(the last means ``A-max/S``, as cronie reads it). The macros ``@yearly``
(``@annually``), ``@monthly``, ``@weekly``, ``@daily`` (``@midnight``) and ``@hourly``
are accepted; ``@reboot`` is not a schedule.

**Day rule** (cronie): when the day-of-month or the day-of-week field begins with
``*`` (including ``*/n``), a day must match both fields; otherwise it must match
either. So ``0 0 1 * mon`` fires on the 1st *and* on every Monday, while
``0 0 */2 * mon`` fires on odd days that are Mondays.

An expression compiles to sorted tuples of allowed values, so matching a day or
listing a day's times costs set look-ups, not per-minute parsing.

Error messages echo at most :data:`~nbcast.limits.ECHO_CHARS` characters of the
expression or of a field, and a number of more than :data:`_MAX_DIGITS` digits is out
of range without being converted (Python refuses to convert one of 4,300 digits).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date

from nbcast.errors import ScheduleError
from nbcast.limits import clip

__all__ = ["CronExpression"]

_MONTHS = {
    m: i
    for i, m in enumerate(
        ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"],
        start=1,
    )
}
_DAYS = {d: i for i, d in enumerate(["sun", "mon", "tue", "wed", "thu", "fri", "sat"])}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
_FIELDS: tuple[tuple[str, int, int, dict[str, int]], ...] = (
    ("minute", 0, 59, {}),
    ("hour", 0, 23, {}),
    ("day of month", 1, 31, {}),
    ("month", 1, 12, _MONTHS),
    ("day of week", 0, 7, _DAYS),
)
_ITEM = re.compile(r"(?:(\*)|([0-9a-z]+)(?:-([0-9a-z]+))?)(?:/([0-9]+))?")
_MAX_DIGITS = 9
"""Digits (after leading zeros) a number in a field may have; a longer one is out of
range, as every field's values are below 60."""


def _number(digits: str) -> int:
    """``digits`` as a number, or one past every field's range if it is too long
    (leading zeros do not count)."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= _MAX_DIGITS else 10**_MAX_DIGITS


def _shown(digits: str) -> str:
    """A number as echoed in a message: as written, cut at 20 digits."""
    return digits if len(digits) <= 20 else digits[:19] + "…"


def _value(token: str, name: str, low: int, high: int, names: dict[str, int]) -> int:
    if token.isdigit():
        number = _number(token)
    elif token in names:
        number = names[token]
    else:
        raise ScheduleError(f"cron {name}: {clip(token)} is not a number or a known name")
    if not low <= number <= high:
        shown = _shown(token) if token.isdigit() else str(number)
        raise ScheduleError(f"cron {name}: {shown} is outside {low}-{high}")
    return number


def _parse_field(text: str, name: str, low: int, high: int, names: dict[str, int]) -> set[int]:
    values: set[int] = set()
    for item in text.split(","):
        match = _ITEM.fullmatch(item)
        if not match:
            raise ScheduleError(f"cron {name}: cannot parse {clip(item)}")
        star, first, last, step_text = match.groups()
        step = _number(step_text) if step_text else 1
        if step < 1 or step > high - low + 1:
            raise ScheduleError(f"cron {name}: step {_shown(step_text)} is out of range")
        if star:
            start, stop = low, high
        else:
            start = _value(first, name, low, high, names)
            if last is not None:
                stop = _value(last, name, low, high, names)
                if stop < start:
                    raise ScheduleError(f"cron {name}: range {clip(item)} runs backwards")
            else:
                stop = high if step_text else start
        values.update(range(start, stop + 1, step))
    return values


@dataclass(frozen=True)
class CronExpression:
    """A parsed five-field cron expression (see the module docstring).

    ``minutes``, ``hours``, ``days``, ``months`` and ``weekdays`` are sorted tuples of
    the values each field allows (weekdays 0-6, Sunday 0). ``dom_star`` and
    ``dow_star`` record whether those fields began with ``*``, which decides the
    day rule.
    """

    text: str
    minutes: tuple[int, ...]
    hours: tuple[int, ...]
    days: tuple[int, ...]
    months: tuple[int, ...]
    weekdays: tuple[int, ...]
    dom_star: bool
    dow_star: bool

    @classmethod
    def parse(cls, text: str) -> CronExpression:
        """Parse ``text``; :class:`~nbcast.errors.ScheduleError` names what is wrong."""
        if not isinstance(text, str) or not text.strip():
            raise ScheduleError("cron: an expression is required")
        source = text.strip().lower()
        if source.startswith("@"):
            if source not in _MACROS:
                raise ScheduleError(f"cron: unknown macro {clip(text.strip())}")
            source = _MACROS[source]
        fields = source.split()
        if len(fields) != 5:
            raise ScheduleError(
                f"cron: {clip(text.strip())} has {len(fields)} fields; five are needed "
                "(minute hour day-of-month month day-of-week)"
            )
        parsed = [
            _parse_field(field, name, low, high, names)
            for field, (name, low, high, names) in zip(fields, _FIELDS, strict=True)
        ]
        weekdays = {d % 7 for d in parsed[4]}
        return cls(
            text=text.strip(),
            minutes=tuple(sorted(parsed[0])),
            hours=tuple(sorted(parsed[1])),
            days=tuple(sorted(parsed[2])),
            months=tuple(sorted(parsed[3])),
            weekdays=tuple(sorted(weekdays)),
            dom_star=fields[2].startswith("*"),
            dow_star=fields[4].startswith("*"),
        )

    @property
    def fires_at_least_hourly(self) -> bool:
        """True when the hour field matches all 24 hours (decides ``auto`` DST policy)."""
        return len(self.hours) == 24

    def matches_day(self, day: date) -> bool:
        """Whether ``day`` (a calendar date) is a firing day under cronie's day rule."""
        if day.month not in self.months:
            return False
        dom = day.day in self.days
        dow = (day.isoweekday() % 7) in self.weekdays
        if self.dom_star or self.dow_star:
            return dom and dow
        return dom or dow
