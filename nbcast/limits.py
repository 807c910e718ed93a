"""Every bound nbcast puts on numbers and shapes that come from outside, in one place.

Input reaches nbcast from people (notebooks, metadata blocks, ``-p`` values, command
arguments, environment variables) and from peers (a webhook's ``Retry-After``). Each
of them is bounded here, so that no input can overflow a ``datetime``, exhaust
memory, recurse without end or stall a loop, and so that the bounds are documented
once (the README's "Limits" table is this module's table):

==============================  =========================  ==================================
what                            bound                      where it is enforced
==============================  =========================  ==================================
notebook file read at publish   64 MiB                     :mod:`nbcast.definitions.notebook`
normalized notebook (stored)    ``NBCAST_MAX_NOTEBOOK_     publish (configurable)
                                BYTES``, default 4 MiB
JSON nesting (notebook)         64 levels                  publish
JSON nesting (values)           32 levels                  metadata block, ``-p`` values
integers in values              ±(2**63 - 1)               parameters, metadata block
strings in values               1 MiB each                 parameters, metadata block
description                     10,000 characters          metadata block
declared parameters             500                        parameters cell
parameters cell source          100,000 characters         parameters cell
subscriptions                   1,000                      metadata block
durations (any)                 3,660 days                 ``parse_duration``
``every``, ``grace``,           366 days                   metadata block, ``schedule preview``
``staleness.after``
``jitter``                      1 day                      metadata block
``max_catchup``                 10,000                     metadata block
``start`` / ``end``, instants   1800-01-02 .. 8999-12-31   metadata block, command arguments
rows (slots x audiences) per     100,000                    scheduler (the rest: next pass)
definition per pass
rows per backfill, slots per    100,000                    ``backfill``, ``schedule preview``
preview
repeated failures of one        backoff 30 s doubling to   scheduler (poison definitions)
definition                      at most 1 h
==============================  =========================  ==================================

NUL characters and lone surrogates (text that is not valid Unicode) are refused in
every string that is stored (PostgreSQL cannot store them in ``text`` or ``jsonb``;
SQLite could, and then the two would disagree).

Error messages echo at most :data:`ECHO_CHARS` characters of any input
(:func:`clip`), so a 10,000-character name or a 5,000-digit number never floods a
terminal or a log.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

__all__ = [
    "ECHO_CHARS",
    "MAX_BACKFILL_SLOTS",
    "MAX_CATCHUP",
    "MAX_DESCRIPTION_CHARS",
    "MAX_DURATION",
    "MAX_INT",
    "MAX_JITTER",
    "MAX_NOTEBOOK_DEPTH",
    "MAX_NOTEBOOK_FILE_BYTES",
    "MAX_PARAMETERS",
    "MAX_PARAMETERS_CELL_CHARS",
    "MAX_SCHEDULE_DURATION",
    "MAX_SLOTS_PER_PASS",
    "MAX_STRING_CHARS",
    "MAX_SUBSCRIPTIONS",
    "MAX_VALUE_DEPTH",
    "WALL_TIME_MAX",
    "WALL_TIME_MIN",
    "clip",
    "instant_in_range",
    "json_problem",
    "notebook_byte_limit",
    "storable_text",
    "too_deep",
]

ECHO_CHARS = 80
"""At most this many characters of an input are echoed in an error message."""

MAX_NOTEBOOK_FILE_BYTES = 64 * 1024 * 1024
"""A notebook file larger than this is not even read (outputs included)."""
DEFAULT_MAX_NOTEBOOK_BYTES = 4 * 1024 * 1024
"""Default of ``NBCAST_MAX_NOTEBOOK_BYTES``: the normalized notebook (outputs stripped)."""
MAX_NOTEBOOK_DEPTH = 64
MAX_VALUE_DEPTH = 32
MAX_INT = 2**63 - 1
MAX_STRING_CHARS = 1024 * 1024
MAX_DESCRIPTION_CHARS = 10_000
MAX_PARAMETERS = 500
MAX_PARAMETERS_CELL_CHARS = 100_000
"""The longest ``parameters`` cell read (tokenizing and parsing a megabyte of Python
takes seconds; a real parameters cell is a few lines)."""
MAX_SUBSCRIPTIONS = 1_000
MAX_DURATION = timedelta(days=3660)
MAX_SCHEDULE_DURATION = timedelta(days=366)
MAX_JITTER = timedelta(days=1)
MAX_CATCHUP = 10_000
MAX_SLOTS_PER_PASS = 100_000
MAX_BACKFILL_SLOTS = 100_000
WALL_TIME_MIN = datetime(1800, 1, 2)
"""Earliest wall time or instant accepted (a day inside the compiler's domain)."""
WALL_TIME_MAX = datetime(8999, 12, 31, 23, 59, 59)
"""Latest wall time or instant accepted (a day inside the compiler's domain)."""


def clip(value: object, limit: int = ECHO_CHARS) -> str:
    """``repr(value)`` for an error message, at most ``limit`` characters.

    Safe for any value: a huge integer (whose ``repr`` Python refuses past 4,300
    digits) is described by its size instead.
    """
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) > 10**60:
        return f"<an integer of about {int(abs(value).bit_length() * 0.30103)} digits>"
    try:
        text = repr(value)
    except Exception:  # a repr that fails must not hide the real error
        text = f"<{type(value).__name__}>"
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _walk(value: Any, path: str, depth: int) -> Iterator[tuple[str, Any, int]]:
    # Iterative, so a value nested 100,000 deep is measured without recursion.
    stack = [(value, path, depth)]
    while stack:
        item, where, level = stack.pop()
        yield where, item, level
        if isinstance(item, dict):
            for key, child in item.items():
                stack.append((child, f"{where}.{key}" if where else str(key), level + 1))
                yield f"{where}.{key}" if where else str(key), key, level + 1
        elif isinstance(item, list):
            for index, child in enumerate(item):
                stack.append((child, f"{where}[{index}]", level + 1))


