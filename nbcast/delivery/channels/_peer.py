"""What channels take from a peer's answer, bounded: ``Retry-After`` and text.

A peer is not trusted to be sensible. A ``Retry-After`` of ``99999999999999999999``
seconds, ``inf``, ``-5`` or a date in the year 9999 must neither raise nor park a
delivery for centuries, and a reply is never stored whole: only a short, printable
excerpt of it goes into a receipt or an error.
"""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

__all__ = ["PEER_TEXT_LIMIT", "RETRY_AFTER_CEILING", "parse_retry_after", "peer_text"]

RETRY_AFTER_CEILING = 86_400.0
"""The most seconds a parsed ``Retry-After`` may say (one day). The ledger then cuts
it to the channel's :attr:`~nbcast.delivery.channels.base.Channel.max_retry_after`."""

PEER_TEXT_LIMIT = 300
"""The most characters of a peer's text kept in a receipt or an error."""

_CONTROL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


def parse_retry_after(value: object, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value — delay-seconds or an HTTP-date
    (RFC 9110 §10.2.3) — in ``[0, RETRY_AFTER_CEILING]``; None when it says nothing
    usable (missing, negative, not a number, not finite, not a date). Never raises."""
    if isinstance(value, list | tuple):
        value = value[0] if value else None
    if value is None:
        return None
    text = str(value).strip()[:64]
    if not text:
        return None
    seconds: float | None
    try:
        seconds = float(text)
    except ValueError:
        seconds = _seconds_until(text, now)
    if seconds is None or not math.isfinite(seconds) or seconds < 0:
        return None
    return min(seconds, RETRY_AFTER_CEILING)


def _seconds_until(text: str, now: datetime | None) -> float | None:
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    try:
        return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
    except (OverflowError, ValueError):
        return None


def peer_text(value: object, limit: int = PEER_TEXT_LIMIT) -> str:
    """At most ``limit`` characters of ``value`` as text, without control characters
    (a NUL, for one, is refused by PostgreSQL's ``jsonb``)."""
    text = value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)
    text = _CONTROL.sub("\ufffd", text[: limit * 2])
    return text if len(text) <= limit else text[: limit - 3] + "..."
