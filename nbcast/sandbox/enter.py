"""Joining a sandbox bubblewrap built, as ``nsenter`` and ``setpriv`` would: the one
step of the sandbox that runs in the process that becomes a report's kernel.

Bubblewrap (:mod:`nbcast.sandbox.launcher`) builds each sandbox — its mount namespace
with only the paths a run may see, its PID, IPC and UTS namespaces, and its network
namespace when the tenant's setting is ``none`` — around a stub process. A kernel then
*joins* those namespaces instead of being started by bubblewrap, because a kernel
forked from the worker's zygote (:mod:`nbcast.executor.kernels.zygote_server`) keeps
the zygote's pre-imported pandas, numpy and matplotlib only if no ``exec`` comes
between the fork and the kernel. What :func:`enter` does, in this order, is what
``nsenter --target PID --mount --pid --ipc --uts [--net]`` followed by
``setpriv --reuid U --regid G --clear-groups --no-new-privs --bounding-set -all
--inh-caps -all`` would do:

1. open every namespace of the sandbox's first process and check that each is the
   namespace bubblewrap reported (a pid reused meanwhile is refused, never joined);
2. move into the attempt's cgroup (``cgroup.procs``), when there is one, so every
   process the report starts is counted against its limits;
3. clear the supplementary groups (while still allowed to);
4. ``setns`` into the user namespace first, when the sandbox has one (unprivileged
   workers) — the one that owns its mounts, when bubblewrap nested the sandbox's own in
   it —, then into the others, then (nested) into the sandbox's own;
5. drop every capability from the bounding and ambient sets, set ``no_new_privs``,
   switch to the tenant's group and user (real, effective and saved), and clear the
   permitted, effective and inheritable sets;
6. set the resource limits (memory, processes, core files) and the umask (``077``:
   the kernel's sockets and whatever the report writes are private);
7. ``fork``: the child is the first process of this attempt inside the sandbox's PID
   namespace (``setns`` of a PID namespace applies to children only) — it checks in
   its ``/proc/self/status`` that step 5 did what it says —, the parent reports the
   child's pid and exits, and the sandbox's init (bubblewrap's) adopts the child.

Every failure raises :class:`SandboxEntryError` before any of the report's code runs;
a process that cannot enter its sandbox never runs outside it.

Only the standard library: the zygote imports this before anything else, and it runs
as ``python -I -m nbcast.sandbox.enter`` for kernels that are not forked (another
kernelspec, or forked kernels turned off). Linux only.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import json
import os
import resource
import signal
import sys
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["NAMESPACES", "SandboxEntryError", "enter", "main"]

#: Namespace kind -> its ``CLONE_NEW*`` flag; the order is the order they are joined
#: after the user namespace.
NAMESPACES: dict[str, int] = {
    "user": 0x10000000,
    "mnt": 0x00020000,
    "pid": 0x20000000,
    "ipc": 0x08000000,
    "uts": 0x04000000,
    "net": 0x40000000,
}

_PR_CAPBSET_DROP = 24
_PR_SET_NO_NEW_PRIVS = 38
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_PR_SET_DUMPABLE = 4
_CAP_LAST_CAP_MAX = 63
_LINUX_CAPABILITY_VERSION_3 = 0x20080522


class SandboxEntryError(OSError):
    """A process could not enter its sandbox; it must not go on."""


class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [
        ("effective", ctypes.c_uint32),
        ("permitted", ctypes.c_uint32),
        ("inheritable", ctypes.c_uint32),
    ]


_libc: Any = None


def _c() -> Any:
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    return _libc


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise SandboxEntryError(err, f"{what}: {os.strerror(err)}")


def _open_namespaces(pid: int, expected: Mapping[str, int]) -> dict[str, int]:
    """Open ``pid``'s namespaces named in ``expected`` (kind -> inode), each checked."""
    opened: dict[str, int] = {}
    try:
        for kind, inode in expected.items():
            if kind not in NAMESPACES:
                raise SandboxEntryError(0, f"unknown namespace {kind!r}")
            fd = os.open(f"/proc/{pid}/ns/{kind}", os.O_RDONLY | os.O_CLOEXEC)
            opened[kind] = fd
            if os.fstat(fd).st_ino != int(inode):
                raise SandboxEntryError(0, f"the sandbox's {kind} namespace is gone (pid reused)")
    except BaseException:
        for fd in opened.values():
            os.close(fd)
        raise
    return opened


def _mount_owner(opened: Mapping[str, int]) -> int | None:
    """The user namespace that owns the sandbox's mount namespace, when it is not the
    sandbox's own (an unprivileged bubblewrap builds the mounts in one user namespace
    and runs the sandbox in a second, nested one): an open descriptor, else None."""
    import fcntl

    ns_get_userns = 0xB701  # _IO(0xb7, 0x1), linux/nsfs.h
    owner = fcntl.ioctl(opened["mnt"], ns_get_userns)
    if os.fstat(owner).st_ino == os.fstat(opened["user"]).st_ino:
        os.close(owner)
        return None
    return owner


