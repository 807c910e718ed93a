"""One kernel's sandbox as the kernel machinery uses it: its run folder, its
bubblewrap sandbox, its cgroup, and the settings its kernel manager needs.

A :class:`KernelBox` is opened for each sandboxed kernel, before the kernel starts
(the pool does this ahead of time for pre-started kernels), and closed when the kernel
is done with: the sandbox is killed — every process in it ends — its cgroup removed
and its run folder deleted. One box, one kernel, one run.

What it decides:

- **The run folder** is ``<sandbox root>/<random>``, owned by the tenant's uid (mode
  ``0700``): the only place the kernel may write outside its private ``/tmp``; the
  worker writes the run context there and reads the usage figures back. The root is
  a private folder (``0700``) of this worker process under the temporary folder
  (``NBCAST_SANDBOX_ROOT`` to choose another): its paths must be short, since the
  kernel's sockets live in the run folder and a unix socket path has at most 107 bytes.
- **The kernel's transport is IPC** (unix sockets in the run folder), not TCP: a
  kernel in a network namespace of its own (``network: none``) has no loopback in
  common with the worker, other tenants' kernels cannot even connect to its ports,
  and no port can be taken by another process between choosing and binding it.
- **The kernel's environment** holds only what :data:`PASSED` names (locale, time zone,
  certificate bundles, proxies, thread counts, ``NBCAST_LAKE``…) of the worker's —
  an allow-list: a worker's own cloud credentials or tokens, whatever their names,
  never reach a tenant's code — plus ``NBCAST_SANDBOX_ENV``'s names (comma-separated,
  for an installation that means to hand reports a variable), with ``HOME``,
  ``TMPDIR`` and the caches in its private ``/tmp`` and ``USER`` named for its
  tenant.
- **A kernel that is not forked** (another kernelspec, or forked kernels turned off)
  is started through ``python -I -m nbcast.sandbox.enter``, which joins the same
  sandbox before it ``exec`` s the kernelspec's command.
"""

from __future__ import annotations

import atexit
import json
import os
import secrets
import shutil
import sys
import tempfile
import threading
from collections.abc import Mapping
from typing import Any

from nbcast.executor.kernels.environment import is_withheld
from nbcast.sandbox.launcher import Sandbox, SandboxError
from nbcast.sandbox.limits import AttemptCgroup, cgroup_tree, resource_limits
from nbcast.sandbox.policy import SandboxSpec
from nbcast.sandbox.support import sandbox_support

__all__ = ["MAX_FOLDER_PATH", "PASSED", "KernelBox", "sandbox_environment", "sandbox_root"]

MAX_FOLDER_PATH = 90
"""The longest run-folder path: the kernel's sockets (``<folder>/k-<n>``) must fit in
a unix socket's 107 bytes."""

PASSED = frozenset(
    {
        "PATH",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TERM",
        "NBCAST_LAKE",
        "MPLBACKEND",
        "PYTHONHASHSEED",
        "PYTHONIOENCODING",
        "PYTHONUTF8",
        "OMP_NUM_THREADS",
        "OPENBLAS_NUM_THREADS",
        "MKL_NUM_THREADS",
        "NUMEXPR_MAX_THREADS",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "REQUESTS_CA_BUNDLE",
        "CURL_CA_BUNDLE",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    }
)
"""The worker's variables a sandboxed kernel gets (``LC_*`` too)."""
_root_lock = threading.Lock()
_roots: list[str] = []


def sandbox_root() -> str:
    """This process's folder of sandboxed run folders (module docstring), made ``0700``
    on first use and removed at exit."""
    with _root_lock:
        if not _roots:
            base = os.environ.get("NBCAST_SANDBOX_ROOT") or tempfile.gettempdir()
            root = tempfile.mkdtemp(prefix="nbcast-", dir=base)
            os.chmod(root, 0o700)
            if len(root) + 16 > MAX_FOLDER_PATH:
                shutil.rmtree(root, ignore_errors=True)
                raise SandboxError(
                    f"the sandbox root {root[:60]}… is too long for kernel sockets: "
                    "set NBCAST_SANDBOX_ROOT to a short folder"
                )
            _roots.append(root)
            atexit.register(shutil.rmtree, root, True)
        return _roots[0]