def json_problem(
    value: Any,
    path: str = "",
    *,
    max_depth: int = MAX_VALUE_DEPTH,
    max_string: int | None = MAX_STRING_CHARS,
) -> str | None:
    """Why ``value`` (decoded JSON) cannot be stored, or None.

    Problems: nesting deeper than ``max_depth``, a NUL character in a string or key,
    an integer beyond ±(2**63 - 1), a float that is not finite, a string longer than
    ``max_string`` (default :data:`MAX_STRING_CHARS`; None: no limit). The message
    starts with the dotted path of the first offending item.
    """
    for where, item, level in _walk(value, path, 0):
        label = where or "value"
        if level > max_depth:
            return f"{label}: nested more than {max_depth} levels deep"
        if isinstance(item, str):
            if "\x00" in item:
                return f"{label}: contains a NUL character"
            if not _encodable(item):
                return f"{label}: is not valid Unicode (a lone surrogate)"
            if max_string is not None and len(item) > max_string:
                return f"{label}: a string longer than {max_string:,} characters"
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int):
            if not -MAX_INT <= item <= MAX_INT:
                return f"{label}: {clip(item)} is outside ±(2**63 - 1)"
        elif isinstance(item, float) and not math.isfinite(item):
            return f"{label}: {item!r} is not a finite number"
    return None


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def storable_text(text: str) -> bool:
    """Whether ``text`` can be stored as is: no NUL, no lone surrogate."""
    return "\x00" not in text and _encodable(text)


def too_deep(value: Any, limit: int) -> bool:
    """Whether ``value`` nests lists/dicts more than ``limit`` levels (iteratively)."""
    stack = [(value, 0)]
    while stack:
        item, level = stack.pop()
        if level > limit:
            return True
        if isinstance(item, dict):
            stack.extend((child, level + 1) for child in item.values())
        elif isinstance(item, list):
            stack.extend((child, level + 1) for child in item)
    return False


def notebook_byte_limit(environ: Mapping[str, str] | None = None) -> int:
    """``NBCAST_MAX_NOTEBOOK_BYTES`` (default :data:`DEFAULT_MAX_NOTEBOOK_BYTES`): the
    largest normalized notebook a publish accepts, between 1 KiB and 64 MiB."""
    from nbcast.errors import ConfigError

    env = os.environ if environ is None else environ
    text = env.get("NBCAST_MAX_NOTEBOOK_BYTES", "").strip()
    if not text:
        return DEFAULT_MAX_NOTEBOOK_BYTES
    if not text.isascii() or not text.isdigit() or len(text) > 12:
        raise ConfigError(f"NBCAST_MAX_NOTEBOOK_BYTES: {clip(text)} is not a number of bytes")
    value = int(text)
    if not 1024 <= value <= MAX_NOTEBOOK_FILE_BYTES:
        raise ConfigError(
            f"NBCAST_MAX_NOTEBOOK_BYTES must be between 1024 and {MAX_NOTEBOOK_FILE_BYTES}"
        )
    return value


def instant_in_range(instant: datetime) -> bool:
    """Whether an aware instant lies in [:data:`WALL_TIME_MIN`, :data:`WALL_TIME_MAX`] UTC."""
    low = WALL_TIME_MIN.replace(tzinfo=UTC)
    high = WALL_TIME_MAX.replace(tzinfo=UTC)
    try:
        return low <= instant.astimezone(UTC) <= high
    except (OverflowError, ValueError):  # so far out that UTC cannot hold it
        return False
