"""The zygote's server side: the process that preloads modules and forks Jupyter kernels.

The client (:class:`nbcast.executor.kernels.zygote.Zygote`, which holds the overview;
the jupyter_client integration is :mod:`nbcast.executor.kernels.forked`) runs
``python [options] -m nbcast.executor.kernels.zygote_server CONFIG`` with one end of a
``socketpair`` (``pass_fds``); ``CONFIG`` is JSON naming that descriptor, the client's
pid and the modules to preload. The server imports them, reports what it imported in
its first line, then answers JSON-line requests (``spawn``, ``status``, ``shutdown``)
until told to stop or orphaned. Running it as ``-m`` imports this package's
``__init__``, which imports nothing until a name is asked for, so the zygote still
starts with only the standard library.

Design decisions:

- **Fork before anything stateful exists.** The zygote only imports: no zmq context,
  event loop or Python thread; its loop is ``select`` on one socket. This module
  imports only the standard library. ``gc.freeze()`` after the imports keeps the shared
  pages shared. OpenBLAS's idle pool is the only native thread; OpenBLAS stops it in a
  ``pthread_atfork`` handler.
- **The child is** ``python -m ipykernel_launcher -f FILE``: ``setsid()``, ``chdir``,
  the requested environment *replaces* ``os.environ`` (plus variables the preloads set,
  e.g. debugpy's), stdin ``/dev/null``, stdout and stderr inherited (``/dev/null`` for a
  sandboxed kernel: a report must not write into the worker's log), the launcher's
  ``sys.argv``; then ``IPKernelApp`` ``initialize``/``start``, ``atexit``
  handlers and ``os._exit`` (the zygote's stack never unwinds in a child). Setup errors
  (a missing ``cwd``) are reported back and raised by the client's ``Zygote.spawn``, as
  ``Popen`` would.
- **Kernels watch the worker, not the zygote.** A kernel's parent is the zygote, and
  a report can kill its parent (``os.kill(os.getppid(), SIGTERM)``): that must not
  end the other tenants' kernels forked from it. Two things used to: the zygote
  killed its kernels' process groups on ``SIGTERM``, and ipykernel's
  ``ParentPollerUnix`` (pointed at the zygote) ended each kernel within a second of
  the zygote's death. Now the zygote exits on ``SIGTERM``/``SIGINT`` leaving its
  kernels running (they are reparented), and each kernel watches the *worker* — the
  zygote's client — instead: ``parent_handle=1`` turns ipykernel's poller off (its
  own special case for a parent that never goes away, which also keeps its
  connection banner off stdout), and a thread of the kernel waits on a pidfd of the
  worker that the zygote opened at start (or, without pidfds, checks the worker's
  ``/proc`` start time every second) and ends the kernel when the worker is gone,
  even by ``SIGKILL``. ``JPY_PARENT_PID`` says the worker's pid. The zygote still
  kills its kernels on ``shutdown``, end-of-file (its client went away) or a new
  parent pid (its client died); the client starts a new zygote for later kernels.
- **Sandboxed kernels** (a ``spawn`` with a ``sandbox`` plan): the forked child enters
  the sandbox (:mod:`nbcast.sandbox.enter`), which forks once more — the kernel must be
  a child of a process that joined the sandbox's PID namespace — reports the kernel's
  pid and exits. The zygote is a *child subreaper*, so the kernel, orphaned at once, is
  adopted and reaped by the zygote, exit code and all, like any other kernel (the
  machine's init would have adopted it otherwise, and reaped it whenever it got to it).
- **Import-time state a kernel would have computed differently is redone in the
  child:** matplotlib's ``backend`` from ``MPLBACKEND`` (ipykernel's inline default);
  ``matplotlib_inline.backend_inline`` is re-imported by pyplot so it hooks into the
  live shell; pandas' ``display.max_columns`` is 20 as under a kernel; numpy's global
  random state is reseeded (``random`` reseeds itself). A test compares a forked
  kernel with a normally started one.

Linux only (``fork``, ``/proc``).
"""

from __future__ import annotations

import atexit
import contextlib
import gc
import importlib
import importlib.util
import json
import os
import select
import signal
import socket
import sys
import threading
import time
import traceback
from collections.abc import Mapping, Sequence
from typing import Any

from nbcast.sandbox.enter import enter as enter_sandbox

__all__ = ["EXIT_GRACE_S", "INLINE_BACKEND"]

