"""Whether this machine can sandbox kernels, and how (:func:`sandbox_support`).

Asked once per process, by a worker at start (and by a Ray task the first time it
runs an attempt). The answer is a :class:`Support`: ``available`` with the mode — the
launcher's ``privileged`` (the worker runs as root: kernels get the tenant's real uid)
or ``userns`` (any other user, with user namespaces) — or the one-line reason it is
not: bubblewrap missing, not Linux, user namespaces switched off
(``kernel.unprivileged_userns_clone`` or ``user.max_user_namespaces``), a container
that refuses ``mount``. The answer comes from starting a real, empty sandbox, not from
reading settings. ``NBCAST_BWRAP`` names
the bubblewrap to use (default: ``bwrap`` on ``PATH``).
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass

__all__ = ["Support", "sandbox_support"]


@dataclass(frozen=True)
class Support:
    """What :func:`sandbox_support` found."""

    available: bool
    mode: str = ""
    """``privileged`` or ``userns`` (:mod:`nbcast.sandbox.launcher`)."""
    reason: str = ""
    """Why not, in one line, when not available."""
    bwrap: str = ""


def _privileged() -> bool:
    # Root alone: bubblewrap run by another user makes a user namespace whatever
    # capabilities that user holds.
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def sandbox_support() -> Support:
    """Whether (and how) kernels can be sandboxed here; cached for the process."""
    if not sys.platform.startswith("linux"):
        return Support(False, reason=f"sandboxes need Linux namespaces ({sys.platform})")
    chosen = os.environ.get("NBCAST_BWRAP", "").strip()
    bwrap = shutil.which(chosen) if chosen else shutil.which("bwrap")
    if bwrap is None:
        if chosen:
            return Support(False, reason=f"NBCAST_BWRAP={chosen[:100]} is not an executable")
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
