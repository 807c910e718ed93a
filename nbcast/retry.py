"""Retry timing: the one exponential backoff of nbcast.

- :func:`backoff` — with full jitter, for work that many items retry at once (runs,
  deliveries, renders, SLA alerts), so their retries spread out;
- :func:`backoff_ceiling` — the same curve without jitter, for waits that replicas
  must agree on or that one supervisor keeps (a definition that failed, an embedded
  service or a pooled kernel that keeps dying).

Both are bounded for any input: the exponent stops at :data:`MAX_BACKOFF_EXPONENT`
(past about 1,024 the power cannot even be converted to a float, and a tenant may
allow that many attempts), and no wait exceeds :data:`MAX_BACKOFF_S`.
"""

from __future__ import annotations

import math
import random
from datetime import timedelta

__all__ = ["MAX_BACKOFF_EXPONENT", "MAX_BACKOFF_S", "backoff", "backoff_ceiling"]

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
    return timedelta(
        seconds=(rng or random).uniform(0, backoff_ceiling(attempt, base=base, cap=cap))
    )


def backoff_ceiling(attempt: int, *, base: float, cap: float) -> float:
    """``min(cap, base · 2^(attempt-1))`` seconds, deterministic (module docstring):
    ``base`` for an ``attempt`` of 1 or less, doubling, at most ``cap`` and a day."""
    base = _bounded(base)
    cap = _bounded(cap)
    exponent = min(max(int(attempt) - 1, 0), MAX_BACKOFF_EXPONENT)
    return min(cap, base * 2.0**exponent, MAX_BACKOFF_S)


def _bounded(value: float) -> float:
    if math.isnan(value) or value < 0:
        return 0.0
    return min(float(value), MAX_BACKOFF_S)
