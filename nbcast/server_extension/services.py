"""The embedded services: the scheduler, a worker, a delivery worker and the oversight
service as supervised child processes of the server.

With the embedded default (SQLite in the home folder) nothing else would run them, so
the extension does (:meth:`NbcastApp.wants_services
<nbcast.server_extension.app.NbcastApp.wants_services>`). In production they run as
separate services (``deploy/systemd/``) and the server starts none.

What the :class:`ServiceSupervisor` guarantees:

- **Same configuration.** Each child is the ordinary ``nbcast`` command (``scheduler
  run``, ``worker``, ``delivery-worker``, ``oversight``) started with the server's
  nbcast environment (:attr:`ServerState.environ
  <nbcast.server_extension.state.ServerState.environ>`), so it sees the home,
  database, artifact store, SMTP and keys the handlers see.
- **Restarted with backoff.** A child that exits while the server runs is started
  again after ``BACKOFF_BASE · 2^(n-1)`` seconds, at most :data:`BACKOFF_MAX`, where
  ``n`` counts its consecutive short lives; a child that ran :data:`STABLE_AFTER`
  seconds resets ``n``. A crash loop (a bad setting, a held scheduler lock) costs one
  start a minute, not a busy loop.
- **Gone with the server.** :meth:`ServiceSupervisor.stop` (the extension's
  ``stop_extension``) sends SIGTERM — the services' graceful stop — waits up to
  :data:`STOP_GRACE` seconds, then SIGKILLs what is left. If the server dies without
  stopping (SIGKILL, a crash), Linux sends each child SIGTERM through
  ``PR_SET_PDEATHSIG``. That is set *in the child*, before nbcast's CLI runs
  (:mod:`nbcast.server_extension.child`), not in ``preexec_fn``, which is unsafe in a
  server that has threads; the death signal belongs to the thread that forked, so
  children are started from the event loop's thread, which lives as long as the
  server. Each child leads a process group of its own: a Ctrl-C at the server's
  terminal reaches the server only (which then stops the children in order), and
  whatever a dead child left in its group is killed with it.
- **Logged through the server.** Every line a child writes to stdout or stderr is
  logged through the server's log, prefixed ``[nbcast <kind> <pid>]``; lines are cut at
  :data:`MAX_LINE` characters and at most :data:`MAX_LINES_PER_MINUTE` lines a minute
  are logged per child (the rest are counted and the count is logged).
- **Observable.** :meth:`ServiceSupervisor.snapshot` says, for each child, its pid,
  whether it runs, backs off or stopped, how often it was restarted, how it last
  exited and when it starts next (``GET /nbcast/api/v1/services/embedded``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from nbcast.clock import format_instant
from nbcast.retry import backoff_ceiling

__all__ = [
    "BACKOFF_BASE",
    "BACKOFF_MAX",
    "SERVICES_KEY",
    "STABLE_AFTER",
    "STOP_GRACE",
    "ChildSpec",
    "ServiceSupervisor",
    "backoff_delay",
    "disabled_snapshot",
    "embedded_children",
]

CHILD_MODULE = "nbcast.server_extension.child"
"""How a child starts on Linux (:mod:`nbcast.server_extension.child`)."""

SERVICES_KEY = "nbcast_services"
"""The tornado settings key of the :class:`ServiceSupervisor` (absent: none runs)."""

BACKOFF_BASE = 1.0
"""Seconds before the first restart of a child that died young."""
BACKOFF_MAX = 60.0
"""The longest wait before a restart."""
STABLE_AFTER = 60.0
"""A child that ran this many seconds died after a stable period: its backoff resets."""
STOP_GRACE = 10.0
"""Seconds the children get to stop gracefully before they are killed."""
MAX_LINE = 2000
"""Characters of one output line that are logged."""
MAX_LINES_PER_MINUTE = 600
"""Output lines logged per child a minute; the rest are counted, not logged."""

_READ_CHUNK = 64 * 1024
_POLL = 0.2


class ChildState:
    """The ``state`` of a child in the snapshot."""

    running = "running"
    backing_off = "backing-off"
    """It exited; it starts again at ``next_start_at``."""
    stopped = "stopped"
    """The supervisor stopped (or never started) it."""


@dataclass(frozen=True)
class ChildSpec:
    """One service to keep running: its kind and its ``nbcast`` arguments."""

    kind: str
    """``scheduler``, ``worker``, ``delivery-worker`` or ``oversight``."""
    args: tuple[str, ...]
    """The arguments of the ``nbcast`` command."""

    @property
    def command(self) -> str:
        """The command as a person would type it."""
        return " ".join(("nbcast", *self.args))


def embedded_children(environ: Mapping[str, str]) -> list[ChildSpec]:
    """The four embedded services for ``environ``: the scheduler, one worker (on Ray
    when ``NBCAST_RAY_ADDRESS`` is set, locally otherwise), one delivery worker and the
    oversight service, each with its command's defaults."""
    ray = (environ.get("NBCAST_RAY_ADDRESS") or "").strip()
    worker = ("worker", "--engine", "ray", "--ray-address", ray) if ray else ("worker",)
    return [
        ChildSpec("scheduler", ("scheduler", "run")),
        ChildSpec("worker", worker),
        ChildSpec("delivery-worker", ("delivery-worker",)),
        ChildSpec("oversight", ("oversight",)),
    ]


