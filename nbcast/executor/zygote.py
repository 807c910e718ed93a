"""Jupyter kernels forked from a pre-imported parent process (a "zygote", as on Android).

A python3 ipykernel costs ~0.3-0.9 s of CPU to start and importing pandas in it ~0.45 s
more; on a 2-core worker that caps throughput even with pre-started kernels. A
:class:`Zygote` is one long-lived process per worker that has already imported
ipykernel, pandas, numpy and matplotlib (:data:`DEFAULT_PRELOAD`) and forks a child per
kernel. Every kernel is still its own process with its own copy of the interpreter:
nothing is shared between runs, and user namespaces start empty (modules are in
``sys.modules``, no name is bound).

This module is the client side, used by the worker. The server side (what runs in the
zygote and in the kernels it forks: preloading, the request loop, turning a forked
child into a kernel) is :mod:`nbcast.executor.zygote_server`, with its design notes.

Design decisions:

- **Private channel.** The client runs ``python [options] -m nbcast.executor.zygote_server``
  and passes it one end of a ``socketpair`` (``pass_fds``) rather than a named unix
  socket: no path to clean up, nobody else can ask for forks, and end-of-file is the
  lifeline. JSON lines: ``spawn``, ``status``, ``shutdown``; the server's
  first line reports what it imported.
- **Setup errors** in a forked child (a missing ``cwd``) are raised by
  :meth:`Zygote.spawn`, as ``Popen`` would.
- **jupyter_client.** :class:`ZygoteProvisioner` is a ``LocalProvisioner``:
  ``pre_launch`` (ports, connection file, command, env) is inherited; ``launch_kernel``
  forks when the command is this interpreter running ``-m ipykernel_launcher`` with
  the zygote's interpreter options, else uses ``Popen``. The kernel is not our child:
  ``poll``/``wait`` read ``/proc/<pid>/stat`` (start time guards against pid reuse) and
  ask the zygote for exit codes; signals go to the process group; ``post_launch`` waits
  until the kernel listens so clients skip zmq's 100 ms reconnect delay.
  :class:`ZygoteKernelManager` sets ``provisioner`` in ``_async_pre_start_kernel``
  before jupyter_client would consult its entry-point factory, so no entry point or
  kernelspec is installed; nbclient/papermill take it as ``kernel_manager_class``.

- **A stall never hangs a run** (the once-seen stall in a Ray worker; the full account
  is in :mod:`nbcast.executor.engines.ray`). Its cause was a kernel that lost one of
  its ports to another process between jupyter_client's probe and its own bind: after
  a failed IOPub bind ipykernel's exit handler blocks in ``zmq.Context.term()``
  forever, so the kernel neither works nor exits. Hence: ``pre_launch`` starts the
  shared zygote *before* ports are chosen (its imports were inside that window);
  ``post_launch`` kills a kernel at once when another process listens on one of its
  ports (:class:`ZygoteError`; the pool starts another); forked kernels' exit
  handlers get 5 s; and a zygote that cannot be started, or does not answer a request
  within ``request_timeout`` (30 s), is killed and the kernel started with ``Popen``
  with a warning (:class:`ZygoteUnavailable`).

Caveats: the preloads see the zygote's environment (the worker's at zygote start);
kernels of one zygote share ``PYTHONHASHSEED``; a kernel's parent is the zygote, and
``ps`` shows it with the zygote's command line; non-daemon threads do not delay a
kernel's exit. Linux only (``fork``, ``/proc``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Self

from jupyter_client.connect import KernelConnectionInfo
from jupyter_client.manager import AsyncKernelManager
from jupyter_client.provisioning.local_provisioner import LocalProvisioner

from nbcast.errors import ExecutionError
from nbcast.executor.zygote_server import INLINE_BACKEND as INLINE_BACKEND

__all__ = [
    "DEFAULT_INTERPRETER_OPTIONS",
    "DEFAULT_PRELOAD",
    "UNKNOWN_EXIT_CODE",
    "Zygote",
    "ZygoteError",
    "ZygoteKernelManager",
    "ZygoteProvisioner",
    "ZygoteUnavailable",
    "default_zygote",
    "shutdown_default_zygote",
    "zygote_kernel_manager",
]

DEFAULT_PRELOAD: tuple[str, ...] = (
    "ipykernel.kernelapp",
    # imported lazily by IPKernelApp.initialize: ~80 ms of a forked kernel's start
    "ipykernel.ipkernel",
    "ipykernel.debugger",
    "IPython.core.debugger",
    "IPython.core.completerlib",
    "IPython.extensions.storemagic",
    "sqlite3",
    "psutil",
    "tornado.platform.asyncio",
    # what reports use
    "pandas",
    "numpy",
    "matplotlib",
    "matplotlib_inline.backend_inline",
)
"""Modules the zygote imports before forking; ones that fail to import are skipped."""

DEFAULT_INTERPRETER_OPTIONS: tuple[str, ...] = (
    ("-Xfrozen_modules=off",) if sys.implementation.name == "cpython" else ()
)
"""What ipykernel's python3 kernelspec passes to the interpreter (``argv`` before ``-m``)."""

