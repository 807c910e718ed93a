"""Kernels forked by a :class:`~nbcast.executor.kernels.zygote.Zygote`, as jupyter_client
sees them: a provisioner and a kernel manager.

Design decisions:

- :class:`ZygoteProvisioner` is a ``LocalProvisioner``: ``pre_launch`` (ports,
  connection file, command, env) is inherited; ``launch_kernel`` forks when the command
  is this interpreter running ``-m ipykernel_launcher`` with the zygote's interpreter
  options, else uses ``Popen``. The kernel is not our child: ``poll``/``wait`` read
  ``/proc/<pid>/stat`` (start time guards against pid reuse) and ask the zygote for exit
  codes; signals go to the process group; ``post_launch`` waits until the kernel listens
  so clients skip zmq's 100 ms reconnect delay.
- :class:`ZygoteKernelManager` sets ``provisioner`` in ``_async_pre_start_kernel``
  before jupyter_client would consult its entry-point factory, so no entry point or
  kernelspec is installed; nbclient/papermill take it as ``kernel_manager_class``.
- A kernel that lost one of its ports to another process is killed at once
  (:meth:`ZygoteProvisioner.post_launch`), and ``pre_launch`` starts the shared zygote
  before the ports are chosen: the account is in :mod:`nbcast.executor.kernels.zygote`
  and :mod:`nbcast.executor.engines.ray`.

Linux only (``fork``, ``/proc``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from nbcast.executor.kernels.zygote import Zygote, ZygoteError, ZygoteUnavailable, default_zygote

if TYPE_CHECKING:
    from nbcast.executor.kernels.sandboxed import KernelBox

__all__ = [
    "LISTEN_WAIT_S",
    "UNKNOWN_EXIT_CODE",
    "ZygoteKernelManager",
    "ZygoteProvisioner",
    "zygote_kernel_manager",
]

UNKNOWN_EXIT_CODE = 1
"""``poll``'s answer for a kernel that is gone when nobody recorded its exit code."""

LISTEN_WAIT_S = 10.0
"""How long :meth:`ZygoteProvisioner.post_launch` waits for a kernel to listen."""

_LAUNCHERS = ("ipykernel_launcher", "ipykernel")


def _proc_stat(pid: int) -> tuple[str, int, int | None] | None:
    """``(state, start time, wait status of a zombie)`` of ``pid`` from /proc, if it exists."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    fields = raw[raw.rindex(")") + 2 :].split()  # fields[0] is field 3 of proc(5)
    return fields[0], int(fields[19]), int(fields[49]) if len(fields) > 49 else None


@dataclass
class _ForkedKernel:
    """A kernel forked by a zygote: not our child, so no ``waitpid``."""

    pid: int
    start_time: int | None
    zygote: Zygote | None

    def poll(self) -> int | None:
        """``None`` while it runs, else its exit code."""
        stat = _proc_stat(self.pid)
        if stat is not None and stat[1] == self.start_time:
            if stat[0] not in ("Z", "X"):
                return None
            if stat[2] is not None:  # a zombie its parent has yet to reap
                status = os.waitstatus_to_exitcode(stat[2])
                # After its zygote died, a kernel's parent is whoever adopts orphans:
                # when that is this process (PID 1 in a container), reap it here.
                with contextlib.suppress(ChildProcessError):
                    os.waitpid(self.pid, os.WNOHANG)
                return status
        with contextlib.suppress(ZygoteError):
            code = self.zygote.exit_code(self.pid) if self.zygote else None
            if code is not None:
                return code
        return UNKNOWN_EXIT_CODE

    def signal(self, signum: int) -> None:
        """Signal the kernel's process group, unless the pid was reused meanwhile."""
        stat = _proc_stat(self.pid)
        if stat is None or stat[1] == self.start_time:  # no process: only a leftover group
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.pid, signum)


