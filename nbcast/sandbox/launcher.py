"""Starting one sandbox with bubblewrap, around a stub the kernel will join.

:class:`Sandbox` runs ``bwrap`` with the view of :mod:`nbcast.sandbox.view` around a
stub (``sh -c 'echo ready; exec cat'``): the stub says it is ready once bubblewrap has
built every mount, then waits on a pipe the worker holds. The kernel joins the
stub's namespaces (:mod:`nbcast.sandbox.enter`). The sandbox ends — and with it every
process in its PID namespace: the kernel, whatever the report started, a fork bomb —
when its init (bubblewrap's, PID 1 inside) dies: :meth:`Sandbox.kill` kills it
through a pidfd (never a reused pid), and a worker that dies closes the pipe, the stub
exits, and so does the init.

**Two modes** (:mod:`nbcast.sandbox.support` decides which the machine allows):

- ``privileged`` (the worker runs as root): bubblewrap builds mount, PID, IPC and
  UTS namespaces (and a network namespace for ``network: none``) without a user
  namespace, and the kernel switches to the tenant's *real* uid and gid — a user the
  worker is not, that owns nothing on the machine but the run folder;
- ``userns`` (an unprivileged worker): bubblewrap also makes a user namespace in which
  the kernel is the tenant's uid; outside it, that uid is the worker's own. What keeps
  the kernel in is then the namespaces alone (it can name no process outside its PID
  namespace and see no file outside its mount namespace) and the services'
  ``PR_SET_DUMPABLE=0``; run workers as root for a uid of the tenant's own.

**Gone with its worker.** ``--die-with-parent``: the sandbox's init is killed when the
worker dies, whatever state the report put the stub in (in the ``userns`` mode the stub
is the tenant's uid inside, and could be stopped). Its signal comes when the *thread*
that started bubblewrap ends, so every sandbox is started from one long-lived thread
of the worker's (:data:`_STARTER`). Besides, a worker that dies closes the stub's pipe.
A cgroup namespace of its own (where the kernel has them) keeps the host's cgroup paths
out of its ``/proc/self/cgroup``.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import os
import select
import shutil
import signal
import subprocess
import time
from collections.abc import Sequence
from typing import Any

from nbcast.errors import ExecutionError
from nbcast.sandbox.policy import Network, SandboxSpec
from nbcast.sandbox.view import Bind, python_paths, system_binds

__all__ = ["READY_TIMEOUT_S", "Sandbox", "SandboxError", "bwrap_command"]

_STARTER = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="nbcast-sandboxes")
"""The one thread that starts every sandbox: ``--die-with-parent`` ties a sandbox to the
thread that started it, and this one lives as long as the worker."""

READY_TIMEOUT_S = 30.0
"""How long bubblewrap may take to build a sandbox before it is killed."""
_STUB = "echo ready && exec cat >/dev/null"
_MIB = 1024 * 1024


class SandboxError(ExecutionError):
    """A sandbox could not be built or joined; the attempt does not run."""


def _parents(path: str) -> list[str]:
    parents: list[str] = []
    current = os.path.dirname(path.rstrip("/"))
    while current not in ("", "/"):
        parents.append(current)
        current = os.path.dirname(current)
    return list(reversed(parents))


def bwrap_command(
    spec: SandboxSpec,
    folder: str,
    *,
    mode: str,
    hidden: Sequence[str] = (),
    identity_dir: str,
    info_fd: int,
    bwrap: str = "bwrap",
) -> list[str]:
    """The ``bwrap`` command line of one sandbox (module docstring).

    ``folder`` is the run folder (read-write); ``hidden`` paths are covered when a shown
    folder holds them; ``identity_dir`` holds the ``passwd`` and ``group`` files the
    sandbox shows as ``/etc/passwd`` and ``/etc/group``, and the empty file hidden files
    are covered with.
    """
    command = [bwrap, "--new-session", "--die-with-parent", "--unshare-pid", "--unshare-ipc"]
    command += ["--unshare-uts", "--unshare-cgroup-try"]
    if mode == "privileged":  # bubblewrap run by root keeps capabilities unless told
        command += ["--cap-drop", "ALL"]
    command += ["--hostname", "nbcast-sandbox"]
    if spec.network is Network.none:
        command.append("--unshare-net")
    if mode == "userns":  # and no user namespace of the report's own: they would count
        # against the worker user's limit, and every other tenant's sandbox needs one
        command += ["--unshare-user", "--disable-userns"]
        command += ["--uid", str(spec.uid), "--gid", str(spec.gid)]
    made: set[str] = set()

    def make_parents(path: str) -> None:
        for parent in _parents(path):
            if parent not in made:
                made.add(parent)
                command.extend(["--perms", "0755", "--dir", parent])

    # The filesystems of its own first, so that a path shown under /tmp is not covered.
    command += ["--proc", "/proc", "--dev", "/dev"]
    tmp_bytes = str(max(64, spec.memory_mb // 2) * _MIB)
    command += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/tmp"]
    command += ["--perms", "1777", "--size", tmp_bytes, "--tmpfs", "/dev/shm"]
    system, links = system_binds()
    for link, target in links:
        command += ["--symlink", target, link]
    shown: list[Bind] = [*system, *(Bind(p) for p in python_paths())]
    shown += [Bind(p) for p in spec.readonly]
    for bind in shown:
        make_parents(bind.path)
        command += ["--ro-bind-try", bind.path, bind.path]
    for name in ("passwd", "group"):
        command += ["--ro-bind", os.path.join(identity_dir, name), f"/etc/{name}"]
    roots = [b.path for b in shown]
    for path in hidden:
        if any(path == r or path.startswith(r.rstrip("/") + "/") for r in roots):
            if os.path.isdir(path):
                command += ["--perms", "0755", "--size", "4096", "--tmpfs", path]
            elif os.path.exists(path):  # an empty file (a device would be nodev: EACCES)
                command += ["--ro-bind", os.path.join(identity_dir, "empty"), path]
    make_parents(folder)
    command += ["--bind", folder, folder, "--chdir", "/"]
    command += ["--info-fd", str(info_fd), "--", "/bin/sh", "-c", _STUB]
    return command


def _identity_files(spec: SandboxSpec, folder: str) -> str:
    """Write the sandbox's ``/etc/passwd`` and ``/etc/group`` beside ``folder``."""
    where = folder.rstrip("/") + ".id"
    os.makedirs(where, mode=0o755, exist_ok=True)
    user = f"nbcast-{spec.tenant}"[:32]
    files = {
        "passwd": (
            "root:x:0:0:root:/root:/usr/sbin/nologin\n"
            f"{user}:x:{spec.uid}:{spec.gid}:nbcast tenant {spec.tenant}:/tmp:/bin/sh\n"
            "nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n"
        ),
        "group": f"root:x:0:\n{user}:x:{spec.gid}:\nnogroup:x:65534:\n",
        "empty": "",
    }
    for name, text in files.items():
        path = os.path.join(where, name)
        with open(path, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(path, 0o644)
    return where


class Sandbox:
    """One running sandbox (module docstring). Start it with :meth:`start`."""

    def __init__(
        self,
        spec: SandboxSpec,
        folder: str,
        mode: str,
        process: subprocess.Popen[bytes],
        init_pid: int,
        namespaces: dict[str, int],
        pidfd: int | None,
        identity_dir: str,
    ) -> None:
        self.spec = spec
        self.folder = folder
        self.mode = mode
        self._process = process
        #: bubblewrap's init: PID 1 inside, this pid outside
        self.init_pid = init_pid
        #: namespace kind -> inode, as bubblewrap reported them
        self.namespaces = namespaces
        self._pidfd = pidfd
        self._identity_dir = identity_dir
        self._killed = False

    @classmethod
    def start(
        cls,
        spec: SandboxSpec,
        folder: str,
        *,
        mode: str,
        hidden: Sequence[str] = (),
        bwrap: str | None = None,
        timeout: float = READY_TIMEOUT_S,
    ) -> Sandbox:
        """Build the sandbox of ``spec`` around the run folder ``folder`` (which must
        exist); return once the stub says every mount is in place."""
        program = bwrap or shutil.which("bwrap")
        if program is None:
            raise SandboxError("bubblewrap (bwrap) is not installed")
        identity_dir = _identity_files(spec, folder)
        info_r, info_w = os.pipe()
        try:
            command = bwrap_command(
                spec,
                folder,
                mode=mode,
                hidden=hidden,
                identity_dir=identity_dir,
                info_fd=info_w,
                bwrap=program,
            )
            process = _STARTER.submit(
                subprocess.Popen,
                command,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                pass_fds=[info_w],
                start_new_session=True,
                env={"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8"},
            ).result()
        except BaseException:
            os.close(info_r)
            shutil.rmtree(identity_dir, ignore_errors=True)
            raise
        finally:
            os.close(info_w)
        try:
            info = _read_info(info_r, process, timeout)
            _wait_ready(process, timeout)
            init_pid = int(info["child-pid"])
            namespaces = _namespaces(init_pid, info)
            pidfd: int | None = None
            with contextlib.suppress(AttributeError, OSError):
                pidfd = os.pidfd_open(init_pid)
        except BaseException:
            _stop(process)
            shutil.rmtree(identity_dir, ignore_errors=True)
            raise
        finally:
            os.close(info_r)
        return cls(spec, folder, mode, process, init_pid, namespaces, pidfd, identity_dir)

    @property
    def alive(self) -> bool:
        """Whether the sandbox still runs."""
        return not self._killed and self._process.poll() is None

    def plan(self, *, limits: dict[str, int], cgroup_procs: Sequence[str] = ()) -> dict[str, Any]:
        """What a process needs to join this sandbox (:func:`nbcast.sandbox.enter.enter`)."""
        return {
            "pid": self.init_pid,
            "namespaces": dict(self.namespaces),
            "uid": self.spec.uid,
            "gid": self.spec.gid,
            "limits": dict(limits),
            "cgroup_procs": list(cgroup_procs),
            "clear_groups": self.mode == "privileged",
            "cwd": self.folder,
        }

    def kill(self) -> None:
        """End the sandbox and every process in it. Idempotent."""
        if self._killed:
            return
        self._killed = True
        if self._pidfd is not None:
            with contextlib.suppress(OSError):
                signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
            os.close(self._pidfd)
            self._pidfd = None
        _stop(self._process)
        shutil.rmtree(self._identity_dir, ignore_errors=True)

    def __repr__(self) -> str:
        return f"Sandbox({self.spec.tenant!r}, {self.folder!r}, init={self.init_pid})"


def _read_info(fd: int, process: subprocess.Popen[bytes], timeout: float) -> dict[str, Any]:
    """bubblewrap's ``--info-fd`` JSON (it closes the descriptor after writing)."""
    deadline = time.monotonic() + timeout
    data = b""
    while True:
        left = deadline - time.monotonic()
        if left <= 0:
            raise SandboxError(f"bubblewrap did not start a sandbox within {timeout:.0f}s")
        ready, _, _ = select.select([fd], [], [], min(left, 0.5))
        if not ready:
            if process.poll() is not None:
                break
            continue
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
        if len(data) > 65536:
            raise SandboxError("bubblewrap's report is too long")
    try:
        info: dict[str, Any] = json.loads(data.decode())
        int(info["child-pid"])
    except (ValueError, KeyError, TypeError):
        raise SandboxError(f"bubblewrap could not build the sandbox: {_why(process)}") from None
    return info


def _wait_ready(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Wait for the stub's ``ready`` line: every mount is made."""
    assert process.stdout is not None
    fd = process.stdout.fileno()
    ready, _, _ = select.select([fd], [], [], timeout)
    line = os.read(fd, 64) if ready else b""
    if line.strip() != b"ready":
        raise SandboxError(f"the sandbox did not get ready: {_why(process)}")


def _why(process: subprocess.Popen[bytes]) -> str:
    """What bubblewrap said on stderr, once it has exited (briefly)."""
    try:
        process.wait(2.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
    assert process.stderr is not None
    text = process.stderr.read(2000).decode(errors="replace").strip()
    return " ".join(text.split())[:300] or f"exit status {process.returncode}"


def _namespaces(init_pid: int, info: dict[str, Any]) -> dict[str, int]:
    """The namespaces of the sandbox's init, checked against bubblewrap's report."""
    found: dict[str, int] = {}
    for kind in ("user", "mnt", "pid", "ipc", "uts", "net"):
        inode = os.stat(f"/proc/{init_pid}/ns/{kind}").st_ino
        reported = info.get(f"{kind}-namespace")
        if reported is not None and int(reported) != inode:
            raise SandboxError(f"the sandbox's {kind} namespace changed while it started")
        if inode != os.stat(f"/proc/self/ns/{kind}").st_ino:
            found[kind] = inode
    for kind in ("mnt", "pid", "ipc", "uts"):
        if kind not in found:
            raise SandboxError(f"the sandbox has no {kind} namespace of its own")
    return found


def _stop(process: subprocess.Popen[bytes]) -> None:
    """Close the stub's pipe, kill bubblewrap's process group, reap it."""
    for stream in (process.stdin, process.stdout, process.stderr):
        if stream is not None:
            with contextlib.suppress(OSError):
                stream.close()
    with contextlib.suppress(OSError):
        os.killpg(process.pid, signal.SIGKILL)
    try:
        process.wait(5.0)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
