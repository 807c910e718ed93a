"""Retry timing shared by the planes: exponential backoff with full jitter."""

from __future__ import annotations

import random
from datetime import timedelta

__all__ = ["backoff"]


def backoff(
    attempt: int, *, base: float = 30.0, cap: float = 3600.0, rng: random.Random | None = None
) -> timedelta:
    """How long to wait before attempt ``attempt + 1``: ``uniform(0, min(cap, base ·
    2^(attempt-1)))`` ("full jitter", so retries of many items spread out)."""
    ceiling = min(cap, base * 2 ** max(attempt - 1, 0))
    return timedelta(seconds=(rng or random).uniform(0, ceiling))