UNKNOWN_EXIT_CODE = 1
"""``poll``'s answer for a kernel that is gone when nobody recorded its exit code."""

LISTEN_WAIT_S = 10.0
"""How long :meth:`ZygoteProvisioner.post_launch` waits for a kernel to listen."""

_LAUNCHERS = ("ipykernel_launcher", "ipykernel")


class ZygoteError(ExecutionError):
    """The zygote could not be started, reached, or asked to start a kernel."""


class ZygoteUnavailable(ZygoteError):
    """The zygote is not running, exited, or did not answer in time (it was killed).

    :class:`ZygoteProvisioner` then starts the kernel with ``Popen`` instead.
    """


class Zygote:
    """A pre-imported server process that forks Jupyter kernels on request.

    Nothing runs until :meth:`start` (or ``with``). The server is ``sys.executable``
    with ``interpreter_options`` and only serves kernel commands with exactly those
    options. ``preload`` modules must not start threads, open connections or create
    event loops at import: every kernel would inherit them. Thread-safe: one request
    at a time over the private socket. A zygote that has not finished its imports
    within ``timeout`` seconds, or does not answer a request (a fork takes
    milliseconds) within ``request_timeout``, is killed and :class:`ZygoteUnavailable`
    raised.
    """

    def __init__(
        self,
        preload: Sequence[str] = DEFAULT_PRELOAD,
        *,
        interpreter_options: Sequence[str] = DEFAULT_INTERPRETER_OPTIONS,
        env: Mapping[str, str] | None = None,
        timeout: float = 120.0,
        request_timeout: float = 30.0,
    ) -> None:
        self.preload = tuple(preload)
        self.interpreter_options = tuple(interpreter_options)
        self.env = dict(env) if env is not None else None
        self.timeout = timeout
        self.request_timeout = request_timeout
        self.info: dict[str, Any] = {}
        """The server's start-up report: ``loaded``, ``failed``, ``env_set``, ``threads``."""
        self.owner_pid = os.getpid()
        self._process: subprocess.Popen[bytes] | None = None
        self._sock: socket.socket | None = None
        self._buffer = b""
        self._lock = threading.Lock()

    @property
    def pid(self) -> int | None:
        """The zygote's process id (``None`` before :meth:`start`)."""
        return self._process.pid if self._process is not None else None

    @property
    def alive(self) -> bool:
        """Whether the zygote runs and this process may talk to it."""
        process, ours = self._process, self.owner_pid == os.getpid()
        return ours and self._sock is not None and process is not None and process.poll() is None

    def start(self) -> Self:
        """Start the server; return once its modules are imported. Idempotent."""
        with self._lock:
            if self._sock is not None:
                return self
            ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
            config = {"fd": theirs.fileno(), "parent": os.getpid(), "preload": self.preload}
            module = "nbcast.executor.zygote_server"
            command = [sys.executable, *self.interpreter_options, "-m", module, json.dumps(config)]
            try:
                self._process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    pass_fds=[theirs.fileno()],
                    start_new_session=True,  # a terminal's Ctrl-C is for the worker
                    env=self.env,
                )
            except BaseException:
                ours.close()
                raise
            finally:
                theirs.close()
            self._sock = ours
            self.info = self._receive(self.timeout)
            return self

    def spawn(
        self,
        connection_file: str,
        *,
        argv_extra: Sequence[str] = (),
        cwd: str | None = None,
        env: Mapping[str, str] | None = None,
    ) -> int:
        """Fork a kernel for ``connection_file``; return its pid.

        ``argv_extra`` are further ``IPKernelApp`` arguments; ``env`` replaces the
        kernel's environment (default: ours); ``cwd`` defaults to ours.
        """
        reply = self._request(
            {
                "op": "spawn",
                "connection_file": os.path.abspath(connection_file),
                "argv_extra": list(argv_extra),
                "cwd": os.path.abspath(cwd or os.getcwd()),
                "env": dict(os.environ if env is None else env),
            }
        )
        return int(reply["pid"])

    def exit_code(self, pid: int) -> int | None:
        """Kernel ``pid``'s exit code once the zygote has reaped it, else ``None``."""
        code = self._request({"op": "status", "pid": pid})["returncode"]
        return None if code is None else int(code)

    def close(self, timeout: float = 10.0) -> None:
        """Stop the zygote, which kills every kernel it forked. Idempotent.

        In a forked copy of the owning process this only drops the socket.
        """
        if self.alive:
            with contextlib.suppress(ZygoteError):
                self._request({"op": "shutdown"})
        with self._lock:
            if self._process is not None and self.owner_pid == os.getpid():
                try:
                    self._process.wait(timeout)
                except subprocess.TimeoutExpired:
                    self._process.kill()
                    self._process.wait()
            self._drop()

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _drop(self, *, kill: bool = False) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None
        if kill and self._process is not None and self.owner_pid == os.getpid():
            with contextlib.suppress(OSError):
                self._process.kill()
            self._process.wait()

    def _request(self, message: Mapping[str, Any]) -> dict[str, Any]:
        with self._lock:
            if self._sock is None or self.owner_pid != os.getpid():
                raise ZygoteUnavailable("the zygote is not running")
            try:
                self._sock.sendall(json.dumps(message).encode() + b"\n")
            except OSError as exc:
                self._drop(kill=True)
                raise ZygoteUnavailable(f"the zygote is unreachable: {exc}") from exc
            return self._receive(self.request_timeout)

    def _receive(self, timeout: float) -> dict[str, Any]:
        """Read one reply (lock held); a dead or silent zygote is killed and raises."""
        assert self._sock is not None
        self._sock.settimeout(timeout)
        try:
            while b"\n" not in self._buffer:
                data = self._sock.recv(65536)
                if not data:
                    raise EOFError("it exited")
                self._buffer += data
        except (OSError, EOFError) as exc:
            self._drop(kill=True)
            raise ZygoteUnavailable(f"no answer from the zygote: {exc}") from exc
        line, self._buffer = self._buffer.split(b"\n", 1)
        reply: dict[str, Any] = json.loads(line)
        if not reply.get("ok"):
            raise ZygoteError(str(reply.get("error")))
        return reply


