"""Retention (being built; see issue 13)."""

from __future__ import annotations

from typing import Any

from nbcast.clock import Clock
from nbcast.db import Database

__all__ = ["retention_job"]


def retention_job(db: Database, clock: Clock) -> dict[str, Any]:
    """The daily retention pass over every tenant with a retention policy."""
    return {}
