"""One kernel a pool starts, from its manager to its shutdown (:class:`KernelSlot`).

The pool (:mod:`nbcast.executor.kernels.pool`) decides which slots exist, which are
ready, which run claimed which; a slot knows how to bring its one kernel up and down:

- **up** (:meth:`KernelSlot.start`): a sandboxed slot first opens its box (run folder,
  sandbox, cgroup: :mod:`nbcast.executor.kernels.sandboxed`) and points its kernel
  manager at it; then the kernel starts (with ipykernel's history in memory: many
  short-lived kernels would contend for one SQLite history file), a client proves it
  answers (:func:`~nbcast.executor.kernels.process.wait_until_connected`) and, for a
  kernel nobody claimed yet, the warm-up runs silently;
- **down** (:meth:`KernelSlot.stop`): the kernel is shut down (politely, or ``now``), its
  process killed and reaped whatever the manager managed, and its box closed — the
  sandbox and everything the report left running in it end.

A slot lives on the pool's event loop; only its box is opened and closed in a thread.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_client.manager import AsyncKernelManager

from nbcast.executor.kernels.process import KernelProcess, execute_silently, wait_until_connected

if TYPE_CHECKING:
    from nbcast.executor.kernels.sandboxed import KernelBox
    from nbcast.sandbox.policy import SandboxSpec

__all__ = ["Claim", "KernelSlot"]

log = logging.getLogger(__name__)

_IPYKERNEL_ARGS = ["--HistoryManager.hist_file=:memory:"]


@dataclass(eq=False)
class Claim:
    """A run waiting for a kernel that is still being prepared."""

    future: asyncio.Future[KernelSlot]
    abandoned: bool = False


@dataclass(eq=False)
class KernelSlot:
    """One kernel (module docstring)."""

    km: AsyncKernelManager
    kernel_name: str
    profile: SandboxSpec | None = None
    box: KernelBox | None = None
    claim: Claim | None = None
    stage: str = "starting"  # starting -> warming -> ready -> out; stopping
    process: KernelProcess | None = None
    task: asyncio.Task[None] | None = None
    stop_task: asyncio.Task[None] | None = None
    attempt: int = 1  # starts tried for the claim it serves
    started: bool = False
    """The kernel started and answered (a later failure is the warm-up's)."""

    @classmethod
    def create(
        cls,
        kernel_name: str,
        profile: SandboxSpec | None,
        *,
        manager_class: type[AsyncKernelManager],
        fork: bool,
    ) -> KernelSlot:
        """A slot for a kernel of ``kernel_name``, sandboxed as ``profile`` says (then
        always through nbcast's provisioner, forking from the zygote if ``fork``)."""
        if profile is None:
            return cls(km=manager_class(kernel_name=kernel_name), kernel_name=kernel_name)
        from nbcast.executor.kernels.forked import ZygoteKernelManager

        km = ZygoteKernelManager(kernel_name=kernel_name, fork=fork)
        return cls(km=km, kernel_name=kernel_name, profile=profile)

    async def _open_box(self) -> None:
        from nbcast.executor.kernels.sandboxed import KernelBox

        assert self.profile is not None
        opening = asyncio.ensure_future(asyncio.to_thread(KernelBox.open, self.profile))
        try:
            self.box = box = await asyncio.shield(opening)
        except asyncio.CancelledError:  # the thread goes on: close what it opens
            opening.add_done_callback(_close_opened)
            raise
        for name, value in box.manager_settings().items():
            setattr(self.km, name, value)
        self.km.box = box  # type: ignore[attr-defined]  # a ZygoteKernelManager

    async def start(
        self, *, env: dict[str, str], cwd: str | None, warmup: str, timeout: float
    ) -> None:
        """Bring the kernel up (module docstring); ``warmup`` (kernel code) runs unless
        a run claimed the slot already. Raises what failed."""
        if self.profile is not None:
            await self._open_box()
        kwargs: dict[str, Any] = {"env": env}
        if self.box is not None:
            kwargs["cwd"] = self.box.folder
            kwargs["env"] = self.box.environment(env)
        elif cwd is not None:
            kwargs["cwd"] = cwd
        extra = list(_IPYKERNEL_ARGS) if self.km.ipykernel else []
        await self.km.start_kernel(extra_arguments=extra, **kwargs)
        self.process = KernelProcess.of(self.km)
        client = self.km.client()
        client.start_channels()
        try:
            await wait_until_connected(client, timeout)
            self.started = True
            if self.claim is None and warmup:
                self.stage = "warming"
                await execute_silently(client, warmup, timeout=timeout, what="warm-up")
        finally:
            client.stop_channels()

    async def stop(self, *, now: bool, timeout: float) -> None:
        """Bring the kernel down (module docstring); never raises."""
        km = self.km
        try:
            if km.has_kernel and await km.is_alive():
                await asyncio.wait_for(km.shutdown_kernel(now=now), timeout)
        except Exception as exc:
            log.warning("shutting down kernel failed: %s", exc)
        finally:
            with contextlib.suppress(Exception):
                await km.cleanup_resources()
            # Backstop; KernelProcess.of covers a start cancelled before it was recorded.
            process = self.process or KernelProcess.of(km)
            if process is not None:
                process.kill()
            if self.box is not None:  # its sandbox, and whatever the report left in it
                with contextlib.suppress(Exception):
                    await asyncio.to_thread(self.box.close)


def _close_opened(done: asyncio.Future[KernelBox]) -> None:
    """Close a box whose opening finished after its slot was stopped."""
    if not done.cancelled() and done.exception() is None:
        done.result().close()
