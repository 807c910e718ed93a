"""Processes and memory of one attempt: a cgroup where the worker may make one,
resource limits always.

**Resource limits** (:func:`resource_limits`, set by the process that becomes the
kernel, :mod:`nbcast.sandbox.enter`), inherited by everything the report starts:

- ``RLIMIT_DATA`` = the tenant's ``memory_mb_per_run`` plus :data:`DATA_HEADROOM_MB`
  (what an idle Python kernel already has as writable mappings: thread stacks and
  allocator arenas, ~250 MB virtual for ~100 MB resident): a process that allocates
  past it gets ``MemoryError`` in the cell that tried, and the run fails with that
  error;
- ``RLIMIT_NPROC``: in the ``privileged`` mode, ``processes * (concurrency + 1)`` for
  the tenant's uid on the whole machine (the kernel counts it per real uid); in the
  ``userns`` mode, ``processes`` — counted per user namespace, so per sandbox;
- ``RLIMIT_CORE`` = 0: a crashing report leaves no core file with its data;
- **without a cgroup** also ``RLIMIT_AS`` (the quota plus :data:`AS_HEADROOM_MB`: shared
  and ``memfd`` mappings, which ``RLIMIT_DATA`` does not count, are counted there),
  ``RLIMIT_FSIZE`` (the quota: no single file — a ``memfd`` or a file in ``/dev/shm``
  included — grows past it; the attempt's own tmpfs ``/tmp`` and ``/dev/shm`` are
  bounded besides) and ``RLIMIT_NOFILE`` (:data:`MAX_OPEN_FILES`). That bounds each
  process and each file, not the attempt as a whole: only a cgroup does, and the worker
  says so once in its log when it cannot make one.

**A cgroup per attempt** (:class:`AttemptCgroup`), when the worker may make them —
cgroup v2 with the ``pids`` and ``memory`` controllers delegated to it (a systemd unit
with ``Delegate=yes``; the worker then moves itself into a leaf ``supervisor`` group
first, as cgroup v2 wants), or cgroup v1's ``pids`` and ``memory`` hierarchies
(root): ``pids.max`` = ``processes`` and a memory ceiling of ``memory_mb_per_run`` for
the attempt as a whole (its tmpfs ``/tmp`` included). A fork bomb then meets the
attempt's own ceiling, the other attempts of the same tenant keep theirs, and the
bomb ends with the attempt (its sandbox's PID namespace is killed). Without cgroups
only the resource limits apply: the worker says so once in its log.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import threading
import time
from dataclasses import dataclass

from nbcast.sandbox.policy import SandboxSpec

__all__ = [
    "AS_HEADROOM_MB",
    "DATA_HEADROOM_MB",
    "MAX_OPEN_FILES",
    "AttemptCgroup",
    "CgroupTree",
    "cgroup_tree",
    "resource_limits",
]

DATA_HEADROOM_MB = 256
"""Writable virtual memory a kernel may have beyond its tenant's memory quota."""
AS_HEADROOM_MB = 1024
"""Address space a kernel may have beyond its quota (an idle one maps ~900 MB)."""
MAX_OPEN_FILES = 1024
"""Open files of one process of an attempt without a cgroup."""

log = logging.getLogger(__name__)
_MIB = 1024 * 1024
_ROOT = "/sys/fs/cgroup"


def resource_limits(spec: SandboxSpec, *, mode: str, cgroup: bool = False) -> dict[str, int]:
    """The ``RLIMIT_*`` values of an attempt's processes (module docstring); ``cgroup``
    says whether the attempt has a cgroup of its own."""
    limits = {"RLIMIT_DATA": (spec.memory_mb + DATA_HEADROOM_MB) * _MIB, "RLIMIT_CORE": 0}
    if mode == "privileged":
        limits["RLIMIT_NPROC"] = spec.processes * (spec.concurrency + 1)
    else:
        limits["RLIMIT_NPROC"] = spec.processes
    if not cgroup:
        limits["RLIMIT_AS"] = (spec.memory_mb + AS_HEADROOM_MB) * _MIB
        limits["RLIMIT_FSIZE"] = spec.memory_mb * _MIB
        limits["RLIMIT_NOFILE"] = MAX_OPEN_FILES
    return limits


