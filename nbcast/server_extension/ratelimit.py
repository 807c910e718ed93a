"""A bounded, in-memory token bucket per client address, for the public endpoints.

The signed-link and one-click unsubscribe endpoints need no login (the token is the
authority), so anyone can call them; :class:`RateLimiter` keeps one address from
calling them more than ``rate_per_minute`` times a minute on average, with bursts
of up to that many. Each address has a bucket of ``rate_per_minute`` tokens that
refills continuously; a request takes one, and a request finding the bucket empty
is refused with the seconds until a token is back (the ``Retry-After`` answer).

Memory is bounded: at most ``max_addresses`` buckets are kept, the least recently
used one forgotten when a new address arrives at a full table (a forgotten address
starts again with a full bucket — at worst a flood of distinct addresses lets each
of them make one burst, which the bound on the table makes harmless to the server).
A bucket that has refilled completely is equivalent to no bucket, so it is dropped
when met. The limiter is per server process and forgets everything on restart: it
is a brake on abuse, not an accounting.
"""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

__all__ = ["DEFAULT_MAX_ADDRESSES", "RateLimiter"]

DEFAULT_MAX_ADDRESSES = 10_000
"""How many addresses' buckets are kept at most."""


class RateLimiter:
    """Token buckets per key (module docstring)."""

    def __init__(
        self,
        rate_per_minute: int,
        *,
        max_addresses: int = DEFAULT_MAX_ADDRESSES,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        if rate_per_minute < 1 or max_addresses < 1:
            raise ValueError("the rate and the number of addresses must be positive")
        self.capacity = float(rate_per_minute)
        self.per_second = rate_per_minute / 60.0
        self.max_addresses = max_addresses
        self._monotonic = monotonic
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()
        self._lock = threading.Lock()

    def __len__(self) -> int:
        """How many addresses are tracked now."""
        return len(self._buckets)

    def take(self, key: str) -> float | None:
        """Take one token for ``key``: None if the request may go on, else the
        seconds (at least 1, whole) until it may be tried again."""
        now = self._monotonic()
        with self._lock:
            tokens, then = self._buckets.pop(key, (self.capacity, now))
            tokens = min(self.capacity, tokens + (now - then) * self.per_second)
            if tokens >= 1.0:
                tokens -= 1.0
                refused: float | None = None
            else:
                refused = float(max(1, math.ceil((1.0 - tokens) / self.per_second)))
            if tokens < self.capacity:  # a full bucket needs no row
                self._buckets[key] = (tokens, now)
                while len(self._buckets) > self.max_addresses:
                    self._buckets.popitem(last=False)
            return refused
