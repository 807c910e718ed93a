"""Who asks, and how lists come back: the two things every query and command shares.

nbcast's faces — the CLI, the REST API, the JupyterLab extension through the API —
call one layer of functions: a **query** takes a ``Session`` and a :class:`Caller`
and returns typed records; a **command** (a state change) takes the database, the
clock and a :class:`Caller` and commits one transaction. Each one scopes itself to
``caller.tenant``: a record of another tenant is "not found", never returned, so no
face can reach across tenants by passing another id.

Lists are keyset-paginated (:class:`Page`): a query returns at most ``limit`` items
(:func:`page_limit`: default 50, at most 1,000) and, when more follow, an opaque
``next_after`` cursor to pass back as ``after``. A cursor encodes the sort key of the
last item, so a page deep in a million rows costs what the first one costs.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Generic, TypeVar

from nbcast.errors import ConfigError

__all__ = [
    "DEFAULT_PAGE",
    "MAX_PAGE",
    "Caller",
    "Page",
    "decode_cursor",
    "encode_cursor",
    "page_limit",
]

T = TypeVar("T")

DEFAULT_PAGE = 50
MAX_PAGE = 1_000


@dataclass(frozen=True, kw_only=True)
class Caller:
    """Who a query or command acts for: a user of one tenant."""

    tenant: str
    user: str


@dataclass(frozen=True)
class Page(Generic[T]):
    """One page of a list, and the cursor of the next one (None: this is the last)."""

    items: list[T]
    next_after: str | None = None


def page_limit(limit: int | None) -> int:
    """``limit`` checked: default :data:`DEFAULT_PAGE`, 1 to :data:`MAX_PAGE`."""
    if limit is None:
        return DEFAULT_PAGE
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= MAX_PAGE:
        raise ConfigError(f"limit must be a whole number from 1 to {MAX_PAGE:,}")
    return limit


def encode_cursor(*values: Any) -> str:
    """An opaque cursor for a sort key (ids, strings, aware datetimes)."""
    plain = [v.isoformat() if isinstance(v, datetime) else v for v in values]
    raw = json.dumps(plain, separators=(",", ":")).encode()
    return base64.urlsafe_b64encode(raw).decode().rstrip("=")


def decode_cursor(cursor: str, kinds: Sequence[type]) -> tuple[Any, ...]:
    """The sort key in ``cursor``, each value checked against ``kinds`` (``datetime``
    values come back aware, ``int`` values are ids in ``[0, 2**63)``, ``str`` values
    printable); :class:`ConfigError` for anything else — a forged cursor is bad input,
    never a database error."""
    try:
        if not isinstance(cursor, str) or len(cursor) > 512:
            raise ValueError
        raw = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4))
        values = json.loads(raw)
        if not isinstance(values, list) or len(values) != len(kinds):
            raise ValueError
        decoded: list[Any] = []
        for value, kind in zip(values, kinds, strict=True):
            if kind is datetime and isinstance(value, str):
                instant = datetime.fromisoformat(value)
                if instant.tzinfo is None:
                    raise ValueError
                decoded.append(instant)
            elif kind is int and isinstance(value, int) and not isinstance(value, bool):
                if not 0 <= value < 2**63:  # an id: what a BIGINT column holds
                    raise ValueError
                decoded.append(value)
            elif kind is str and isinstance(value, str):
                if len(value) > 512 or not value.isprintable():
                    raise ValueError
                decoded.append(value)
            else:  # None, or a value of another kind: nothing this list handed out
                raise ValueError
    except (ValueError, TypeError, UnicodeDecodeError):
        raise ConfigError("after: not a cursor this list handed out") from None
    return tuple(decoded)
