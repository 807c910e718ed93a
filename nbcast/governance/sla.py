"""SLA monitoring (being built: the monitor records misses; see issue 13)."""

from __future__ import annotations

from typing import Any

from nbcast.clock import Clock
from nbcast.db import Database

__all__ = ["check_slas"]


def check_slas(db: Database, clock: Clock) -> dict[str, Any]:
    """Record the SLA misses of every definition with an SLA; return how many."""
    return {"misses": 0}
