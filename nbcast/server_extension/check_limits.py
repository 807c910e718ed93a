"""How much work ``POST /notebooks/check`` may ask of the server, and of whom.

A check parses a whole notebook, validates it against nbformat's schema, normalizes
and hashes it: for a body of megabytes that is seconds of CPU and many times the
body's size in Python objects. Before this module, six authors sending 30 MB checks
took the server to 1.75 GB and another tenant's ``GET /definitions`` p99 to 5.2 s
(``benchmarks/check_load.py``). Now each check passes these gates, in this order, and
a refused one builds nothing:

1. **Size, before the body is read** (the handler streams its body): a body over
   :func:`body_cap` — twice ``NBCAST_MAX_NOTEBOOK_BYTES`` (the largest notebook a
   version may hold once its outputs are stripped, default 4 MiB, so 8 MiB), at most
   :data:`MAX_CHECK_BODY` — is **413**, by its ``Content-Length`` or as it arrives;
   never kept. A notebook that large could not be published anyway; the JupyterLab
   dialog sends the notebook without its outputs. A body refused before it is read
   (here, or by gate 3) is read and dropped before the answer, so that its client
   sees the answer rather than a reset connection — at most :data:`MAX_DRAINING` at
   once and at most :data:`DRAIN_BYTES_PER_SECOND` each: past that (a flood) the
   refusal is answered at once and the connection closed, which costs the server
   nothing more.
2. **Who**: the caller needs the ``author`` role in a tenant that exists — checked
   by the command layer (:func:`nbcast.tenancy.roles.require`) before any byte of
   the body is parsed, and before a refusal of gate 1 or 3 is answered. (Those gates
   are settled earlier, while the body arrives, but whoever is refused, nothing is
   built.)
3. **Heavy checks per user and per server**: a check whose body is over
   :data:`HEAVY_CHECK_BYTES` (or of unknown length) is *heavy*. A user may have
   :data:`HEAVY_CHECKS_PER_USER` heavy check in flight and
   :data:`HEAVY_CHECKS_PER_MINUTE` a minute (a token bucket,
   :class:`~nbcast.server_extension.ratelimit.RateLimiter`); the server holds at most
   :data:`HEAVY_CHECKS_IN_FLIGHT` heavy bodies at once. Past any of them: **429**
   with ``Retry-After`` — 1 second for a check in flight, the bucket's refill time
   for the rate (at most 60 / :data:`HEAVY_CHECKS_PER_MINUTE` seconds). A light check
   is never refused for load: it is what the dialog sends.
4. **What the JSON would build, before it is built**: one pass of ``bytes.count``
   over the raw body (C speed, no objects) bounds what ``json.loads`` would create —
   cells (``"cell_type"`` keys), containers (``{`` and ``[``), strings (``"`` / 2)
   and items (``,``) — against :data:`MAX_CHECK_CELLS`, :data:`MAX_CHECK_CONTAINERS`,
   :data:`MAX_CHECK_STRINGS` and :data:`MAX_CHECK_ITEMS`: **413** past one. Each
   count is an upper bound (a bracket inside a string counts too), so a real
   notebook under the size cap stays far inside them (an 8 MiB notebook of code:
   about 5,000 cells, 51,000 containers, 314,000 strings, 331,000 items). The cell
   count is checked again after parsing, for keys written with ``\\u`` escapes.
5. **One heavy check at a time, in a child process** (the others wait their turn,
   their bodies already counted in gate 3): at most one notebook of megabytes is
   being turned into objects at any moment, outside the server's process
   (:mod:`nbcast.server_extension.check_work`), so its seconds of pure Python never
   hold the server's interpreter lock and its memory goes back to the system.

The counters live in the server process (like the link limiter) and forget
everything on restart: a brake on load, not an accounting.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from nbcast.limits import notebook_byte_limit
from nbcast.server_extension.json_body import MAX_JSON_BODY
from nbcast.server_extension.ratelimit import RateLimiter

__all__ = [
    "DRAIN_BYTES_PER_SECOND",
    "DRAIN_STEP_BYTES",
    "HEAVY_CHECKS_IN_FLIGHT",
    "HEAVY_CHECKS_PER_MINUTE",
    "HEAVY_CHECKS_PER_USER",
    "HEAVY_CHECK_BYTES",
    "MAX_CHECK_BODY",
    "MAX_CHECK_CELLS",
    "MAX_CHECK_CONTAINERS",
    "MAX_CHECK_ITEMS",
    "MAX_CHECK_STRINGS",
    "MAX_DRAINING",
    "Admission",
    "CheckLimits",
    "Refusal",
    "body_cap",
    "raw_problem",
]

MAX_CHECK_BODY = MAX_JSON_BODY
"""The largest check body whatever ``NBCAST_MAX_NOTEBOOK_BYTES`` says (the API's
largest JSON body, 32 MiB)."""
HEAVY_CHECK_BYTES = 1024 * 1024
"""A check body over this (or of unknown length) is heavy."""
HEAVY_CHECKS_PER_USER = 1
"""Heavy checks one user may have in flight."""
HEAVY_CHECKS_PER_MINUTE = 20
"""Heavy checks one user may start a minute (bursts of as many)."""
HEAVY_CHECKS_IN_FLIGHT = 4
"""Heavy check bodies the server holds at once, across users."""
MAX_CHECK_CELLS = 10_000
"""Cells a checked notebook may have."""
MAX_CHECK_CONTAINERS = 200_000
"""``{`` and ``[`` bytes a check body may hold."""
MAX_CHECK_STRINGS = 1_000_000
"""Strings (``"`` bytes / 2) a check body may hold."""
MAX_CHECK_ITEMS = 1_000_000
"""``,`` bytes a check body may hold."""

RETRY_IN_FLIGHT = 1
"""``Retry-After`` (seconds) of a check refused because another is in flight."""
MAX_DRAINING = 2
"""Refused bodies the server reads and drops at once so their clients get the answer;
past that a refusal is answered at once and the connection closed."""
DRAIN_BYTES_PER_SECOND = 64 * 1024 * 1024
"""How fast a refused body is read and dropped, at most (a pause after each
:data:`DRAIN_STEP_BYTES`), so that dropping bytes never crowds out other requests."""
DRAIN_STEP_BYTES = 1024 * 1024


def body_cap(environ: Mapping[str, str]) -> int:
    """The largest check body (gate 1): twice the normalized notebook limit, at most
    :data:`MAX_CHECK_BODY`."""
    return min(2 * notebook_byte_limit(environ), MAX_CHECK_BODY)


def raw_problem(raw: bytes | bytearray) -> str | None:
    """Why the JSON text ``raw`` would build too much (gate 4), or None."""
    counts = (
        (raw.count(b'"cell_type"'), MAX_CHECK_CELLS, "cells"),
        (raw.count(b"{") + raw.count(b"["), MAX_CHECK_CONTAINERS, "JSON objects and arrays"),
        (raw.count(b'"') // 2, MAX_CHECK_STRINGS, "JSON strings"),
        (raw.count(b","), MAX_CHECK_ITEMS, "JSON items"),
    )
    for count, bound, what in counts:
        if count > bound:
            return f"the notebook has more than {bound:,} {what} (about {count:,})"
    return None


@dataclass(frozen=True)
class Refusal:
    """A heavy check not let in (gate 3): why, and the seconds until a retry."""

    reason: str
    retry_after: float


@dataclass(eq=False)
class Admission:
    """A heavy check let in (gate 3); :meth:`CheckLimits.release` it exactly once."""

    user: str
    released: bool = False


class CheckLimits:
    """The server's counters of heavy checks (module docstring, gates 3 and 5). Used
    from the event loop's thread only."""

    def __init__(
        self,
        *,
        per_user: int = HEAVY_CHECKS_PER_USER,
        per_minute: int = HEAVY_CHECKS_PER_MINUTE,
        in_flight: int = HEAVY_CHECKS_IN_FLIGHT,
    ) -> None:
        self.per_user = per_user
        self.in_flight = in_flight
        self.rate = RateLimiter(per_minute)
        self._users: dict[str, int] = {}
        self._total = 0
        self._draining = 0
        self._parsing: asyncio.Semaphore | None = None

    def admit(self, user: str) -> Admission | Refusal:
        """Let one heavy check of ``user`` in, or say why not and when to try again."""
        if self._users.get(user, 0) >= self.per_user:
            return Refusal("another large check of yours is in progress", RETRY_IN_FLIGHT)
        if self._total >= self.in_flight:
            return Refusal(
                "the server is checking as many large notebooks as it may", RETRY_IN_FLIGHT
            )
        retry_after = self.rate.take(user)
        if retry_after is not None:
            return Refusal(
                f"more than {self.rate.capacity:.0f} large checks of yours in a minute",
                retry_after,
            )
        self._users[user] = self._users.get(user, 0) + 1
        self._total += 1
        return Admission(user=user)

    def release(self, admission: Admission | None) -> None:
        """The check is over (answered, or its client went away)."""
        if admission is None or admission.released:
            return
        admission.released = True
        self._total -= 1
        left = self._users.get(admission.user, 0) - 1
        if left > 0:
            self._users[admission.user] = left
        else:
            self._users.pop(admission.user, None)

    def start_drain(self) -> bool:
        """Whether a refused body may be read and dropped (at most
        :data:`MAX_DRAINING` at once); if so, :meth:`end_drain` it once."""
        if self._draining >= MAX_DRAINING:
            return False
        self._draining += 1
        return True

    def end_drain(self) -> None:
        """A refused body has been dropped (or its client went away)."""
        self._draining = max(0, self._draining - 1)

    def busy(self) -> int:
        """Heavy checks in flight now."""
        return self._total

    @asynccontextmanager
    async def parsing(self, heavy: bool) -> AsyncIterator[None]:
        """Hold the server's one heavy parse (gate 5) while a heavy check is parsed and
        checked; a light one goes straight through."""
        if not heavy:
            yield
            return
        if self._parsing is None:
            self._parsing = asyncio.Semaphore(1)
        async with self._parsing:
            yield
