"""Where nbcast's credentials come from, and how a service keeps them to itself.

**From a file or the environment** (:func:`credential`). Each secret nbcast reads —
:data:`SECRET_VARIABLES`: the database URL, the SMTP URL, the Slack token, the webhook
secret, the link-signing keys, the warehouse admin URL — may be given as the variable
itself or as ``<NAME>_FILE``, the path of a file that holds it (systemd's
``LoadCredential=``, a Kubernetes secret volume, Docker secrets). A variable is
readable by every process of the same user through ``/proc/<pid>/environ``; a file
is readable by whoever its mode allows, so one is accepted only if it is a regular
file (not a link), owned by this user or root, and readable by its owner alone
(``0600`` or ``0400``); at most 64 KiB; one trailing newline is dropped. Giving both
forms of one secret is an error, as is a file that breaks these rules: one line,
naming the variable, never the secret.

**Undumpable services** (:func:`protect_process`). The scheduler, the workers, the
delivery workers and the server set ``PR_SET_DUMPABLE`` to 0 when they start: a
process of the same user — a report's kernel in a worker run with ``--sandbox off``,
say — can then read neither their ``/proc/<pid>/environ`` nor their memory, and
cannot attach a debugger. Children that ``exec`` (kernels, Ray, bubblewrap) are
dumpable again, as ``execve`` makes them.
"""

from __future__ import annotations

import ctypes
import logging
import os
import stat
from collections.abc import Mapping

from nbcast.errors import ConfigError

__all__ = [
    "MAX_SECRET_FILE_BYTES",
    "SECRET_VARIABLES",
    "credential",
    "protect_process",
    "read_secret_file",
]

log = logging.getLogger(__name__)

SECRET_VARIABLES = (
    "NBCAST_DATABASE_URL",
    "NBCAST_DATABASE_OWNER_URL",
    "NBCAST_SMTP_URL",
    "NBCAST_SLACK_TOKEN",
    "NBCAST_WEBHOOK_SECRET",
    "NBCAST_SIGNING_KEYS",
    "NBCAST_WAREHOUSE_ADMIN_URL",
    "NBCAST_AUDIT_KEY",
)
"""The variables that may come from ``<NAME>_FILE`` instead (module docstring)."""

MAX_SECRET_FILE_BYTES = 64 * 1024
_PR_SET_DUMPABLE = 4


def read_secret_file(variable: str, path: str) -> str:
    """The secret in ``path`` (``variable`` names it in messages), checked as the module
    docstring says."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise ConfigError(f"{variable}: cannot open {path[:200]!r}: {exc.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise ConfigError(f"{variable}: {path[:200]!r} is not a regular file")
        if info.st_uid not in (os.geteuid(), 0):
            raise ConfigError(f"{variable}: {path[:200]!r} belongs to another user")
        if stat.S_IMODE(info.st_mode) & 0o077:
            raise ConfigError(
                f"{variable}: {path[:200]!r} is readable by others "
                f"(mode {stat.S_IMODE(info.st_mode):o}); make it 600"
            )
        if info.st_size > MAX_SECRET_FILE_BYTES:
            raise ConfigError(f"{variable}: {path[:200]!r} is larger than 64 KiB")
        data = os.read(fd, MAX_SECRET_FILE_BYTES + 1)
    finally:
        os.close(fd)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ConfigError(f"{variable}: {path[:200]!r} is not UTF-8 text") from None
    return text[:-1] if text.endswith("\n") else text


def credential(name: str, environ: Mapping[str, str] | None = None) -> str | None:
    """The secret ``name`` from ``name`` or ``name_FILE`` (module docstring); None
    when neither is set (or set empty)."""
    env = os.environ if environ is None else environ
    direct = env.get(name) or None
    path = env.get(f"{name}_FILE") or None
    if direct is not None and path is not None:
        raise ConfigError(f"{name} and {name}_FILE are both set; give one")
    if path is None:
        return direct
    return read_secret_file(f"{name}_FILE", path) or None


def protect_process() -> bool:
    """Make this process undumpable (module docstring); False where it cannot be."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        ok = bool(libc.prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0) == 0)
    except (OSError, AttributeError):
        ok = False
    if not ok:
        log.warning("could not make this process undumpable (PR_SET_DUMPABLE)")
    return ok