def _listening_sockets() -> dict[int, set[int]] | None:
    """TCP port -> inodes of the sockets listening on it in this network namespace.

    ``None`` without ``/proc/net``.
    """
    sockets: dict[int, set[int]] = {}
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table) as f:
            rows = [row.split() for row in f.read().splitlines()[1:]]
            readable = True
            for row in rows:
                if row[3] == "0A":  # LISTEN
                    port = int(row[1].rsplit(":", 1)[1], 16)
                    sockets.setdefault(port, set()).add(int(row[9]))
    return sockets if readable else None


def _socket_inodes(pid: int) -> set[int]:
    """Inodes of the sockets process ``pid`` has open (empty if it cannot be read)."""
    inodes: set[int] = set()
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                target = os.readlink(f"/proc/{pid}/fd/{fd}")
                if target.startswith("socket:["):
                    inodes.add(int(target[8:-1]))
    return inodes


def _port_owners(pid: int, ports: set[int]) -> tuple[set[int], set[int]] | None:
    """``(ports the kernel listens on, ports only another process listens on)``.

    ``None`` when ``/proc/net`` cannot be read.
    """
    listening = _listening_sockets()
    if listening is None:
        return None
    mine = _socket_inodes(pid) if any(port in listening for port in ports) else set()
    owned = {port for port in ports if listening.get(port, set()) & mine}
    taken = {port for port in ports if port in listening and port not in owned}
    return owned, taken


def _spec_interpreter_options(argv: Sequence[str]) -> list[str] | None:
    """The interpreter options of a kernelspec ``argv`` this interpreter's zygote can fork."""
    cmd = list(argv)
    major, minor = sys.version_info[:2]
    pythons = {"python", f"python{major}", f"python{major}.{minor}"}
    if cmd and cmd[0] in pythons:  # as jupyter_client's format_kernel_cmd resolves it
        cmd[0] = sys.executable
    plan = _fork_plan(cmd, {}) if cmd else None
    return plan[0] if plan is not None else None


def _fork_plan(cmd: Sequence[str], kwargs: Mapping[str, Any]) -> tuple[list[str], list[str]] | None:
    """``(interpreter options, kernel-app arguments)`` when ``cmd`` is
    ``<this python> [-options] -m ipykernel_launcher ... -f FILE ...``, else ``None``."""
    if kwargs.get("independent") or any(kwargs.get(k) for k in ("stdin", "stdout", "stderr")):
        return None  # Popen-only options
    at = cmd.index("-m", 1) if "-m" in cmd[1:] else len(cmd)
    options, module, rest = list(cmd[1:at]), cmd[at + 1 : at + 2], list(cmd[at + 2 :])
    if module not in [[name] for name in _LAUNCHERS] or "-f" not in rest[:-1]:
        return None
    if not all(option.startswith("-") for option in options):
        return None
    try:
        return (options, rest) if os.path.samefile(cmd[0], sys.executable) else None
    except OSError:
        return None


