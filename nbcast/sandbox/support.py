"""Whether this machine can sandbox kernels, and how (:func:`sandbox_support`).

Asked once per process, by a worker at start (and by a Ray task the first time it
runs an attempt). The answer is a :class:`Support`: ``available`` with the mode — the
launcher's ``privileged`` (root, or ``CAP_SYS_ADMIN`` with ``CAP_SETUID`` and
``CAP_SETGID``: kernels get the tenant's real uid) or ``userns`` (an unprivileged user
with user namespaces) — or the one-line reason it is not: bubblewrap missing, not
Linux, user namespaces switched off (``kernel.unprivileged_userns_clone`` or
``user.max_user_namespaces``), a container that refuses ``mount``. The answer comes
from starting a real, empty sandbox, not from reading settings.
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["Support", "sandbox_support"]

_CAP_SETGID, _CAP_SETUID, _CAP_SYS_ADMIN = 6, 7, 21


@dataclass(frozen=True)
class Support:
    """What :func:`sandbox_support` found."""

    available: bool
    mode: str = ""
    """``privileged`` or ``userns`` (:mod:`nbcast.sandbox.launcher`)."""
    reason: str = ""
    """Why not, in one line, when not available."""
    bwrap: str = ""


def _effective_caps() -> int:
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("CapEff:"):
                    return int(line.split()[1], 16)
    except (OSError, ValueError):
        pass
    return 0


def _privileged() -> bool:
    if os.geteuid() == 0:
        return True
    caps = _effective_caps()
    return all(caps & (1 << c) for c in (_CAP_SYS_ADMIN, _CAP_SETUID, _CAP_SETGID))


@functools.lru_cache(maxsize=1)
def sandbox_support() -> Support:
    """Whether (and how) kernels can be sandboxed here; cached for the process."""
    if not sys.platform.startswith("linux"):
        return Support(False, reason=f"sandboxes need Linux namespaces ({sys.platform})")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Support(False, reason="bubblewrap is not installed (apt-get install bubblewrap)")
    mode = "privileged" if _privileged() else "userns"
    trial = [bwrap, "--unshare-pid", "--unshare-ipc", "--unshare-uts"]
    if mode == "userns":
        trial.append("--unshare-user")
    trial += ["--ro-bind", "/usr", "/usr", "--proc", "/proc", "--dev", "/dev"]
    for link in ("/bin", "/lib", "/lib64"):
        if os.path.islink(link):
            trial += ["--symlink", os.readlink(link), link]
        elif os.path.isdir(link):
            trial += ["--ro-bind", link, link]
    trial += ["--", "/bin/true"]
    try:
        result = subprocess.run(
            trial, capture_output=True, timeout=30, env={"PATH": "/usr/bin:/bin"}, check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Support(False, mode=mode, reason=f"bubblewrap did not run: {exc}", bwrap=bwrap)
    if result.returncode != 0:
        said = " ".join(result.stderr.decode(errors="replace").split())[:200]
        return Support(
            False,
            mode=mode,
            reason=f"bubblewrap cannot build a sandbox here: {said or result.returncode}",
            bwrap=bwrap,
        )
    return Support(True, mode=mode, bwrap=bwrap)