def sandbox_environment(base: Mapping[str, str], spec: SandboxSpec) -> dict[str, str]:
    """A sandboxed kernel's environment (module docstring)."""
    extra = {n.strip() for n in os.environ.get("NBCAST_SANDBOX_ENV", "").split(",") if n.strip()}
    withheld = {n for n in extra if is_withheld(n)}  # nbcast's own secrets, never
    wanted = (PASSED | extra) - withheld
    env = {k: v for k, v in base.items() if k in wanted or k.startswith("LC_")}
    user = f"nbcast-{spec.tenant}"[:32]
    env.update(
        HOME="/tmp",
        TMPDIR="/tmp",
        USER=user,
        LOGNAME=user,
        XDG_CACHE_HOME="/tmp/.cache",
        XDG_CONFIG_HOME="/tmp/.config",
        MPLCONFIGDIR="/tmp/.config/matplotlib",
        PATH=env.get("PATH") or "/usr/local/bin:/usr/bin:/bin",
    )
    return env


class KernelBox:
    """One kernel's sandbox (module docstring); :meth:`open` it, then :meth:`close`."""

    def __init__(
        self,
        spec: SandboxSpec,
        folder: str,
        sandbox: Sandbox,
        cgroup: AttemptCgroup | None,
        limits: dict[str, int],
    ) -> None:
        self.spec = spec
        #: the run folder: the kernel's working directory, read-write inside
        self.folder = folder
        self.sandbox = sandbox
        self.cgroup = cgroup
        self.limits = limits
        self._closed = False

    @classmethod
    def open(cls, spec: SandboxSpec) -> KernelBox:
        """Make the run folder, the cgroup and the sandbox (blocking: call it off the
        event loop). :class:`~nbcast.sandbox.launcher.SandboxError` when the machine
        cannot sandbox — never an unsandboxed kernel instead."""
        support = sandbox_support()
        if not support.available:
            raise SandboxError(f"this machine cannot sandbox kernels: {support.reason}")
        folder = os.path.join(sandbox_root(), secrets.token_hex(6))
        os.mkdir(folder, 0o700)
        cgroup: AttemptCgroup | None = None
        try:
            if support.mode == "privileged":
                os.chown(folder, spec.uid, spec.gid)
            tree = cgroup_tree()
            if tree is not None:
                cgroup = tree.make(os.path.basename(folder), spec)
            hidden = [*spec.hidden, sandbox_root()]
            sandbox = Sandbox.start(
                spec, folder, mode=support.mode, hidden=hidden, bwrap=support.bwrap
            )
        except BaseException:
            if cgroup is not None:
                cgroup.remove()
            shutil.rmtree(folder, ignore_errors=True)
            raise
        limits = resource_limits(spec, mode=support.mode, cgroup=cgroup is not None)
        return cls(spec, folder, sandbox, cgroup, limits)

    def manager_settings(self) -> dict[str, Any]:
        """Kernel-manager traits: IPC sockets and the connection file in the run folder."""
        return {
            "transport": "ipc",
            "ip": os.path.join(self.folder, "k"),
            "connection_file": os.path.join(self.folder, "kernel.json"),
        }

    def environment(self, base: Mapping[str, str]) -> dict[str, str]:
        """The kernel's environment (:func:`sandbox_environment`)."""
        return sandbox_environment(base, self.spec)

    def plan(self) -> dict[str, Any]:
        """How a process joins this box's sandbox (:func:`nbcast.sandbox.enter.enter`)."""
        procs = self.cgroup.procs if self.cgroup is not None else []
        # quiet: a kernel's own stdout and stderr go nowhere, not into the worker's log
        return {**self.sandbox.plan(limits=self.limits, cgroup_procs=procs), "quiet": True}

    def command(self, cmd: list[str]) -> list[str]:
        """``cmd`` run inside the sandbox by a process that joins it first."""
        entry = [sys.executable, "-I", "-m", "nbcast.sandbox.enter"]
        return [*entry, json.dumps(self.plan()), "--", *cmd]

    def give(self, path: str) -> None:
        """Let the kernel read ``path`` (a file the worker wrote in the run folder)."""
        if self.sandbox.mode == "privileged":
            os.chown(path, self.spec.uid, self.spec.gid, follow_symlinks=False)

    def close(self) -> None:
        """Kill the sandbox (every process in it), remove the cgroup and the run folder.
        Idempotent."""
        if self._closed:
            return
        self._closed = True
        self.sandbox.kill()
        if self.cgroup is not None:
            self.cgroup.remove()
        shutil.rmtree(self.folder, ignore_errors=True)

    def __repr__(self) -> str:
        return f"KernelBox({self.spec.tenant!r}, {self.folder!r})"