def backoff_delay(failures: int) -> float:
    """Seconds to wait before restarting a child after ``failures`` consecutive short
    lives (module docstring)."""
    if failures <= 0:
        return 0.0
    return backoff_ceiling(failures, base=BACKOFF_BASE, cap=BACKOFF_MAX)


@dataclass
class _Child:
    """A supervised child's bookkeeping."""

    spec: ChildSpec
    state: str = ChildState.stopped
    process: subprocess.Popen[bytes] | None = None
    pid: int | None = None
    restarts: int = 0
    failures: int = 0
    starts: int = 0
    started_at: datetime | None = None
    last_exit_code: int | None = None
    last_exit_at: datetime | None = None
    next_start_at: datetime | None = None
    task: asyncio.Task[None] | None = None
    _window: float = 0.0
    _logged: int = 0
    _dropped: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "kind": self.spec.kind,
            "command": self.spec.command,
            "pid": self.pid,
            "state": self.state,
            "restarts": self.restarts,
            "consecutive_failures": self.failures,
            "started_at": _instant(self.started_at),
            "last_exit_code": self.last_exit_code,
            "last_exit_at": _instant(self.last_exit_at),
            "next_start_at": _instant(self.next_start_at),
        }


class ServiceSupervisor:
    """Keeps the embedded services running as children (module docstring).

    :meth:`start` and :meth:`stop` run on the server's event loop; :meth:`snapshot`
    may be called from any thread (it only reads).
    """

    def __init__(
        self,
        environ: Mapping[str, str],
        log: logging.Logger | logging.LoggerAdapter[Any],
        children: Sequence[ChildSpec] | None = None,
        *,
        python: str = sys.executable,
    ) -> None:
        self.environ = dict(environ)
        self.log = log
        self.python = python
        self.children = [_Child(spec) for spec in (children or embedded_children(environ))]
        self._stopping = asyncio.Event()
        self._started = False

    # -- lifecycle -----------------------------------------------------------------

    def start(self) -> None:
        """Start every child and keep it running (call on the event loop's thread)."""
        if self._started:
            return
        self._started = True
        for child in self.children:
            child.task = asyncio.ensure_future(self._keep(child))
        self.log.info(
            "nbcast: embedded services started: %s",
            ", ".join(c.spec.command for c in self.children),
        )

    async def stop(self, grace: float = STOP_GRACE) -> None:
        """SIGTERM every child, wait up to ``grace`` seconds, SIGKILL what is left."""
        self._stopping.set()
        tasks = [c.task for c in self.children if c.task is not None]
        for child in self.children:
            self._signal(child, signal.SIGTERM)
        if not tasks:
            return
        _done, pending = await asyncio.wait(tasks, timeout=grace)
        if pending:
            for child in self.children:
                if child.task in pending:
                    self.log.warning(
                        "nbcast: %s (pid %s) did not stop within %.0f s; killing it",
                        child.spec.command,
                        child.pid,
                        grace,
                    )
                    self._signal(child, signal.SIGKILL, group=True)
            await asyncio.wait(pending, timeout=5.0)
        for task in pending:
            task.cancel()
        self.log.info("nbcast: embedded services stopped")

    def snapshot(self) -> dict[str, Any]:
        """Each child's kind, command, pid, state, restarts, last exit and next start."""
        return {
            "enabled": True,
            "stopping": self._stopping.is_set(),
            "children": [child.to_json() for child in self.children],
        }

    # -- one child -------------------------------------------------------------------

    async def _keep(self, child: _Child) -> None:
        """Start ``child``, wait for it to exit, back off, start it again — until
        :meth:`stop`."""
        while not self._stopping.is_set():
            if child.starts:
                child.restarts += 1
            child.starts += 1
            started = time.monotonic()
            try:
                code = await self._run_once(child)
            except Exception:  # a bug here must not end the supervision of this child
                self.log.exception("nbcast: supervising %s failed", child.spec.command)
                self._signal(child, signal.SIGKILL, group=True)
                if child.process is not None:  # reap it
                    with contextlib.suppress(subprocess.TimeoutExpired):
                        await asyncio.to_thread(child.process.wait, 5.0)
                code = None
            lived = time.monotonic() - started
            child.process = None
            child.last_exit_code = code
            child.last_exit_at = _now()
            if self._stopping.is_set():
                break
            child.failures = 1 if lived >= STABLE_AFTER else child.failures + 1
            delay = backoff_delay(child.failures)
            child.state = ChildState.backing_off
            child.next_start_at = _now() + timedelta(seconds=delay)
            self.log.warning(
                "nbcast: %s (pid %s) exited with %s after %.1f s; restarting in %.0f s",
                child.spec.command,
                child.pid,
                code,
                lived,
                delay,
            )
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._stopping.wait(), timeout=delay)
            child.next_start_at = None
        child.state = ChildState.stopped

    async def _run_once(self, child: _Child) -> int | None:
        """Run ``child`` once; its exit code (None: it could not be started).

        Plain :class:`subprocess.Popen` rather than asyncio's subprocesses: their
        ``wait()`` also waits for the output pipe to close, which a grandchild that
        left the group (a kernel in a session of its own) may hold open after the
        child died. The exit is polled instead (:data:`_POLL` seconds)."""
        loop = asyncio.get_running_loop()
        try:
            process = subprocess.Popen(
                self._argv(child.spec),
                env=self.environ,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                process_group=0,
            )
        except OSError as exc:
            self.log.error("nbcast: cannot start %s: %s", child.spec.command, exc)
            return None
        child.process = process
        child.pid = process.pid
        child.state = ChildState.running
        child.started_at = _now()
        if self._stopping.is_set():  # stop() came while it was being started
            self._signal(child, signal.SIGTERM)
        assert process.stdout is not None
        reader = asyncio.StreamReader(limit=_READ_CHUNK)
        transport, _protocol = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), process.stdout
        )
        pump = asyncio.ensure_future(self._pump(child, process.pid, reader))
        try:
            while not _exited(process.pid):
                await asyncio.sleep(_POLL)
            # What the child left in its process group dies with it (a helper process);
            # before the child is reaped, so its pid (the group's id) is not reused yet.
            self._signal(child, signal.SIGKILL, group=True, pid=process.pid)
            code = process.wait()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(pump), timeout=2.0)
        finally:
            pump.cancel()
            transport.close()
        return code

    def _argv(self, spec: ChildSpec) -> list[str]:
        if sys.platform.startswith("linux"):  # through the child module: PR_SET_PDEATHSIG
            return [self.python, "-m", CHILD_MODULE, str(os.getpid()), *spec.args]
        return [self.python, "-m", "nbcast", *spec.args]

    def _signal(
        self, child: _Child, signum: int, *, group: bool = False, pid: int | None = None
    ) -> None:
        """Send ``signum`` to the running child (or its whole group), if any."""
        if pid is None:
            process = child.process
            if process is None or process.returncode is not None:
                return
            pid = process.pid
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if group:
                os.killpg(pid, signum)
            else:
                os.kill(pid, signum)

    # -- output ------------------------------------------------------------------------

    async def _pump(self, child: _Child, pid: int, stream: asyncio.StreamReader) -> None:
        """Log ``stream``'s lines through the server's log (module docstring)."""
        prefix = f"[nbcast {child.spec.kind} {pid}]"
        pending = b""
        while True:
            chunk = await stream.read(_READ_CHUNK)
            if not chunk:
                break
            pending += chunk
            *lines, pending = pending.split(b"\n")
            for line in lines:
                self._line(child, prefix, line)
            if len(pending) > MAX_LINE * 4:  # one endless line: log its start, drop the rest
                self._line(child, prefix, pending)
                pending = b""
        if pending:
            self._line(child, prefix, pending)
        self._flush_dropped(child, prefix)

    def _line(self, child: _Child, prefix: str, raw: bytes) -> None:
        now = time.monotonic()
        if now - child._window >= 60.0:
            self._flush_dropped(child, prefix)
            child._window, child._logged = now, 0
        if child._logged >= MAX_LINES_PER_MINUTE:
            child._dropped += 1
            return
        child._logged += 1
        text = raw.decode("utf-8", errors="replace").rstrip()
        if len(text) > MAX_LINE:
            text = text[:MAX_LINE] + " …"
        level = logging.WARNING if (" ERROR " in text or " CRITICAL " in text) else logging.INFO
        self.log.log(level, "%s %s", prefix, text)

    def _flush_dropped(self, child: _Child, prefix: str) -> None:
        if child._dropped:
            self.log.warning(
                "%s %d lines not logged (more than %d a minute)",
                prefix,
                child._dropped,
                MAX_LINES_PER_MINUTE,
            )
            child._dropped = 0


def _exited(pid: int) -> bool:
    """Whether child ``pid`` has exited, without reaping it (a zombie keeps its pid)."""
    try:
        return os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:  # reaped already (by someone else)
        return True


def disabled_snapshot() -> dict[str, Any]:
    """The snapshot of a server that runs no embedded services."""
    return {"enabled": False, "stopping": False, "children": []}


def _now() -> datetime:
    return datetime.now(UTC)


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)