INLINE_BACKEND = "module://matplotlib_inline.backend_inline"
EXIT_GRACE_S = 5.0
"""Seconds a forked kernel's exit handlers may take before it exits anyway."""
_KEEP_EXIT_CODES = 4096


def _prepare_child_runtime() -> None:
    """Redo, in a forked kernel, import-time state that differs inside a kernel."""
    if not os.environ.get("MPLBACKEND"):  # what IPKernelApp.init_gui_pylab does
        os.environ["MPLBACKEND"] = INLINE_BACKEND
    matplotlib: Any = sys.modules.get("matplotlib")
    if matplotlib is not None:  # matplotlib reads MPLBACKEND when first imported
        matplotlib.rcParams["backend"] = os.environ["MPLBACKEND"]
    # Its import hooks into the running shell (show figures after each cell); let
    # pyplot import it again once the shell exists.
    sys.modules.pop("matplotlib_inline.backend_inline", None)
    np_random: Any = sys.modules.get("numpy.random")
    if np_random is not None:
        np_random.seed()
    config: Any = sys.modules.get("pandas._config.config")
    key = "display.max_columns"
    registered = config._registered_options.get(key) if config is not None else None
    if registered is not None and registered.defval == 0:  # computed outside IPython
        config._registered_options[key] = registered._replace(defval=20)
        if config.get_option(key) == 0:
            config.set_option(key, 20)


def _start_time(pid: int) -> int | None:
    """Process ``pid``'s start time (clock ticks since boot), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            raw = f.read().decode(errors="replace")
    except OSError:
        return None
    return int(raw[raw.rindex(")") + 2 :].split()[19])


class _Worker:
    """The worker the zygote serves, as its kernels watch it (module docstring)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.start_time = _start_time(pid)
        self.pidfd: int | None = None
        with contextlib.suppress(AttributeError, OSError):  # Linux 5.3+
            self.pidfd = os.pidfd_open(pid)

    def alive(self) -> bool:
        """Whether it is still running (checked through /proc)."""
        return self.start_time is not None and _start_time(self.pid) == self.start_time

    def watch(self, *, sandboxed: bool = False) -> None:
        """In a kernel: end this process as soon as the worker is gone.

        A sandboxed kernel's ``/proc`` shows nothing outside its sandbox: without a
        pidfd it relies on its sandbox, which ends when the worker does.
        """
        if sandboxed and self.pidfd is None:
            return

        def wait_for_exit() -> None:
            if self.pidfd is not None:
                poller = select.poll()
                poller.register(self.pidfd, select.POLLIN)
                while not poller.poll():
                    pass
            else:
                while self.alive():
                    time.sleep(1.0)
            os._exit(1)

        threading.Thread(target=wait_for_exit, name="nbcast-worker-watch", daemon=True).start()


def _run_kernel(worker: _Worker, argv: list[str], *, sandboxed: bool = False) -> int:
    """Run an IPython kernel as ``python -m ipykernel_launcher`` would; return its code."""
    code = 0
    try:
        _prepare_child_runtime()
        from ipykernel.kernelapp import IPKernelApp

        worker.watch(sandboxed=sandboxed)
        # 1: no parent poller (see the module docstring).
        app: Any = IPKernelApp.instance(parent_handle=1)
        app.initialize(argv)
        app.start()
    except SystemExit as exc:
        code = exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    except BaseException:
        traceback.print_exc()
        code = 1
    # Exit handlers get a bounded time: after a failed start (a port taken by another
    # process between jupyter_client's probe and our bind) ipykernel's ``close`` waits in
    # ``zmq.Context.term()`` for a socket it never closes, forever: the kernel would hang,
    # alive, holding its other ports, and its manager would wait for it to the timeout.
    timer = threading.Timer(EXIT_GRACE_S, os._exit, (code,))
    timer.daemon = True
    timer.start()
    with contextlib.suppress(BaseException):
        atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__):
        with contextlib.suppress(BaseException):
            stream.flush()  # type: ignore[union-attr]
    return code


