"""Retry timing shared by the planes: exponential backoff with full jitter."""

from __future__ import annotations

import math
import random
from datetime import timedelta

__all__ = ["MAX_BACKOFF_EXPONENT", "MAX_BACKOFF_S", "backoff"]

MAX_BACKOFF_EXPONENT = 64
"""``2 ** (attempt - 1)`` stops growing here: past about 1,024 the power cannot even be
converted to a float, and a tenant may allow that many attempts."""
MAX_BACKOFF_S = 86_400.0
"""No backoff waits longer than a day, whatever ``base`` and ``cap`` say."""


def backoff(
    attempt: int, *, base: float = 30.0, cap: float = 3600.0, rng: random.Random | None = None
) -> timedelta:
    """How long to wait before attempt ``attempt + 1``: ``uniform(0, min(cap, base ·
    2^(attempt-1)))`` ("full jitter", so retries of many items spread out).

    Bounded for any input: the exponent stops at :data:`MAX_BACKOFF_EXPONENT`, and a
    negative or non-finite ``base`` or ``cap`` counts as :data:`MAX_BACKOFF_S` at most
    (NaN as 0), so the result is a finite wait of at most a day.
    """
    base = _bounded(base)
    cap = _bounded(cap)
    exponent = min(max(attempt - 1, 0), MAX_BACKOFF_EXPONENT)
    ceiling = min(cap, base * 2.0**exponent, MAX_BACKOFF_S)
    return timedelta(seconds=(rng or random).uniform(0, ceiling))


def _bounded(value: float) -> float:
    if math.isnan(value) or value < 0:
        return 0.0
    return min(float(value), MAX_BACKOFF_S)