class ZygoteProvisioner(LocalProvisioner):
    """A ``LocalProvisioner`` whose ipykernel processes are forked by a :class:`Zygote`.

    ``pre_launch`` is ``LocalProvisioner``'s; kernels that are not this interpreter's
    ipykernel are started with ``Popen`` exactly as ``LocalProvisioner`` does.
    """

    def __init__(
        self,
        *,
        zygote: Zygote | None = None,
        box: KernelBox | None = None,
        fork: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zygote = zygote
        #: the sandbox every kernel of this provisioner enters (None: none)
        self.box = box
        #: fork kernels from a zygote when the command allows it
        self.fork = fork
        self.forked: _ForkedKernel | None = None

    @property
    def has_process(self) -> bool:
        return self.forked is not None or super().has_process

    async def pre_launch(self, **kwargs: Any) -> dict[str, Any]:
        """Start the shared zygote, if it will be used, *before* the ports are chosen.

        ``LocalProvisioner.pre_launch`` picks free ports that the kernel binds later;
        anything that binds them meanwhile makes the kernel fail (see
        :meth:`post_launch`). Starting the zygote first keeps its imports (seconds on a
        busy machine) out of that window.
        """
        spec = self.kernel_spec
        wanted = self.fork and self.zygote is None and spec
        options = _spec_interpreter_options(spec.argv) if wanted else None
        if options is not None:
            try:
                await asyncio.to_thread(default_zygote, options)
            except (ZygoteUnavailable, OSError) as exc:
                self.log.warning("The zygote did not start (%s)", exc)
        result: dict[str, Any] = await super().pre_launch(**kwargs)
        return result

    async def launch_kernel(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Fork the kernel from the zygote (started lazily) when ``cmd`` allows it.

        When the zygote cannot be started or reached (:class:`ZygoteUnavailable`), the
        kernel is started with ``Popen`` and a warning logged: a stuck zygote costs at
        most its timeout, never the run.
        """
        box = self.box
        if box is not None:
            # The kernel reads its connection file inside the sandbox, as the tenant.
            box.give(self.connection_info_file())
        plan = _fork_plan(cmd, kwargs) if self.fork else None
        zygote = self.zygote
        if plan is None or (zygote and tuple(plan[0]) != zygote.interpreter_options):
            if self.fork:
                self.log.warning("Not forking %s from a zygote: started with Popen", cmd)
            return await self._popen(cmd, **kwargs)
        arguments = plan[1]
        index = arguments.index("-f")
        connection_file = arguments[index + 1]
        extra = arguments[:index] + arguments[index + 2 :]
        cwd = kwargs.get("cwd")
        env = kwargs.get("env")
        try:
            if zygote is None:
                zygote = await asyncio.to_thread(default_zygote, plan[0])
            sandbox = box.plan() if box is not None else None
            spawn = asyncio.ensure_future(
                asyncio.to_thread(
                    zygote.spawn,
                    connection_file,
                    argv_extra=extra,
                    cwd=cwd,
                    env=env,
                    sandbox=sandbox,
                )
            )
            try:
                pid = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                # Cancelled while the fork was under way (a pool closing): the kernel
                # still comes into being, and nothing else knows its pid, so end it here.
                with contextlib.suppress(Exception):
                    os.killpg(await spawn, signal.SIGKILL)
                raise
        except ZygoteUnavailable as exc:
            self.log.warning("The zygote failed (%s): kernel started with Popen instead", exc)
            return await self._popen(cmd, **kwargs)
        except OSError as exc:
            if box is not None:  # it could not enter its sandbox: nor would a Popen one
                raise ZygoteError(f"the kernel could not start in its sandbox: {exc}") from exc
            self.log.warning("The zygote failed (%s): kernel started with Popen instead", exc)
            return await self._popen(cmd, **kwargs)
        stat = _proc_stat(pid)
        self.forked = _ForkedKernel(pid, stat[1] if stat else None, zygote)
        self.pid = pid
        self.pgid = pid
        self.cwd = cwd or os.getcwd()
        return self.connection_info

    def connection_info_file(self) -> str:
        """The kernel's connection file (written by ``pre_launch``)."""
        manager: Any = self.parent
        return str(manager.connection_file)

    async def _popen(self, cmd: list[str], **kwargs: Any) -> KernelConnectionInfo:
        """Start ``cmd`` with ``Popen``, inside the box's sandbox when there is one."""
        if self.box is not None:
            cmd = self.box.command(cmd)
        info: KernelConnectionInfo = await super().launch_kernel(cmd, **kwargs)
        return info

    async def post_launch(self, **kwargs: Any) -> None:
        """Return once a forked kernel listens on all its TCP ports (<= ``LISTEN_WAIT_S``).

        Clients that connect earlier wait for zmq's 100 ms reconnect interval instead.
        A port on which only another process listens means the kernel lost the race
        for it (its ports are chosen before it binds them): the kernel is killed and
        :class:`ZygoteError` raised at once, so that a new kernel can be started,
        rather than a kernel that cannot work being waited for.
        """
        await super().post_launch(**kwargs)
        info = self.connection_info
        if info.get("transport", "tcp") == "ipc":
            await self._wait_for_sockets(info)
            return
        if self.forked is None or info.get("transport", "tcp") != "tcp":
            return
        names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
        wanted = {int(port) for name in names if isinstance(port := info.get(name), int)}
        deadline = time.monotonic() + LISTEN_WAIT_S
        while time.monotonic() < deadline and self.forked.poll() is None:
            owners = _port_owners(self.forked.pid, wanted)
            if owners is None or owners[0] == wanted:
                return
            # A kernel exiting between the two /proc reads (killed by a closing zygote or
            # pool) shows its own ports as someone else's: only a kernel still alive, and
            # still without them, a moment later has lost them.
            if owners[1]:
                await asyncio.sleep(0.05)
                owners = _port_owners(self.forked.pid, wanted)
            if owners is not None and owners[1] and self.forked.poll() is None:
                self.forked.signal(signal.SIGKILL)
                taken = ", ".join(map(str, sorted(owners[1])))
                raise ZygoteError(f"the kernel's port {taken} was taken by another process")
            await asyncio.sleep(0.005)

    async def _wait_for_sockets(self, info: KernelConnectionInfo) -> None:
        """IPC transport: return once the kernel's socket files exist (<= ``LISTEN_WAIT_S``)
        or it has exited, so clients skip zmq's reconnect delay."""
        names = ("shell_port", "iopub_port", "stdin_port", "control_port", "hb_port")
        paths = [f"{info.get('ip')}-{info.get(name)}" for name in names if info.get(name)]
        deadline = time.monotonic() + LISTEN_WAIT_S
        while time.monotonic() < deadline and await self.poll() is None:
            if all(os.path.exists(path) for path in paths):
                return
            await asyncio.sleep(0.005)

    async def poll(self) -> int | None:
        if self.forked is None:
            return await super().poll()
        return self.forked.poll()

    async def wait(self) -> int | None:
        if self.forked is None:
            return await super().wait()
        while (code := self.forked.poll()) is None:
            await asyncio.sleep(0.02)
        self.forked = None
        return code

    async def send_signal(self, signum: int) -> None:
        if self.forked is None:
            return await super().send_signal(signum)
        self.forked.signal(signum)

    async def kill(self, restart: bool = False) -> None:
        if self.forked is None:
            return await super().kill(restart)
        self.forked.signal(signal.SIGKILL)

    async def terminate(self, restart: bool = False) -> None:
        if self.forked is None:
            return await super().terminate(restart)
        self.forked.signal(signal.SIGTERM)

    async def get_provisioner_info(self) -> dict[str, Any]:
        info: dict[str, Any] = await super().get_provisioner_info()
        if self.forked is not None:
            info["forked"] = {"pid": self.forked.pid, "start_time": self.forked.start_time}
        return info


class ZygoteKernelManager(AsyncKernelManager):
    """An ``AsyncKernelManager`` whose kernels are forked by a :class:`Zygote`.

    ``zygote`` defaults to :func:`default_zygote`. Pass the class as
    ``kernel_manager_class`` to nbclient or ``papermill.execute_notebook``.
    """

    def __init__(
        self,
        *,
        zygote: Zygote | None = None,
        box: KernelBox | None = None,
        fork: bool = True,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.zygote = zygote
        self.box = box
        self.fork = fork

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        spec = self.kernel_spec
        custom = spec is not None and "kernel_provisioner" in spec.metadata
        if custom and self.box is not None:
            # Its own provisioner would start the kernel outside the sandbox.
            raise ZygoteError(
                f"kernelspec {self.kernel_name!r} names its own provisioner, which cannot "
                "start a sandboxed kernel"
            )
        # A kernelspec naming its own provisioner keeps it.
        if self.provisioner is None and spec and not custom:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = ZygoteProvisioner(
                kernel_id=self.kernel_id,
                kernel_spec=spec,
                parent=self,
                zygote=self.zygote,
                box=self.box,
                fork=self.fork,
            )
        return await super()._async_pre_start_kernel(**kw)

    pre_start_kernel = _async_pre_start_kernel


def zygote_kernel_manager(*, zygote: Zygote | None = None, **kwargs: Any) -> ZygoteKernelManager:
    """A :class:`ZygoteKernelManager` (``kernel_name`` defaults to ``python3``)."""
    kwargs.setdefault("kernel_name", "python3")
    return ZygoteKernelManager(zygote=zygote, **kwargs)