class _Server:
    """The zygote's request loop: one client socket, children reaped as they exit."""

    def __init__(self, sock: socket.socket, worker: _Worker, env_set: dict[str, str]) -> None:
        self.sock, self.worker, self.env_set = sock, worker, env_set
        self.parent_pid = worker.pid
        self.children: set[int] = set()
        #: sandboxed kernels: not our children (their sandbox's init adopted them)
        self.adopted: set[int] = set()
        self.exit_codes: dict[int, int] = {}
        self.stopping = False
        self.sandboxed = False  # set in a child that entered a sandbox
        self.orphaning = False  # SIGTERM/SIGINT: exit, leaving the kernels running
        self.buffer = b""
        spec = importlib.util.find_spec("ipykernel_launcher")
        self.launcher = spec.origin if spec and spec.origin else "ipykernel_launcher"
        self.wake_r, self.wake_w = os.pipe()
        os.set_blocking(self.wake_w, False)

    def _stop(self, signum: int, frame: object) -> None:
        self.stopping = self.orphaning = True

    def send(self, message: Mapping[str, Any]) -> None:
        """Write one JSON line to the client; a vanished client stops the server."""
        try:
            self.sock.sendall(json.dumps(message).encode() + b"\n")
        except OSError:
            self.stopping = True

    def run(self) -> None:
        """Serve requests until told to stop or orphaned; then kill every kernel —
        unless a signal stopped it (module docstring)."""
        signal.signal(signal.SIGCHLD, lambda signum, frame: None)  # wakes select
        signal.signal(signal.SIGTERM, self._stop)
        signal.signal(signal.SIGINT, self._stop)
        signal.set_wakeup_fd(self.wake_w, warn_on_full_buffer=False)
        try:
            while not self.stopping and os.getppid() == self.parent_pid:
                ready, _, _ = select.select([self.sock.fileno(), self.wake_r], [], [], 0.5)
                if self.wake_r in ready:
                    os.read(self.wake_r, 4096)
                self.reap()
                if self.sock.fileno() in ready:
                    data = self.sock.recv(65536)
                    self.stopping = self.stopping or not data  # EOF: the client went away
                    self.buffer += data
                while b"\n" in self.buffer and not self.stopping:
                    line, self.buffer = self.buffer.split(b"\n", 1)
                    self.send(self.handle(line))
        finally:
            if not self.orphaning:
                self.kill_children()

    def reap(self) -> None:
        """Collect exited children and remember their exit codes."""
        with contextlib.suppress(ChildProcessError):
            while (waited := os.waitpid(-1, os.WNOHANG))[0]:
                self.children.discard(waited[0])
                self.adopted.discard(waited[0])  # never signal a pid that may be reused
                self.exit_codes[waited[0]] = os.waitstatus_to_exitcode(waited[1])
                if len(self.exit_codes) > _KEEP_EXIT_CODES:
                    del self.exit_codes[next(iter(self.exit_codes))]

    def kill_children(self) -> None:
        """SIGKILL every live kernel's process group and reap it (waiting <= 10 s)."""
        for pid in self.adopted:  # whose sandboxes the worker ends anyway
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)
        self.adopted.clear()
        for pid in self.children:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        deadline = time.monotonic() + 10.0
        while self.children and time.monotonic() < deadline:
            time.sleep(0.005)
            self.reap()

    def handle(self, line: bytes) -> dict[str, Any]:
        """Answer one request."""
        try:
            request = json.loads(line)
            op = request.get("op")
            self.reap()
            if op == "spawn":
                return {"ok": True, "pid": self.spawn(request)}
            if op == "status":
                return {"ok": True, "returncode": self.exit_codes.get(int(request["pid"]))}
            if op == "shutdown":
                self.stopping = True
                return {"ok": True}
            return {"ok": False, "error": f"unknown request {op!r}"}
        except Exception as exc:
            return {"ok": False, "error": f"{type(exc).__name__}: {exc}"}

    def spawn(self, request: Mapping[str, Any]) -> int:
        """Fork one kernel; return its pid once its setup (cwd, env, stdio) succeeded."""
        argv = ["-f", str(request["connection_file"]), *map(str, request["argv_extra"])]
        env = {str(k): str(v) for k, v in dict(request["env"]).items()}
        status_r, status_w = os.pipe()
        blocked = {signal.SIGCHLD, signal.SIGTERM, signal.SIGINT}
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, blocked)
        plan = request.get("sandbox")
        pid = os.fork()
        if pid == 0:  # the kernel (or, sandboxed, the process that enters); never returns
            try:
                os.close(status_r)
                if plan:
                    self._enter(status_w, plan, argv, str(request["cwd"]), env)
                self._child(status_w, argv, str(request["cwd"]), env)
            finally:
                os._exit(127)
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        os.close(status_w)
        self.children.add(pid)
        with os.fdopen(status_r, "rb") as status:
            said = status.read().decode(errors="replace")
        if not plan:
            if said:
                raise OSError(said)
            return pid
        # Sandboxed: the entering process says "P<kernel pid>;", the kernel its error.
        head, _, error = said.partition(";")
        if not head.startswith("P") or not head[1:].isdigit():
            raise OSError(said or "the kernel did not enter its sandbox")
        kernel = int(head[1:])
        if error:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(kernel, signal.SIGKILL)
            raise OSError(error)
        self.adopted.add(kernel)
        if len(self.adopted) > _KEEP_EXIT_CODES:  # those long gone: their sandboxes ended
            self.adopted = {p for p in self.adopted if os.path.exists(f"/proc/{p}")}
        return kernel

    def _enter(
        self, status_w: int, plan: Mapping[str, Any], argv: list[str], cwd: str, env: dict[str, str]
    ) -> None:
        """In the forked child: enter the sandbox (:mod:`nbcast.sandbox.enter`). The child
        inside it returns, to become the kernel; this process reports its pid and exits."""
        try:
            kernel = enter_sandbox(plan)
        except BaseException as exc:
            os.write(status_w, f";{type(exc).__name__}: {exc}".encode())
            os._exit(127)
        if kernel:
            os.write(status_w, f"P{kernel};".encode())
            os._exit(0)
        self.sandboxed = True

    def _child(self, status_w: int, argv: list[str], cwd: str, env: dict[str, str]) -> None:
        """Turn the forked child into a kernel process (runs in the child only)."""
        try:
            os.setsid()
            signal.set_wakeup_fd(-1)
            signal.signal(signal.SIGCHLD, signal.SIG_DFL)
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            signal.signal(signal.SIGINT, signal.default_int_handler)
            signal.pthread_sigmask(signal.SIG_SETMASK, set())
            self.sock.close()
            os.close(self.wake_r)
            os.close(self.wake_w)
            os.chdir(cwd)
            os.environ.clear()
            os.environ.update(env)
            for key, value in self.env_set.items():  # what the preloads did to os.environ
                os.environ.setdefault(key, value)
            os.environ["JPY_PARENT_PID"] = str(self.worker.pid)
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 0)
            if self.sandboxed:  # a report must not write into the worker's log
                os.dup2(devnull, 1)
                os.dup2(devnull, 2)
            os.close(devnull)
            sys.argv = [self.launcher, *argv]
            options = sys.orig_argv[: sys.orig_argv.index("-m")]  # interpreter and options
            sys.orig_argv = [*options, "-m", "ipykernel_launcher", *argv]
        except BaseException as exc:
            os.write(status_w, f"{type(exc).__name__}: {exc}".encode())
            os._exit(127)
        os.close(status_w)
        os._exit(_run_kernel(self.worker, argv, sandboxed=self.sandboxed))