_default_lock = threading.Lock()
_defaults: dict[tuple[str, ...], Zygote] = {}


def default_zygote(interpreter_options: Sequence[str] = DEFAULT_INTERPRETER_OPTIONS) -> Zygote:
    """This process's shared zygote for ``interpreter_options``, started on first use.

    It preloads :data:`DEFAULT_PRELOAD`; a dead one is replaced; a forked worker
    process gets its own. Stopped at exit or by :func:`shutdown_default_zygote`.
    """
    key = tuple(interpreter_options)
    with _default_lock:
        zygote = _defaults.get(key)
        if zygote is None or not zygote.alive:
            if zygote is not None:
                zygote.close()
            zygote = _defaults[key] = Zygote(interpreter_options=key).start()
            atexit.unregister(shutdown_default_zygote)
            atexit.register(shutdown_default_zygote)
        return zygote


def shutdown_default_zygote() -> None:
    """Stop the shared zygotes (and so their kernels), if any were started."""
    with _default_lock:
        while _defaults:
            _defaults.popitem()[1].close()


# --------------------------------------------------------------------------- jupyter_client


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
            if stat[2] is not None:  # a zombie the zygote has yet to reap
                return os.waitstatus_to_exitcode(stat[2])
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

    def __init__(self, *, zygote: Zygote | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.zygote = zygote
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
        options = _spec_interpreter_options(spec.argv) if self.zygote is None and spec else None
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
        plan = _fork_plan(cmd, kwargs)
        zygote = self.zygote
        if plan is None or (zygote and tuple(plan[0]) != zygote.interpreter_options):
            self.log.warning("Not forking %s from a zygote: started with Popen", cmd)
            return await super().launch_kernel(cmd, **kwargs)
        arguments = plan[1]
        index = arguments.index("-f")
        connection_file = arguments[index + 1]
        extra = arguments[:index] + arguments[index + 2 :]
        cwd = kwargs.get("cwd")
        env = kwargs.get("env")
        try:
            if zygote is None:
                zygote = await asyncio.to_thread(default_zygote, plan[0])
            spawn = asyncio.ensure_future(
                asyncio.to_thread(zygote.spawn, connection_file, argv_extra=extra, cwd=cwd, env=env)
            )
            try:
                pid = await asyncio.shield(spawn)
            except asyncio.CancelledError:
                # Cancelled while the fork was under way (a pool closing): the kernel
                # still comes into being, and nothing else knows its pid, so end it here.
                with contextlib.suppress(Exception):
                    os.killpg(await spawn, signal.SIGKILL)
                raise
        except (ZygoteUnavailable, OSError) as exc:
            self.log.warning("The zygote failed (%s): kernel started with Popen instead", exc)
            return await super().launch_kernel(cmd, **kwargs)
        stat = _proc_stat(pid)
        self.forked = _ForkedKernel(pid, stat[1] if stat else None, zygote)
        self.pid = pid
        self.pgid = pid
        self.cwd = cwd or os.getcwd()
        return self.connection_info

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

    def __init__(self, *, zygote: Zygote | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.zygote = zygote

    async def _async_pre_start_kernel(self, **kw: Any) -> tuple[list[str], dict[str, Any]]:
        spec = self.kernel_spec
        # A kernelspec naming its own provisioner keeps it.
        if self.provisioner is None and spec and "kernel_provisioner" not in spec.metadata:
            self.kernel_id = self.kernel_id or kw.pop("kernel_id", str(uuid.uuid4()))
            self.provisioner = ZygoteProvisioner(
                kernel_id=self.kernel_id, kernel_spec=spec, parent=self, zygote=self.zygote
            )
        return await super()._async_pre_start_kernel(**kw)

    pre_start_kernel = _async_pre_start_kernel


def zygote_kernel_manager(*, zygote: Zygote | None = None, **kwargs: Any) -> ZygoteKernelManager:
    """A :class:`ZygoteKernelManager` (``kernel_name`` defaults to ``python3``)."""
    kwargs.setdefault("kernel_name", "python3")
    return ZygoteKernelManager(zygote=zygote, **kwargs)