def _own_paths() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path, from /proc/self/cgroup."""
    paths: dict[str, str] = {}
    with contextlib.suppress(OSError), open("/proc/self/cgroup", encoding="utf-8") as f:
        for line in f:
            parts = line.rstrip("\n").split(":", 2)
            if len(parts) == 3:
                for controller in parts[1].split(",") if parts[1] else [""]:
                    paths[controller] = parts[2]
    return paths


def _write(path: str, value: str) -> None:
    with open(path, "w", encoding="ascii") as f:
        f.write(value)


@dataclass(frozen=True)
class CgroupTree:
    """Where this worker makes attempt cgroups: one folder per controller hierarchy
    (v2: one), each with the files that set the limits."""

    version: int
    #: controller -> folder under which attempt groups are made
    parents: dict[str, str]

    def make(self, name: str, spec: SandboxSpec) -> AttemptCgroup:
        """A new cgroup for one attempt, its limits set (``OSError`` if it cannot be)."""
        folders: list[str] = []
        try:
            for controller, parent in self.parents.items():
                folder = os.path.join(parent, name)
                os.mkdir(folder)
                folders.append(folder)
                if self.version == 2:
                    _write(os.path.join(folder, "pids.max"), str(spec.processes))
                    _write(os.path.join(folder, "memory.max"), str(spec.memory_mb * _MIB))
                    with contextlib.suppress(OSError):  # not every kernel has swap accounting
                        _write(os.path.join(folder, "memory.swap.max"), "0")
                elif controller == "pids":
                    _write(os.path.join(folder, "pids.max"), str(spec.processes))
                elif controller == "memory":
                    limit = str(spec.memory_mb * _MIB)
                    _write(os.path.join(folder, "memory.limit_in_bytes"), limit)
        except OSError:
            AttemptCgroup(tuple(folders)).remove()
            raise
        return AttemptCgroup(tuple(folders))


@dataclass(frozen=True)
class AttemptCgroup:
    """One attempt's cgroup (a folder per hierarchy)."""

    folders: tuple[str, ...]

    @property
    def procs(self) -> list[str]:
        """The ``cgroup.procs`` files a process writes ``0`` to, to join."""
        return [os.path.join(folder, "cgroup.procs") for folder in self.folders]

    def remove(self, wait_s: float = 2.0) -> None:
        """Remove the group once its processes are gone (they die with the sandbox);
        one still busy after ``wait_s`` is left and logged."""
        deadline = time.monotonic() + wait_s
        for folder in self.folders:
            while True:
                try:
                    os.rmdir(folder)
                    break
                except FileNotFoundError:
                    break
                except OSError as exc:
                    if time.monotonic() > deadline:
                        log.warning("could not remove cgroup %s: %s", folder, exc)
                        break
                    time.sleep(0.02)


_tree_lock = threading.Lock()
_tree: list[CgroupTree | None] = []


def cgroup_tree() -> CgroupTree | None:
    """This process's :class:`CgroupTree`, made on first use; None when it may not make
    cgroups with both limits (then only resource limits apply). Cached."""
    with _tree_lock:
        if not _tree:
            tree = None
            try:
                tree = _v2_tree() or _v1_tree()
            except OSError as exc:
                log.warning("cannot use cgroups for attempts: %s", exc)
            if tree is None:
                log.warning(
                    "attempts get no cgroup of their own here (cgroup v2 with pids and memory "
                    "delegated, or cgroup v1 as root, is needed): processes and memory are "
                    "bounded per process and per tenant only"
                )
            _tree.append(tree)
            if tree is not None:
                atexit.register(_remove_parents, tree)
        return _tree[0]


def _remove_parents(tree: CgroupTree) -> None:
    """At exit: this worker's attempt groups are gone; remove their parent(s)."""
    for parent in tree.parents.values():
        with contextlib.suppress(OSError):
            os.rmdir(parent)


def _group_name() -> str:
    return f"nbcast-{os.getpid()}"


def _v2_tree() -> CgroupTree | None:
    if not os.path.exists(os.path.join(_ROOT, "cgroup.controllers")):
        return None
    own = _own_paths().get("")
    if own is None:
        return None
    base = os.path.join(_ROOT, own.lstrip("/"))
    with open(os.path.join(base, "cgroup.controllers"), encoding="ascii") as f:
        available = set(f.read().split())
    if not {"pids", "memory"} <= available or not os.access(base, os.W_OK):
        return None
    # cgroup v2 lets a group hand controllers to children only when it holds no process
    # itself: this worker (and whatever shares its group) moves into a leaf first.
    leaf = os.path.join(base, "supervisor")
    os.makedirs(leaf, exist_ok=True)
    with open(os.path.join(base, "cgroup.procs"), encoding="ascii") as f:
        members = [line.strip() for line in f if line.strip()]
    for pid in members:
        with contextlib.suppress(OSError):  # a process that ended meanwhile
            _write(os.path.join(leaf, "cgroup.procs"), pid)
    _write(os.path.join(base, "cgroup.subtree_control"), "+pids +memory")
    parent = os.path.join(base, _group_name())
    os.makedirs(parent, exist_ok=True)
    _write(os.path.join(parent, "cgroup.subtree_control"), "+pids +memory")
    return CgroupTree(2, {"": parent})


def _v1_tree() -> CgroupTree | None:
    own = _own_paths()
    parents: dict[str, str] = {}
    for controller in ("pids", "memory"):
        mount = os.path.join(_ROOT, controller)
        if controller not in own or not os.path.isdir(mount) or not os.access(mount, os.W_OK):
            return None
        base = os.path.join(mount, own[controller].lstrip("/"))
        parent = os.path.join(base, _group_name())
        os.makedirs(parent, exist_ok=True)
        parents[controller] = parent
    return CgroupTree(1, parents)