def _become_subreaper() -> None:
    """Adopt orphaned descendants: a sandboxed kernel, whose parent (the process that
    entered its sandbox) exits at once, is reaped here, with its exit code, rather than
    by the machine's init, which may take seconds (module docstring)."""
    import ctypes

    pr_set_child_subreaper = 36
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_child_subreaper, 1, 0, 0, 0)


def _server_main(argv: Sequence[str]) -> int:
    """Entry point of the zygote process
    (``python -m nbcast.executor.kernels.zygote_server``)."""
    config = json.loads(argv[0])  # {"fd": socketpair end, "parent": pid, "preload": [...]}
    sock = socket.socket(fileno=config["fd"])
    # Like ipykernel_launcher: `-m` put the current directory first on sys.path.
    if sys.path and sys.path[0] and os.path.realpath(sys.path[0]) == os.path.realpath("."):
        del sys.path[0]
    environ, loaded, failed = dict(os.environ), [], {}
    for name in config["preload"]:
        try:
            importlib.import_module(name)
            loaded.append(name)
        except Exception as exc:
            failed[name] = f"{type(exc).__name__}: {exc}"
    env_set = {k: v for k, v in os.environ.items() if environ.get(k) != v}
    gc.collect()
    gc.freeze()
    _become_subreaper()
    server = _Server(sock, _Worker(int(config["parent"])), env_set)
    threads = len(os.listdir("/proc/self/task"))
    server.send({"ok": True, "loaded": loaded, "failed": failed, "env_set": env_set,
                 "threads": threads})  # fmt: skip
    server.run()
    return 0


if __name__ == "__main__":
    sys.exit(_server_main(sys.argv[1:]))
