"""The run watchdog: stops a run's kernel when its time is up, it is cancelled, or it
sends too much output.

A thread per run (:class:`RunWatchdog`) checks every 50 ms:

- **Time limit and cancel.** When the run's deadline passes or its cancel event is
  set, it interrupts the kernel (SIGINT, so the running cell records
  ``KeyboardInterrupt`` and papermill saves the notebook as usual), waits
  :data:`INTERRUPT_GRACE_S` (read when it fires, so tests can shorten it), then
  SIGKILLs the kernel's process group if the run has not ended.
- **Too much output.** The notebook client counts output as it arrives and calls
  :meth:`RunWatchdog.fire` with :attr:`StopReason.output` past a limit
  (:mod:`nbcast.executor.output_limits`): the kernel is killed at once, since a flood
  would go on through an interrupt's grace. A message too large to be accepted at
  all shows as a dropped client socket (:class:`~nbcast.executor.output_limits.
  SocketWatch`); a second drop, or one while the kernel stays alive for
  :data:`DROP_GRACE_S` — a kernel that exits drops its sockets once, too — counts as
  too much output.

A limit that passes before the kernel is attached takes effect as soon as it is
(:meth:`RunWatchdog.attach` kills it at once). The first reason wins; ``reason`` and
``detail`` say which and why.

**What the kernel used** (:class:`KernelUsage`, for cost attribution and budgets): the
watchdog samples the attached kernel's CPU time (user and system, with its waited-for
children) and its peak resident memory from ``/proc`` about every half second, when
the notebook client is about to let the kernel go (:meth:`RunWatchdog.sample`) and
when it finishes. CPU counts from the moment the kernel is attached, so a warm
kernel's start-up is not charged to the run; the figures stay None where ``/proc``
is not there.
"""

from __future__ import annotations

import os
import threading
import time
from dataclasses import dataclass
from enum import StrEnum
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from nbcast.executor.kernels import KernelProcess
    from nbcast.executor.output_limits import SocketWatch

__all__ = ["DROP_GRACE_S", "INTERRUPT_GRACE_S", "KernelUsage", "RunWatchdog", "StopReason"]

INTERRUPT_GRACE_S = 2.0
"""Seconds between the watchdog's interrupt and its kill."""

DROP_GRACE_S = 3.0
"""Seconds a kernel must outlive a dropped client socket for the drop to count as an
oversized message."""

_WATCH_INTERVAL_S = 0.05


class StopReason(StrEnum):
    """Why the watchdog stopped a run."""

    timeout = "timeout"
    """The run's time limit passed."""
    cancel = "cancel"
    """The run's cancel event was set."""
    output = "output"
    """The kernel sent more output than the run's limits allow."""


def _interrupt_grace() -> float:
    return float(INTERRUPT_GRACE_S)


_SAMPLE_EVERY = 10
"""Watch intervals between two samples of the kernel's usage (about half a second)."""

_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass
class KernelUsage:
    """What a run's kernel used (module docstring); None until sampled."""

    cpu_s: float | None = None
    peak_mem_mb: float | None = None
    _base_cpu_s: float | None = None

    def observe(self, pid: int) -> None:
        """Read ``pid``'s counters now (nothing if it is gone or ``/proc`` is absent)."""
        try:
            with open(f"/proc/{pid}/stat", "rb") as handle:
                stat = handle.read().decode("ascii", "replace")
            with open(f"/proc/{pid}/status", "rb") as handle:
                status = handle.read().decode("ascii", "replace")
        except OSError:
            return
        fields = stat[stat.rfind(")") + 2 :].split()
        try:  # utime, stime, cutime, cstime: fields 14-17 of stat, 12-15 after the name
            cpu = sum(int(fields[i]) for i in range(11, 15)) / _TICKS
        except (IndexError, ValueError):
            return
        if self._base_cpu_s is None:
            self._base_cpu_s = cpu
        self.cpu_s = max(self.cpu_s or 0.0, round(cpu - self._base_cpu_s, 3))
        for line in status.splitlines():
            if line.startswith("VmHWM:"):
                try:
                    peak = int(line.split()[1]) / 1024  # kB
                except (IndexError, ValueError):
                    break
                self.peak_mem_mb = max(self.peak_mem_mb or 0.0, round(peak, 1))
                break


