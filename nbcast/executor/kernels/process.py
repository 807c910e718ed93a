"""One Jupyter kernel, below the pool: its OS process, its readiness, silent code in it.

:mod:`nbcast.executor.kernels.pool` builds its pool on these, and the
``nbcast`` papermill engine (:mod:`nbcast.executor.notebook_runner`) uses them for the
kernels it runs in. Nothing here knows about the pool.

Design decisions:

- **Warm-up binds no names.** :func:`warmup_code` imports modules inside a function
  that is deleted afterwards, and :func:`execute_silently` runs it ``silent`` (no
  history, no ``_``/``Out``), so the kernel's ``globals()`` are those of a kernel that
  never ran it.
- **Readiness without the 0.2 s wait.** jupyter_client's ``wait_for_ready`` (which
  nbclient calls for every run) ends with 0.2 s of waiting for IOPub to go quiet;
  for a warm run that was most of its wall time. :func:`wait_until_connected` takes
  the ``idle`` status of its own ``kernel_info`` request on IOPub as the proof that
  the subscription is live, and retries if it does not come. The pool and the
  ``nbcast`` engine use it for pooled kernels; papermill's default engine is left alone.
- **Process-level control is loop-free.** :class:`KernelProcess` signals the
  kernel's process group directly (SIGINT to interrupt, SIGKILL to kill) and reaps
  it, so a watchdog thread can stop a kernel whatever its event loop is doing. Group
  signals are sent only while the kernel process is un-reaped, so its group id
  cannot have been reused.

POSIX only (process groups, signals).
"""

from __future__ import annotations

import contextlib
import logging
import os
import queue
import signal
import subprocess
import time
from collections.abc import Iterable
from typing import Any

from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from nbcast.errors import ExecutionError

__all__ = [
    "KernelProcess",
    "execute_silently",
    "wait_until_connected",
    "warmup_code",
]

log = logging.getLogger(__name__)

_REPLY_POLL_S = 0.5
_IOPUB_PROBE_S = 0.05


def warmup_code(modules: Iterable[str]) -> str:
    """Kernel code that imports ``modules`` without binding any name in the user namespace.

    Each import that fails is skipped. The helper function is deleted afterwards, so
    the kernel's ``globals()`` are exactly those of a kernel that never ran it.
    """
    names = tuple(modules)
    return (
        "def _nbcast_warmup():\n"
        "    import importlib\n"
        f"    for name in {names!r}:\n"
        "        try:\n"
        "            importlib.import_module(name)\n"
        "        except Exception:\n"
        "            pass\n"
        "_nbcast_warmup()\n"
        "del _nbcast_warmup\n"
    )


async def execute_silently(
    client: AsyncKernelClient, code: str, *, timeout: float | None, what: str = "code"
) -> None:
    """Run ``code`` in the kernel without history or displayed results; raise if it fails.

    Raises :class:`~nbcast.errors.ExecutionError` naming ``what`` when the code raises
    or the kernel dies meanwhile, and :class:`TimeoutError` when no reply comes within
    ``timeout`` seconds (``None``: no limit, but a dead kernel is still noticed).
    """
    msg_id = client.execute(code, silent=True, store_history=False, allow_stdin=False)
    deadline = time.monotonic() + timeout if timeout is not None else None
    while True:
        try:
            reply: dict[str, Any] = await client.get_shell_msg(timeout=_REPLY_POLL_S)
        except queue.Empty:
            if not await client.is_alive():
                raise ExecutionError(f"the kernel died while running {what}") from None
            if deadline is not None and time.monotonic() > deadline:
                raise TimeoutError(f"{what} did not finish within {timeout}s") from None
            continue
        if reply["parent_header"].get("msg_id") == msg_id:
            break
    content = reply["content"]
    if content.get("status") != "ok":
        raise ExecutionError(
            f"{what} raised {content.get('ename', '?')}: {content.get('evalue', '')}"
        )