def _drop_privileges(uid: int, gid: int) -> None:
    """Step 5 of the module docstring."""
    libc = _c()
    for cap in range(_CAP_LAST_CAP_MAX + 1):
        # EINVAL past the kernel's last capability; EPERM only without CAP_SETPCAP, which
        # the check at the end catches (an unprivileged caller has nothing to drop).
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    _check(libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0), "no_new_privs")
    os.setresgid(gid, gid, gid)
    os.setresuid(uid, uid, uid)
    header = _CapHeader(_LINUX_CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    _check(libc.capset(ctypes.byref(header), data), "capset")
    # A changed uid made the process undumpable: its /proc files would belong to root
    # and the report could not read its own /proc/self/environ. It is the tenant's.
    libc.prctl(_PR_SET_DUMPABLE, 1, 0, 0, 0)


def _verify(uid: int, gid: int) -> None:
    """Read back what step 5 promised; anything else is refused."""
    fields: dict[str, str] = {}
    with open("/proc/thread-self/status", encoding="ascii", errors="replace") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    want_ids = {str(uid)}
    if set(fields.get("Uid", "").split()) != want_ids:
        raise SandboxEntryError(0, f"uid is {fields.get('Uid')}, not {uid}")
    if set(fields.get("Gid", "").split()) != {str(gid)}:
        raise SandboxEntryError(0, f"gid is {fields.get('Gid')}, not {gid}")
    for key in ("CapInh", "CapPrm", "CapEff", "CapAmb"):
        if int(fields.get(key, "1"), 16) != 0:
            raise SandboxEntryError(0, f"{key} is {fields.get(key)}, not empty")
    if fields.get("NoNewPrivs") != "1":
        raise SandboxEntryError(0, "no_new_privs is not set")


def _set_limits(limits: Mapping[str, int]) -> None:
    """Step 6: ``limits`` maps ``RLIMIT_*`` names to soft = hard values."""
    for name, value in limits.items():
        which = getattr(resource, name, None)
        if not isinstance(which, int) or not name.startswith("RLIMIT_"):
            raise SandboxEntryError(0, f"unknown resource limit {name!r}")
        hard = resource.getrlimit(which)[1]
        wanted = int(value) if hard == resource.RLIM_INFINITY else min(int(value), hard)
        resource.setrlimit(which, (wanted, wanted))


def enter(plan: Mapping[str, Any]) -> int:
    """Enter the sandbox ``plan`` describes; return 0 in the process that is now inside
    it, the pid of that process (as this process sees it) in the one that is not.

    ``plan``: ``pid`` (the sandbox's first process), ``namespaces`` (kind -> inode, as
    bubblewrap reported them), ``uid``, ``gid``, ``limits`` (``RLIMIT_*`` -> value),
    ``cgroup_procs`` (the ``cgroup.procs`` files of the attempt's cgroup, if any),
    ``clear_groups``, ``umask``; :func:`main` also reads ``cwd`` and ``quiet`` (stdout
    and stderr to ``/dev/null``). The caller must be single-threaded (``setns`` of a user
    namespace requires it).
    """
    uid, gid = int(plan["uid"]), int(plan["gid"])
    opened = _open_namespaces(int(plan["pid"]), plan["namespaces"])
    try:
        for procs in plan.get("cgroup_procs") or ():
            with open(procs, "w", encoding="ascii") as f:
                f.write("0\n")  # this process; its children follow it
        if plan.get("clear_groups", True):
            os.setgroups([])
        libc = _c()
        owner = _mount_owner(opened) if "user" in opened else None
        if owner is not None:  # the namespace bubblewrap built the mounts in, first
            try:
                _check(libc.setns(owner, NAMESPACES["user"]), "setns user (of the mounts)")
            finally:
                os.close(owner)
        elif "user" in opened:
            _check(libc.setns(opened["user"], NAMESPACES["user"]), "setns user")
        for kind, flag in NAMESPACES.items():
            if kind != "user" and kind in opened:
                _check(libc.setns(opened[kind], flag), f"setns {kind}")
        if owner is not None:  # then the sandbox's own, nested in it
            _check(libc.setns(opened["user"], NAMESPACES["user"]), "setns user")
    finally:
        for fd in opened.values():
            os.close(fd)
    _drop_privileges(uid, gid)
    _set_limits(plan.get("limits") or {})
    os.umask(int(plan.get("umask", 0o077)))  # what the kernel creates is the tenant's alone
    child = os.fork()
    if child == 0:
        # Only a process inside the PID namespace has a /proc/self in the sandbox's /proc.
        _verify(uid, gid)
    return child


def _wait_and_exit(child: int) -> None:
    """The parent outside the PID namespace: wait for the child, exit as it did."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT):
        signal.signal(sig, signal.SIG_IGN)  # sent to the group: the child gets them too
    while True:
        try:
            _, status = os.waitpid(child, 0)
        except InterruptedError:
            continue
        code = os.waitstatus_to_exitcode(status)
        os._exit(code if code >= 0 else 128 - code)


def main(argv: Sequence[str]) -> int:
    """``python -I -m nbcast.sandbox.enter PLAN -- COMMAND...``: run COMMAND inside the
    sandbox ``PLAN`` (JSON) describes, with its exit status; 126 when it cannot enter."""
    args = list(argv)
    if len(args) < 3 or args[1] != "--":
        print("usage: python -m nbcast.sandbox.enter PLAN -- COMMAND...", file=sys.stderr)
        return 2
    plan, command = json.loads(args[0]), args[2:]
    try:
        child = enter(plan)
    except (OSError, ValueError, KeyError) as exc:
        print(f"nbcast sandbox: cannot enter: {exc}", file=sys.stderr)
        sys.stderr.flush()
        os._exit(126)  # also in a child that failed its check: never run the command
    if child:
        _wait_and_exit(child)
    try:
        cwd = plan.get("cwd")
        if cwd:
            os.chdir(cwd)
        if plan.get("quiet"):  # a kernel: a report must not write into the worker's log
            devnull = os.open(os.devnull, os.O_RDWR)
            os.dup2(devnull, 1)
            os.dup2(devnull, 2)
            os.close(devnull)
        os.execvp(command[0], command)
    except OSError as exc:
        print(f"nbcast sandbox: cannot run {command[0]}: {exc}", file=sys.stderr)
    os._exit(127)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
