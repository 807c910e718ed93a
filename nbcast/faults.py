"""Named crash points for fault-injection tests.

Production code calls :func:`crash_point` at the moments an invariant could break
(after the slot rows are written, before the watermark moves, …). When the
``NBCAST_CRASH_AT`` environment variable names that point, the process kills itself
with SIGKILL there — no cleanup, no rollback handler, exactly like a power cut.
``NBCAST_CRASH_AT=after_runs_insert:0.2`` crashes at that point with probability 0.2
(each time it is reached), so a long test can crash at random moments.

With the variable unset (always, outside tests) a crash point costs one dict lookup.
"""

from __future__ import annotations

import os
import random
import signal

__all__ = ["crash_point"]


def _parse(spec: str) -> dict[str, float]:
    points: dict[str, float] = {}
    for item in filter(None, (part.strip() for part in spec.split(","))):
        name, _, chance = item.partition(":")
        points[name] = float(chance) if chance else 1.0
    return points


_POINTS = _parse(os.environ.get("NBCAST_CRASH_AT", ""))


def crash_point(name: str) -> None:
    """SIGKILL this process here if ``NBCAST_CRASH_AT`` names ``name`` (module doc)."""
    chance = _POINTS.get(name)
    if chance is not None and random.random() < chance:
        os.kill(os.getpid(), signal.SIGKILL)
