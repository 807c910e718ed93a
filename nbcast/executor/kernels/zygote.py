"""Jupyter kernels forked from a pre-imported parent process (a "zygote", as on Android).

A python3 ipykernel costs ~0.3-0.9 s of CPU to start and importing pandas in it ~0.45 s
more; on a 2-core worker that caps throughput even with pre-started kernels. A
:class:`Zygote` is one long-lived process per worker that has already imported
ipykernel, pandas, numpy and matplotlib (:data:`DEFAULT_PRELOAD`) and forks a child per
kernel. Every kernel is still its own process with its own copy of the interpreter:
nothing is shared between runs, and user namespaces start empty (modules are in
``sys.modules``, no name is bound).

This module is the client side, used by the worker's kernel pool. The server side
(what runs in the zygote and in the kernels it forks: preloading, the request loop,
turning a forked child into a kernel) is :mod:`nbcast.executor.kernels.zygote_server`,
with its design notes; jupyter_client starts forked kernels through
:mod:`nbcast.executor.kernels.forked` (a provisioner and a kernel manager).

Design decisions:

- **Private channel.** The client runs
  ``python [options] -m nbcast.executor.kernels.zygote_server`` and passes it one end
  of a ``socketpair`` (``pass_fds``) rather than a named unix socket: no path to clean
  up, nobody else can ask for forks, and end-of-file is the lifeline. JSON lines:
  ``spawn``, ``status``, ``shutdown``; the server's first line reports what it
  imported.
- **Setup errors** in a forked child (a missing ``cwd``) are raised by
  :meth:`Zygote.spawn`, as ``Popen`` would.
- **A stall never hangs a run** (the once-seen stall in a Ray worker; the full account
  is in :mod:`nbcast.executor.engines.ray`). Its cause was a kernel that lost one of
  its ports to another process between jupyter_client's probe and its own bind: after
  a failed IOPub bind ipykernel's exit handler blocks in ``zmq.Context.term()``
  forever, so the kernel neither works nor exits. Hence: the provisioner's
  ``pre_launch`` starts the shared zygote *before* ports are chosen (its imports were
  inside that window); its ``post_launch`` kills a kernel at once when another
  process listens on one of its ports (:class:`ZygoteError`; the pool starts
  another); forked kernels' exit handlers get 5 s; and a zygote that cannot be
  started, or does not answer a request within ``request_timeout`` (30 s), is killed
  and the kernel started with ``Popen`` with a warning (:class:`ZygoteUnavailable`).

The zygote's environment, and every kernel's, is the worker's without nbcast's
secrets (:mod:`nbcast.executor.kernels.environment`), whatever a caller passes.

A kernel outlives its zygote: killing the zygote (a report can: it is the kernel's
parent, and runs as the same user) ends no running kernel. The zygote leaves its
kernels alone when it gets SIGTERM or SIGINT, and kernels watch the *worker* (the
zygote's client), not the zygote, to end when it dies; :func:`default_zygote` starts
a new zygote for later kernels. The zygote still kills its kernels when its client
asks (``shutdown``), closes the socket or dies.

Caveats: the preloads see the zygote's environment (the worker's at zygote start);
kernels of one zygote share ``PYTHONHASHSEED``; a kernel's parent is the zygote, and
``ps`` shows it with the zygote's command line; non-daemon threads do not delay a
kernel's exit. Linux only (``fork``, ``/proc``).
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any, Self

from nbcast.errors import ExecutionError
from nbcast.executor.kernels.environment import kernel_environment
from nbcast.executor.kernels.zygote_server import INLINE_BACKEND as INLINE_BACKEND

__all__ = [
    "DEFAULT_INTERPRETER_OPTIONS",
    "DEFAULT_PRELOAD",
    "Zygote",
    "ZygoteError",
    "ZygoteUnavailable",
    "default_zygote",
    "shutdown_default_zygote",
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


class ZygoteError(ExecutionError):
    """The zygote could not be started, reached, or asked to start a kernel."""


class ZygoteUnavailable(ZygoteError):
    """The zygote is not running, exited, or did not answer in time (it was killed).

    The provisioner (:mod:`nbcast.executor.kernels.forked`) then starts the kernel
    with ``Popen`` instead.
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
            module = "nbcast.executor.kernels.zygote_server"
            command = [sys.executable, *self.interpreter_options, "-m", module, json.dumps(config)]
            try:
                self._process = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    pass_fds=[theirs.fileno()],
                    start_new_session=True,  # a terminal's Ctrl-C is for the worker
                    env=kernel_environment(self.env),
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
        sandbox: Mapping[str, Any] | None = None,
    ) -> int:
        """Fork a kernel for ``connection_file``; return its pid.

        ``argv_extra`` are further ``IPKernelApp`` arguments; ``env`` replaces the
        kernel's environment (default: ours), without nbcast's secrets either way;
        ``cwd`` defaults to ours. ``sandbox`` is the plan of the sandbox the kernel
        enters before anything else (:meth:`nbcast.sandbox.launcher.Sandbox.plan`);
        the pid is then the kernel's, which the zygote does not reap (its sandbox does).
        """
        request: dict[str, Any] = {
            "op": "spawn",
            "connection_file": os.path.abspath(connection_file),
            "argv_extra": list(argv_extra),
            "cwd": os.path.abspath(cwd or os.getcwd()),
            "env": kernel_environment(env),
        }
        if sandbox is not None:
            request["sandbox"] = dict(sandbox)
        reply = self._request(request)
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