class RunWatchdog:
    """Watches one run (module docstring)."""

    def __init__(
        self,
        timeout_s: float | None,
        cancel: threading.Event | None,
        usage: KernelUsage | None = None,
    ) -> None:
        self._deadline = time.monotonic() + timeout_s if timeout_s is not None else None
        self._cancel = cancel
        self._lock = threading.Lock()
        self._process: KernelProcess | None = None
        self._sockets: SocketWatch | None = None
        self._dropped_at: float | None = None
        self._drops = 0
        self._sockets_lock = threading.Lock()
        self._finished = threading.Event()
        self.reason: StopReason | None = None
        """Set once fired."""
        self.detail: str | None = None
        """Why, for ``output``."""
        self.cell_index: int | None = None
        """The cell that sent too much, when known."""
        self.usage = usage if usage is not None else KernelUsage()
        """What the attached kernel used (module docstring)."""
        self._thread = threading.Thread(target=self._watch, name="nbcast-watchdog", daemon=True)
        self._thread.start()

    def attach(self, process: KernelProcess | None) -> None:
        """Watch ``process``; kill it at once if the watchdog already fired."""
        with self._lock:
            self._process = process
            fired = self.reason is not None
        if fired and process is not None:
            process.kill()
        elif process is not None:
            self.usage.observe(process.pid)  # the baseline: a warm kernel's start-up

    def sample(self) -> None:
        """Read the attached kernel's usage now (before the client lets it go)."""
        with self._lock:
            process = self._process
        if process is not None:
            self.usage.observe(process.pid)

    def watch_sockets(self, sockets: SocketWatch) -> None:
        """Also watch a client's sockets for drops (module docstring)."""
        with self._lock:
            self._sockets = sockets
            self._dropped_at = None

    def settle_sockets(self) -> None:
        """Before the client closes its sockets: a drop already seen while the kernel
        still lives counts now, without waiting for its grace."""
        self._check_sockets(final=True)

    def fire(
        self, reason: StopReason, detail: str | None = None, cell_index: int | None = None
    ) -> None:
        """Stop the run for ``reason`` now: kill the kernel (first reason wins)."""
        with self._lock:
            if self.reason is None:
                self.reason, self.detail, self.cell_index = reason, detail, cell_index
            process = self._process
        if process is not None:
            process.kill()

    def finish(self) -> KernelProcess | None:
        """Stop watching; return the attached kernel process."""
        self._finished.set()
        self._thread.join()
        self._check_sockets(final=True)
        self.sample()
        with self._lock:
            return self._process

    def _due(self) -> StopReason | None:
        if self._cancel is not None and self._cancel.is_set():
            return StopReason.cancel
        if self._deadline is not None and time.monotonic() >= self._deadline:
            return StopReason.timeout
        return None

    def _check_sockets(self, *, final: bool) -> None:
        with self._lock:
            sockets, process = self._sockets, self._process
        if sockets is None or self.reason is not None:
            return
        with self._sockets_lock:
            drops = sockets.dropped()
            if drops:
                self._drops += drops
                self._dropped_at = self._dropped_at or time.monotonic()
            if self._dropped_at is None:
                return
            if process is not None and not process.is_alive():
                self._dropped_at = None  # the kernel ended, and its sockets with it
                return
            waited = time.monotonic() - self._dropped_at
            if not final and self._drops < 2 and waited < DROP_GRACE_S:
                return
        self.fire(StopReason.output, "the kernel sent a message larger than the run's output limit")

    def _watch(self) -> None:
        turns = 0
        while (reason := self._due()) is None:
            if self._finished.wait(_WATCH_INTERVAL_S) or self.reason is not None:
                return
            self._check_sockets(final=False)
            turns += 1
            if turns % _SAMPLE_EVERY == 0:
                self.sample()
        with self._lock:
            if self._finished.is_set() or self.reason is not None:
                return
            self.reason = reason
            process = self._process
        if process is not None:
            process.interrupt()
        if self._finished.wait(_interrupt_grace()):
            return
        with self._lock:
            process = self._process
        if process is not None:
            process.kill()