async def wait_until_connected(client: AsyncKernelClient, timeout: float | None) -> None:
    """Wait until the kernel answers ``client`` on shell and its IOPub subscription is live.

    jupyter_client's ``wait_for_ready`` ends by waiting for 0.2 s of IOPub silence, on
    every run's critical path. Here the proof that IOPub is live is an ``idle`` status
    for one of our own ``kernel_info`` requests; while none arrives (the subscription
    joined after the kernel published), the request is repeated. Raises
    ``RuntimeError`` as jupyter_client does when the kernel dies or ``timeout`` passes.
    """
    deadline = time.monotonic() + timeout if timeout is not None else None
    sent: set[str] = set()
    while True:
        sent.add(client.kernel_info())
        try:
            reply: dict[str, Any] = await client.get_shell_msg(timeout=_REPLY_POLL_S)
        except queue.Empty:
            pass
        else:
            if reply["msg_type"] == "kernel_info_reply" and await _saw_idle(client, sent):
                client._handle_kernel_info_reply(reply)
                return
        if not await client.is_alive():
            raise RuntimeError("Kernel died before replying to kernel_info")
        if deadline is not None and time.monotonic() > deadline:
            raise RuntimeError(f"Kernel didn't respond in {timeout} seconds")


async def _saw_idle(client: AsyncKernelClient, sent: set[str]) -> bool:
    end = time.monotonic() + _IOPUB_PROBE_S
    while (left := end - time.monotonic()) > 0:
        try:
            msg: dict[str, Any] = await client.get_iopub_msg(timeout=left)
        except queue.Empty:
            return False
        if (
            msg["parent_header"].get("msg_id") in sent
            and msg["msg_type"] == "status"
            and msg["content"].get("execution_state") == "idle"
        ):
            return True
    return False


class _ForkedProcess:
    """A ``Popen``-shaped view of a kernel forked by the zygote (not our child)."""

    def __init__(self, forked: Any) -> None:
        self._forked = forked
        self.pid: int = forked.pid

    def poll(self) -> int | None:
        code: int | None = self._forked.poll()
        return code

    def send_signal(self, signum: int) -> None:
        self._forked.signal(signum)

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        # Until the zygote has reaped it (no /proc entry left), like Popen.wait.
        while (code := self.poll()) is None or os.path.exists(f"/proc/{self.pid}"):
            if deadline is not None and time.monotonic() > deadline:
                if code is not None:
                    return code
                raise subprocess.TimeoutExpired(f"pid {self.pid}", timeout or 0.0)
            time.sleep(0.02)
        return code


class KernelProcess:
    """The operating-system process of one kernel, controlled by signals from any thread.

    Used by watchdogs: it needs no event loop, so it works while the loop that owns
    the kernel manager is busy. ``interrupt`` only signals kernels whose kernelspec
    uses signal interrupts (IPython's does); others are left to ``kill``.
    """

    def __init__(
        self,
        popen: subprocess.Popen[bytes] | _ForkedProcess,
        pgid: int | None,
        interrupt_mode: str = "signal",
    ) -> None:
        self._popen = popen
        # Only signal a group the kernel leads (jupyter_client starts kernels in a
        # new session); never the worker's own group.
        own_group = pgid is not None and pgid == popen.pid and pgid != os.getpgrp()
        self._pgid = pgid if own_group else None
        self._interrupt_mode = interrupt_mode

    @classmethod
    def of(cls, manager: AsyncKernelManager) -> KernelProcess | None:
        """The process behind a started kernel manager, or None for non-local provisioners."""
        provisioner = manager.provisioner
        forked = getattr(provisioner, "forked", None)  # nbcast.executor.kernels.forked kernels
        popen: Any = (
            _ForkedProcess(forked) if forked is not None else getattr(provisioner, "process", None)
        )
        if not isinstance(popen, subprocess.Popen | _ForkedProcess):
            return None
        spec = manager.kernel_spec
        mode = spec.interrupt_mode if spec is not None else "signal"
        return cls(popen, getattr(provisioner, "pgid", None), mode)

    @property
    def pid(self) -> int:
        """The kernel's process id."""
        return self._popen.pid

    def is_alive(self) -> bool:
        """Whether the kernel process is still running (reaps it if it has exited)."""
        return self._popen.poll() is None

    def interrupt(self) -> bool:
        """Send SIGINT (as Jupyter's interrupt does); return whether a signal was sent."""
        if self._interrupt_mode != "signal" or not self.is_alive():
            return False
        self._signal(signal.SIGINT)
        return True

    def kill(self, timeout: float = 5.0) -> None:
        """SIGKILL the kernel's process group and reap it; a no-op if it already exited."""
        if self.is_alive():
            self._signal(signal.SIGKILL)
        try:
            self._popen.wait(timeout)
        except subprocess.TimeoutExpired:
            log.error("kernel process %d did not exit after SIGKILL", self.pid)

    def _signal(self, signum: int) -> None:
        if self._pgid is not None:
            try:
                os.killpg(self._pgid, signum)
                return
            except OSError:
                pass
        with contextlib.suppress(OSError):
            self._popen.send_signal(signum)
