"""A pool of pre-started, pre-warmed Jupyter kernels, each serving exactly one run.

Starting an IPython kernel costs ~0.9 s and importing pandas in it another ~0.45 s;
a trivial report spends most of its wall time there. :class:`KernelPool` does that
work ahead of time, off the critical path, without ever sharing state between runs.

Design decisions:

- **One kernel, one run.** A kernel handed out by :meth:`KernelPool.acquire` is shut
  down after its run and never goes back to the pool; the pool starts a replacement
  in the background. Isolation between runs is therefore the operating system's
  (separate processes), not a "reset" of a reused interpreter.
- **Warm-up binds no names.** The warm-up code only fills ``sys.modules`` (numpy,
  pandas, matplotlib with the inline backend, ``nbcast.warehouse`` when it exists);
  it runs ``silent`` (no history, no ``_``/``Out``) inside a function that is deleted
  afterwards, so a notebook that forgot ``import pandas as pd`` still fails with
  ``NameError`` exactly as it would under plain papermill. What *does* differ from a
  cold kernel: those modules are already imported (and pyplot's inline integration
  is already registered), which only changes timing.
- **Synchronous API, asynchronous inside.** nbclient needs an ``AsyncKernelManager``.
  The pool owns one event loop on a daemon thread; every kernel-manager operation
  (start, warm-up, shutdown) runs there, so the manager's control socket is only
  ever used from that loop. A run talks to its kernel through its own client
  (``km.client()``, created by nbclient on the run's thread and loop), never through
  the pool's.
- **Empty pool: claim, don't wait forever.** ``acquire`` takes a ready kernel if
  there is one. Otherwise it claims the kernel that is furthest along in being
  prepared (warming up before still starting) — it would be ready sooner than a new
  one and no CPU is wasted on a kernel nobody uses — and if none is being prepared
  it starts a fresh one (the cold path). A kernel claimed while still starting skips
  the warm-up: the run will import what it needs anyway. Waiting is bounded by
  ``timeout``.
- **Single-kernel pieces live in** :mod:`nbcast.executor.kernels.slot` (one kernel
  brought up and down: its box, start, readiness, warm-up, shutdown) and
  :mod:`nbcast.executor.kernels.process`: :func:`wait_until_connected`, readiness
  without jupyter_client's 0.2 s IOPub wait, and :class:`KernelProcess`, which signals
  and reaps a kernel from any thread without its event loop.
- **Failures back off.** A kernel that fails to start or to warm up is discarded;
  background refills then back off exponentially (0.5 s doubling to 30 s) so a
  broken kernelspec does not spin. A run that had claimed a kernel whose warm-up
  failed is served a fresh cold kernel instead; one whose kernel failed to start
  gets up to two more starts (a start can fail by chance: its ports are chosen
  before the kernel binds them, and another process may bind one meanwhile), then
  the failure reaches the caller.
- **Nothing leaks.** :meth:`KernelPool.close` (also on ``with`` exit and, as a last
  resort, at interpreter exit) kills every kernel the pool started, including ones
  still checked out; kernels also carry ``JPY_PARENT_PID`` so they exit if the worker
  dies.
- **Sandboxed kernels are kept per kind.** ``acquire(sandbox=spec)`` hands out a kernel
  that runs in a sandbox of that spec (:mod:`nbcast.executor.kernels.sandboxed`: its
  run folder, bubblewrap sandbox and cgroup, made before the kernel starts and ended
  with it). Since a sandbox belongs to one tenant before its run is known, the pool
  keeps ready kernels per spec, sharing its ``size`` among the most recently used
  ones (:mod:`nbcast.executor.kernels.demand`); a spec's first run gets a fresh kernel.

POSIX only (process groups, signals).
"""

from __future__ import annotations

import asyncio
import atexit
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
import weakref
from collections import deque
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, TypeVar

from jupyter_client.manager import AsyncKernelManager

from nbcast.executor.kernels.demand import Demand
from nbcast.executor.kernels.environment import kernel_environment
from nbcast.executor.kernels.process import KernelProcess, warmup_code
from nbcast.executor.kernels.slot import Claim, KernelSlot
from nbcast.retry import backoff_ceiling

if TYPE_CHECKING:
    from nbcast.executor.kernels.sandboxed import KernelBox
    from nbcast.sandbox.policy import SandboxSpec

