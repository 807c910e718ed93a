"""Durations as people write them: ``90s``, ``10m``, ``1h30m``, ``2d``, ``1w``.

Used by the ``nbcast`` metadata block (``every``, ``misfire.grace``, ``jitter``,
``staleness.after``), ``schedule preview --every`` and ``NBCAST_LINK_TTL``. Every
duration is bounded (:data:`nbcast.limits.MAX_DURATION` unless the caller says less),
so none can overflow a ``datetime``.
"""

from __future__ import annotations

import re
from datetime import timedelta

from nbcast.limits import MAX_DURATION, clip

__all__ = ["parse_duration"]

# ASCII digits only (``\d`` would take "١m"), at most 12 of them per unit.
_DURATION = re.compile(
    r"(?:([0-9]{1,12})w)?(?:([0-9]{1,12})d)?(?:([0-9]{1,12})h)?(?:([0-9]{1,12})m)?"
    r"(?:([0-9]{1,12})s)?",
    re.ASCII,
)
_UNIT_SECONDS = (604_800, 86_400, 3_600, 60, 1)


def parse_duration(text: str, maximum: timedelta = MAX_DURATION) -> timedelta:
    """Parse ``90s``, ``10m``, ``1h30m``, ``2d``, ``1w`` into a timedelta.

    ValueError (one line, the input clipped) for anything else, or for a duration
    longer than ``maximum`` (default :data:`nbcast.limits.MAX_DURATION`).
    """
    if isinstance(text, str) and text.strip() == "0":
        return timedelta(0)
    match = _DURATION.fullmatch(text.strip()) if isinstance(text, str) else None
    if not match or not any(match.groups()):
        raise ValueError(f"{clip(text)} is not a duration like '90s', '10m', '1h30m', '2d'")
    seconds = sum(int(g) * unit for g, unit in zip(match.groups(), _UNIT_SECONDS, strict=True) if g)
    if seconds > maximum.total_seconds():
        raise ValueError(f"{clip(text)} is longer than the limit of {_describe(maximum)}")
    return timedelta(seconds=seconds)


def _describe(duration: timedelta) -> str:
    if duration.days and not duration.seconds:
        return f"{duration.days} days" if duration.days != 1 else "1 day"
    return str(duration)
