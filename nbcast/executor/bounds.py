"""Bounds on the numbers the execution plane takes from outside (the rest of nbcast's
bounds are in :mod:`nbcast.limits`).

Tenant quotas are set by admins (``nbcast quota``, the API) and read from the database
on every claim; lease lengths and backoff come from the command line; warehouse usage
figures come from a file the notebook's kernel writes. None of them may crash a worker,
overflow a ``datetime`` or wedge a loop, so each is bounded where it is used:

=======================  ===============================  ===========================
number                   bound                            when out of bounds
=======================  ===============================  ===========================
run timeout (quota)      1 s … :data:`MAX_RUN_TIMEOUT_S`  clamped (NaN: the maximum)
                         (7 days)
retry backoff            exponent ≤ :data:`MAX_BACKOFF_   clamped: a huge attempt
                         EXPONENT`; base and cap ≤        number waits the cap
                         :data:`MAX_BACKOFF_S` (1 day)
lease length             … :data:`MAX_LEASE_S` (1 day)    ``ConfigError`` when ≤ 0 or
                                                          NaN; clamped above
backoff base (CLI)       0 … :data:`MAX_BACKOFF_S`        ``ConfigError`` when negative
                                                          or NaN; clamped above
usage rows / bytes       0 … 2**63 - 1 (``BIGINT``)       clamped (NaN: 0)
usage seconds            0 … :data:`MAX_RUN_TIMEOUT_S`    clamped (NaN: 0)
=======================  ===============================  ===========================

A retry's wait is :func:`nbcast.retry.backoff`, bounded there for any attempt number
(a tenant may allow more than 1,024 attempts, where an unbounded power overflows).
"""

from __future__ import annotations

import math

from nbcast.errors import ConfigError
from nbcast.retry import MAX_BACKOFF_EXPONENT, MAX_BACKOFF_S

__all__ = [
    "MAX_BACKOFF_EXPONENT",
    "MAX_BACKOFF_S",
    "MAX_COUNTER",
    "MAX_LEASE_S",
    "MAX_RUN_TIMEOUT_S",
    "backoff_seconds",
    "counter",
    "lease_seconds",
    "run_timeout",
    "usage_seconds",
]

MAX_RUN_TIMEOUT_S = 7 * 24 * 3600
"""The longest run timeout a quota can give an attempt (seconds)."""

MAX_LEASE_S = 24 * 3600.0
"""The longest lease (seconds)."""

MAX_COUNTER = 2**63 - 1
"""The largest rows / bytes figure recorded (the columns are 64-bit integers)."""


def run_timeout(value: float) -> float:
    """A quota's run timeout, clamped to ``[1, MAX_RUN_TIMEOUT_S]`` seconds."""
    seconds = float(value)
    if math.isnan(seconds):
        return float(MAX_RUN_TIMEOUT_S)
    return min(max(seconds, 1.0), float(MAX_RUN_TIMEOUT_S))


def backoff_seconds(value: float, what: str = "retry backoff") -> float:
    """A configured backoff base or cap: ``ConfigError`` if negative or NaN, at most
    :data:`MAX_BACKOFF_S`."""
    seconds = float(value)
    if math.isnan(seconds) or seconds < 0:
        raise ConfigError(f"{what} must be a number of seconds ≥ 0, not {value}")
    return min(seconds, MAX_BACKOFF_S)


def lease_seconds(value: float) -> float:
    """A configured lease length: ``ConfigError`` when ≤ 0 or NaN, at most
    :data:`MAX_LEASE_S`."""
    seconds = float(value)
    if math.isnan(seconds) or seconds <= 0:
        raise ConfigError(f"the lease must be a positive number of seconds, not {value}")
    return min(seconds, MAX_LEASE_S)


def counter(value: float) -> int:
    """A usage count (rows, bytes) clamped to ``[0, MAX_COUNTER]``; NaN is 0."""
    if isinstance(value, float) and not math.isfinite(value):
        return MAX_COUNTER if value > 0 else 0
    return min(max(int(value), 0), MAX_COUNTER)


def usage_seconds(value: float) -> float:
    """A usage duration clamped to ``[0, MAX_RUN_TIMEOUT_S]``; NaN is 0 (SQLite stores
    NaN as NULL, which the column refuses)."""
    seconds = float(value)
    if math.isnan(seconds):
        return 0.0
    return min(max(seconds, 0.0), float(MAX_RUN_TIMEOUT_S))
