"""How a warehouse query is held to its run's caps: a :class:`Budget` and a :data:`WATCHDOG`.

:mod:`nbcast.warehouse.execution` counts each fetched chunk into a :class:`Budget`
(rows, in-memory bytes, elapsed time) and arms an :class:`Alarm` with the process's one
:class:`Watchdog`, which cancels the query at its deadline.

Design decisions
----------------
* **Rows and bytes** are added up chunk by chunk (``memory_usage(deep=True)``), so both
  caps trip after at most one chunk more than the cap; a fetch never asks for more than
  :meth:`Budget.rows_wanted`.
* **The tenant's daily budget** (``limits.budget_bytes_left``) counts what the run's
  queries read together: a query that would cross it fails with ``limit`` ``budget``.
* **Time.** One daemon watchdog thread per process; arming costs a heap push, not a
  thread start. A cancel runs under the lock that disarming takes, so once a query's
  ``with`` block is left its cancel can no longer run. A forked child starts its own
  thread on first use.
* **Import cost.** Only the standard library (pandas is imported by :func:`assemble`).
"""

from __future__ import annotations

import contextlib
import heapq
import os
import threading
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from nbcast.errors import BudgetExhausted, QueryLimitExceeded
from nbcast.warehouse.context import Limits

if TYPE_CHECKING:
    import pandas as pd

__all__ = ["WATCHDOG", "Alarm", "Budget", "Watchdog", "assemble"]


class Alarm:
    """One query's deadline and how to cancel it; ``fired`` once the watchdog did."""

    __slots__ = ("cancel", "deadline", "done", "fired")

    def __init__(self, timeout_s: float, cancel: Callable[[], object] | None) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.cancel = cancel
        self.done = self.fired = False

    def __lt__(self, other: Alarm) -> bool:
        return self.deadline < other.deadline


class Watchdog:
    """One daemon thread per process cancels queries at their deadline, never after they end."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[Alarm] = []
        self._live = 0
        self._pid = 0

    @contextlib.contextmanager
    def watching(self, alarm: Alarm) -> Iterator[None]:
        """Arm ``alarm`` for the ``with`` block; after it, ``alarm.fired`` is final."""
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child that lacks the thread
                self._pid, self._heap, self._live = os.getpid(), [], 0
                threading.Thread(target=self._run, name="nbcast-watchdog", daemon=True).start()
            heapq.heappush(self._heap, alarm)
            self._live += 1
            if self._heap[0] is alarm:
                self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                alarm.done = True
                self._live -= 1
                if len(self._heap) > 2 * self._live + 1024:  # drop ended alarms now and then
                    self._heap = [a for a in self._heap if not a.done]
                    heapq.heapify(self._heap)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0].done or self._heap[0].deadline <= now):
                    alarm = heapq.heappop(self._heap)
                    if not alarm.done:
                        alarm.fired = True
                        if alarm.cancel is not None:
                            with contextlib.suppress(Exception):  # it may have just ended
                                alarm.cancel()
                wait = self._heap[0].deadline - now if self._heap else None
                self._cond.wait(None if wait is None else min(wait, threading.TIMEOUT_MAX))


WATCHDOG = Watchdog()
"""The process's watchdog."""


class Budget:
    """Counts what a query fetched and raises :class:`QueryLimitExceeded` past a cap."""

    def __init__(self, limits: Limits, connection: str, earlier_bytes: int = 0) -> None:
        self.limits = limits
        self.connection = connection
        self.started = time.perf_counter()
        self.rows = 0
        self.bytes = 0
        self.earlier_bytes = earlier_bytes
        """Bytes the run's earlier queries read (what counts against the daily budget)."""

    def rows_wanted(self) -> int:
        """Rows still allowed plus one, which tells over-cap from at-cap."""
        return self.limits.max_rows + 1 - self.rows

    def add(self, frame: pd.DataFrame) -> None:
        """Count a fetched chunk, then :meth:`check`."""
        self.rows += len(frame)
        self.bytes += int(frame.memory_usage(deep=True, index=False).sum())
        self.check()

    def check(self) -> None:
        """Raise :class:`QueryLimitExceeded` when rows, bytes or time are past their cap."""
        limits = self.limits
        if self.rows > limits.max_rows:
            raise QueryLimitExceeded(
                "rows",
                limits.max_rows,
                f"query on connection {self.connection!r} returned more than "
                f"{limits.max_rows:,} rows (this run's cap); aggregate or filter in SQL",
            )
        if self.bytes > limits.max_bytes:
            raise QueryLimitExceeded(
                "bytes",
                limits.max_bytes,
                f"query result on connection {self.connection!r} exceeds {limits.max_bytes:,} "
                f"bytes ({limits.max_bytes / 2**20:.1f} MiB) in memory (this run's cap); "
                "select fewer columns or rows",
            )
        left = limits.budget_bytes_left
        if left is not None and self.earlier_bytes + self.bytes > left:
            raise BudgetExhausted(
                left,
                f"query on connection {self.connection!r} would read past the tenant's daily "
                f"warehouse budget ({left:,} bytes were left for this run); the budget "
                "starts again tomorrow (UTC)",
            )
        if time.perf_counter() - self.started > limits.timeout_s:
            raise self.timeout()

    def timeout(self) -> QueryLimitExceeded:
        """The error for a query that ran past the run's statement timeout."""
        return QueryLimitExceeded(
            "seconds",
            self.limits.timeout_s,
            f"query on connection {self.connection!r} ran longer than "
            f"{self.limits.timeout_s:g} s (this run's statement timeout)",
        )


def assemble(frames: list[pd.DataFrame], budget: Budget) -> pd.DataFrame:
    """The fetched chunks as one DataFrame, its index counted into ``budget`` too."""
    import pandas as pd

    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    budget.bytes += int(frame.index.memory_usage())
    budget.check()
    return frame