__all__ = ["DEFAULT_WARMUP", "DEFAULT_WARMUP_MODULES", "KernelPool", "PoolStats", "PooledKernel"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

#: Modules the default warm-up imports; each is skipped if it cannot be imported.
DEFAULT_WARMUP_MODULES: tuple[str, ...] = (
    "numpy",
    "pandas",
    "matplotlib",
    "matplotlib.pyplot",
    "matplotlib_inline.backend_inline",
    "nbcast.warehouse",
)

_MAX_BACKOFF_S = 30.0
#: Kernel starts tried for a run (the first one and retries) before its acquire fails.
_START_ATTEMPTS = 3

#: The warm-up :class:`KernelPool` runs by default (imports, no names bound).
DEFAULT_WARMUP: str = warmup_code(DEFAULT_WARMUP_MODULES)


@dataclass(frozen=True, kw_only=True, slots=True)
class PoolStats:
    """A snapshot of a :class:`KernelPool`."""

    size: int
    #: kernels started and warmed up, waiting for a run
    ready: int
    #: kernels being started or warmed up (claimed or not)
    preparing: int
    #: kernels handed to runs and not yet shut down
    in_use: int
    #: runs served by a kernel that was ready when asked for
    served_warm: int
    #: runs that had to wait for a kernel being prepared, or a cold start
    served_waiting: int


class PooledKernel:
    """A started kernel handed out by :meth:`KernelPool.acquire`, good for exactly one run.

    Pass it to the ``nbcast`` papermill engine (``kernel=``), or give the engine the
    pool itself. After the run, :meth:`release` shuts it down (in the background);
    :meth:`kill` stops it at once. Both are idempotent and safe after the pool closed.
    """

    def __init__(self, pool: KernelPool, slot: KernelSlot, *, warm: bool, wait_s: float) -> None:
        self._pool = pool
        self._slot = slot
        self._used = False
        #: the kernel had finished its warm-up when it was asked for
        self.warm = warm
        #: seconds ``acquire`` waited for this kernel (0.0 when warm)
        self.wait_s = wait_s

    @property
    def manager(self) -> AsyncKernelManager:
        """The kernel's manager, for nbclient (``NotebookClient(km=...)``)."""
        return self._slot.km

    @property
    def kernel_name(self) -> str:
        """The kernelspec name."""
        return self._slot.kernel_name

    @property
    def process(self) -> KernelProcess | None:
        """The kernel's OS process (None for non-local provisioners)."""
        return self._slot.process

    @property
    def pid(self) -> int | None:
        """The kernel's process id, if local."""
        return self._slot.process.pid if self._slot.process is not None else None

    @property
    def box(self) -> KernelBox | None:
        """The kernel's sandbox, run folder and cgroup (None: not sandboxed)."""
        return self._slot.box

    def start_run(self) -> None:
        """Mark the kernel as used by a run; a second run is refused (``RuntimeError``)."""
        if self._used:
            raise RuntimeError("a pooled kernel serves exactly one run")
        self._used = True

    def release(self, *, wait: bool = False) -> None:
        """Shut the kernel down politely (in the background unless ``wait``)."""
        self._pool._stop_threadsafe(self._slot, now=False, wait=wait)

    def kill(self) -> None:
        """Kill the kernel now, reap it, then free its resources in the background."""
        if self._slot.process is not None:
            self._slot.process.kill()
        self._pool._stop_threadsafe(self._slot, now=True, wait=False)


_live_pools: weakref.WeakSet[KernelPool] = weakref.WeakSet()


@atexit.register
def _close_live_pools() -> None:
    for pool in list(_live_pools):
        with contextlib.suppress(Exception):
            pool.close()


class KernelPool:
    """Keeps ``size`` kernels started and warmed up; each one serves a single run.

    ``warmup`` is kernel code run (silently) in every pooled kernel before it is
    handed out; ``None`` or ``""`` pre-starts kernels without warming them.
    ``cwd`` and ``env`` are the kernels' working directory and *entire* environment
    (jupyter_client semantics; ``None``: the worker's without nbcast's secrets,
    :func:`~nbcast.executor.kernels.environment.kernel_environment`). ``start_timeout``
    bounds a background kernel's start and its warm-up.

    Usable from ordinary synchronous code and from several threads at once; use it
    as a context manager or call :meth:`close`.
    """

    def __init__(
        self,
        size: int = 2,
        kernel_name: str = "python3",
        warmup: str | None = DEFAULT_WARMUP,
        cwd: str | None = None,
        env: dict[str, str] | None = None,
        *,
        start_timeout: float = 60.0,
        forked: bool | None = None,
        profiles: Sequence[SandboxSpec | None] | None = None,
    ) -> None:
        if size < 0:
            raise ValueError("size must be >= 0")
        self._size = size
        # Kinds of kernel kept ready (module docstring): by default the unsandboxed kind.
        self._demand: Demand[SandboxSpec | None] = Demand(
            size, [None] if profiles is None else profiles
        )
        # Kernels forked from a pre-imported zygote (nbcast.executor.kernels.forked) start
        # in a tenth of the CPU; default on Linux, off with NBCAST_FORKED_KERNELS=0.
        if forked is None:
            forked = sys.platform == "linux" and os.environ.get("NBCAST_FORKED_KERNELS", "1") != "0"
        self._forked = forked
        self._manager_class: type[AsyncKernelManager] = AsyncKernelManager
        if forked:
            from nbcast.executor.kernels.forked import ZygoteKernelManager

            self._manager_class = ZygoteKernelManager
        self._kernel_name = kernel_name
        self._warmup = warmup or ""
        self._cwd = cwd
        self._env = dict(env) if env is not None else None
        self._start_timeout = start_timeout

        # Loop-owned state: touched only on the pool's loop.
        self._slots: set[KernelSlot] = set()
        self._ready: dict[SandboxSpec | None, deque[KernelSlot]] = {}
        self._preparing: list[KernelSlot] = []
        self._failures = 0
        self._backoff: asyncio.TimerHandle | None = None
        self._closed = False
        self._served_warm = 0
        self._served_waiting = 0
        self._changed: asyncio.Condition | None = None

        self._close_lock = threading.Lock()
        self._closing = False
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(
            target=self._loop.run_forever, name="nbcast-kernel-pool", daemon=True
        )
        self._thread.start()
        self._call(self._start(), timeout=None)
        _live_pools.add(self)

    # ------------------------------------------------------------------ public API

    @property
    def size(self) -> int:
        """How many kernels the pool keeps ready."""
        return self._size

    @property
    def kernel_name(self) -> str:
        """The kernelspec the pool's kernels run."""
        return self._kernel_name

    @property
    def closed(self) -> bool:
        """Whether :meth:`close` was called."""
        return self._closing

    def acquire(
        self,
        timeout: float | None = 60.0,
        *,
        kernel_name: str | None = None,
        sandbox: SandboxSpec | None = None,
    ) -> PooledKernel:
        """Hand out one started kernel for exactly one run.

        A ready (warm) kernel is returned at once. Otherwise the kernel furthest along
        in being prepared is claimed, or a fresh one started; ``timeout`` bounds that
        wait (``TimeoutError``). A ``kernel_name`` other than the pool's always gets a
        fresh kernel of that kernelspec, without warm-up. With ``sandbox`` the kernel
        runs in a sandbox of that spec (module docstring), never outside one.
        """
        name = kernel_name or self._kernel_name
        began = time.monotonic()
        slot, warm = self._call(self._acquire(name, timeout, sandbox), timeout=None)
        wait_s = 0.0 if warm else time.monotonic() - began
        return PooledKernel(self, slot, warm=warm, wait_s=wait_s)

    def wait_ready(self, timeout: float | None = None) -> bool:
        """Block until ``size`` kernels are ready; False if ``timeout`` passed first."""
        try:
            self._call(asyncio.wait_for(self._wait_ready(), timeout), timeout=None)
        except TimeoutError:
            return False
        return True

    def stats(self) -> PoolStats:
        """A snapshot of the pool's kernels and counters."""
        return self._call(self._stats(), timeout=10.0)

    def kernel_pids(self) -> list[int]:
        """Process ids of every live kernel the pool started (ready, preparing or in use)."""
        return self._call(self._pids(), timeout=10.0)

    def close(self, timeout: float = 30.0) -> None:
        """Kill every kernel the pool started, including ones still in use, and stop."""
        with self._close_lock:
            if self._closing:
                return
            self._closing = True
        try:
            self._call(self._aclose(), timeout=timeout)
        finally:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(timeout)
            if not self._thread.is_alive():
                self._loop.close()
            _live_pools.discard(self)

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"KernelPool(size={self._size}, kernel_name={self._kernel_name!r})"

    # ------------------------------------------------------------------ threading glue

    def _call(self, coro: Coroutine[Any, Any, _T], *, timeout: float | None) -> _T:
        if self._loop.is_closed():
            coro.close()
            raise RuntimeError("kernel pool is closed")
        future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        deadline = time.monotonic() + timeout if timeout is not None else None
        # Wait in slices: a loop stopped by a concurrent close() would never answer.
        while not concurrent.futures.wait([future], timeout=0.5).done:
            if not self._thread.is_alive():
                future.cancel()
                raise RuntimeError("kernel pool is closed")
            if deadline is not None and time.monotonic() >= deadline:
                future.cancel()
                raise TimeoutError(f"the kernel pool did not answer within {timeout}s")
        return future.result()

    def _stop_threadsafe(self, slot: KernelSlot, *, now: bool, wait: bool) -> None:
        coro = self._stop(slot, now=now)
        try:
            future = asyncio.run_coroutine_threadsafe(coro, self._loop)
        except RuntimeError:  # the loop is closed: close() already killed the kernel
            coro.close()
            return
        if wait:
            future.result(self._start_timeout)

    # ------------------------------------------------------------------ on the loop

    async def _start(self) -> None:
        self._changed = asyncio.Condition()
        self._refill()

    def _spawn(
        self,
        kernel_name: str,
        claim: Claim | None,
        profile: SandboxSpec | None,
        *,
        attempt: int = 1,
    ) -> KernelSlot:
        slot = KernelSlot.create(
            kernel_name, profile, manager_class=self._manager_class, fork=self._forked
        )
        slot.claim = claim
        slot.attempt = attempt
        self._slots.add(slot)
        self._preparing.append(slot)
        slot.task = asyncio.get_running_loop().create_task(self._prepare(slot))
        return slot

    def _unclaimed(self, profile: SandboxSpec | None) -> int:
        ready = len(self._ready.get(profile, ()))
        preparing = sum(
            1
            for s in self._preparing
            if s.claim is None and s.profile == profile and s.kernel_name == self._kernel_name
        )
        return ready + preparing

    def _refill(self) -> None:
        """Start and stop ready kernels to follow the demand (module docstring)."""
        if self._closed or self._backoff is not None:
            return
        for profile, ready in list(self._ready.items()):
            surplus = len(ready) - self._demand.wanted(profile)
            for _ in range(max(0, surplus)):  # a kind used less recently gave way
                slot = ready.popleft()
                asyncio.get_running_loop().create_task(self._stop(slot, now=True))
            if not ready:
                del self._ready[profile]
        for profile in self._demand.kinds():
            for _ in range(self._demand.wanted(profile) - self._unclaimed(profile)):
                self._spawn(self._kernel_name, None, profile)

    def _end_backoff(self) -> None:
        self._backoff = None
        self._refill()

    async def _prepare(self, slot: KernelSlot) -> None:
        try:
            await slot.start(
                env=dict(self._env) if self._env is not None else kernel_environment(),
                cwd=self._cwd,
                warmup=self._warmup if slot.kernel_name == self._kernel_name else "",
                timeout=self._start_timeout,
            )
        except Exception as exc:
            slot.task = None  # finishing: _stop must not cancel this very task
            self._preparing.remove(slot)
            await self._stop(slot, now=True)
            claim = slot.claim
            if claim is None:
                self._failures += 1
                delay = backoff_ceiling(self._failures, base=0.5, cap=_MAX_BACKOFF_S)
                log.warning(
                    "pooled %s kernel failed (%s); refill in %.1fs", slot.kernel_name, exc, delay
                )
                if not self._closed and self._backoff is None:
                    self._backoff = asyncio.get_running_loop().call_later(delay, self._end_backoff)
            elif slot.started and not claim.abandoned:
                # The warm-up failed after a run claimed this kernel: serve it a cold one.
                log.warning("warm-up failed (%s); serving a fresh kernel instead", exc)
                self._spawn(slot.kernel_name, claim, slot.profile)
            elif claim.abandoned or claim.future.done():
                pass
            elif slot.attempt < _START_ATTEMPTS and not self._closed:
                # A start can fail by chance (a port taken between jupyter_client's probe
                # and the kernel's bind): the run gets another kernel, not the failure.
                log.warning("kernel failed to start (%s); starting another", exc)
                self._spawn(slot.kernel_name, claim, slot.profile, attempt=slot.attempt + 1)
            else:
                claim.future.set_exception(exc)
            return
        slot.task = None
        self._preparing.remove(slot)
        self._failures = 0
        claim = slot.claim
        if claim is None:
            slot.stage = "ready"
            self._ready.setdefault(slot.profile, deque()).append(slot)
            await self._notify()
        elif claim.abandoned or claim.future.done():
            await self._stop(slot, now=True)
        else:
            slot.stage = "out"
            claim.future.set_result(slot)

    async def _acquire(
        self, kernel_name: str, timeout: float | None, profile: SandboxSpec | None
    ) -> tuple[KernelSlot, bool]:
        if self._closed:
            raise RuntimeError("kernel pool is closed")
        pooled = kernel_name == self._kernel_name
        if pooled:
            self._demand.used(profile)
        ready = self._ready.get(profile)
        if pooled and ready:
            slot = ready.popleft()
            if not ready:
                del self._ready[profile]
            slot.stage = "out"
            self._served_warm += 1
            self._refill()
            return slot, True
        self._served_waiting += 1
        claim = Claim(asyncio.get_running_loop().create_future())
        unclaimed = (
            [s for s in self._preparing if s.claim is None and s.profile == profile]
            if pooled
            else []
        )
        warming = [s for s in unclaimed if s.stage == "warming"]
        candidates = warming or unclaimed
        if candidates:
            candidates[0].claim = claim
        else:
            self._spawn(kernel_name, claim, profile)
        self._refill()
        try:
            slot = await asyncio.wait_for(asyncio.shield(claim.future), timeout)
        except TimeoutError:
            claim.abandoned = True
            for holder in list(self._preparing):
                if holder.claim is claim:
                    await self._stop(holder, now=True)
            raise TimeoutError(f"no {kernel_name} kernel was ready within {timeout}s") from None
        return slot, False

    async def _stop(self, slot: KernelSlot, *, now: bool) -> None:
        if slot.stop_task is None:
            slot.stop_task = asyncio.get_running_loop().create_task(self._shutdown(slot, now=now))
        await asyncio.shield(slot.stop_task)

    async def _shutdown(self, slot: KernelSlot, *, now: bool) -> None:
        slot.stage = "stopping"
        task = slot.task
        if task is not None and not task.done() and task is not asyncio.current_task():
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        try:
            await slot.stop(now=now, timeout=self._start_timeout)
        finally:
            self._slots.discard(slot)
            if slot in self._preparing:
                self._preparing.remove(slot)
            ready = self._ready.get(slot.profile)
            if ready is not None and slot in ready:
                ready.remove(slot)
                if not ready:
                    del self._ready[slot.profile]
            await self._notify()

    async def _notify(self) -> None:
        assert self._changed is not None
        async with self._changed:
            self._changed.notify_all()

    async def _wait_ready(self) -> None:
        assert self._changed is not None
        async with self._changed:
            await self._changed.wait_for(lambda: self._closed or self._ready_count() >= self._size)
        if self._closed:
            raise RuntimeError("kernel pool is closed")

    def _ready_count(self) -> int:
        return sum(len(ready) for ready in self._ready.values())

    async def _stats(self) -> PoolStats:
        in_use = sum(1 for s in self._slots if s.stage == "out")
        return PoolStats(
            size=self._size,
            ready=self._ready_count(),
            preparing=len(self._preparing),
            in_use=in_use,
            served_warm=self._served_warm,
            served_waiting=self._served_waiting,
        )

    async def _pids(self) -> list[int]:
        return sorted(
            s.process.pid for s in self._slots if s.process is not None and s.process.is_alive()
        )

    async def _aclose(self) -> None:
        self._closed = True
        if self._backoff is not None:
            self._backoff.cancel()
            self._backoff = None
        for slot in self._preparing:
            claim = slot.claim
            if claim is not None and not claim.abandoned and not claim.future.done():
                claim.future.set_exception(RuntimeError("kernel pool is closed"))
        await asyncio.gather(
            *(self._stop(slot, now=True) for slot in list(self._slots)), return_exceptions=True
        )
        await self._notify()
