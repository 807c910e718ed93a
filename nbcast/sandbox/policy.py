"""What one attempt's sandbox is: the tenant's identity, network and limits
(:class:`SandboxSpec`), and the installation's switch (:class:`SandboxSetting`).

A spec is plain data: the worker makes one per attempt from the claimed run (its
tenant's row and quota), it travels with the job to whichever engine runs it (a Ray
task too), and the kernel pool keeps pre-started kernels per spec, since a kernel's
sandbox is built before the run that will use it is known.

**One identity per tenant.** A tenant's kernels run as user and group
``uid_base + tenant id`` (:func:`tenant_identity`; ``NBCAST_SANDBOX_UID_BASE``,
default :data:`DEFAULT_UID_BASE`): a number no account on the machine has, never the
services' own. Two nbcast installations on one machine need different bases.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from nbcast.errors import ConfigError

__all__ = [
    "DEFAULT_PROCESSES",
    "DEFAULT_UID_BASE",
    "MAX_TENANT_ID",
    "Network",
    "SandboxSetting",
    "SandboxSpec",
    "SandboxTemplate",
    "sandbox_setting",
    "tenant_identity",
    "uid_base",
]

DEFAULT_UID_BASE = 1_500_000_000
"""The first sandbox uid: tenant 1's kernels run as 1,500,000,001."""
MAX_TENANT_ID = 100_000_000
"""Tenant ids above this have no sandbox identity (the uid range would overflow)."""
DEFAULT_PROCESSES = 256
"""Processes and threads one attempt may have at once, unless its tenant says otherwise."""
_MAX_UID = 4_294_967_294  # (uid_t)-1 is "no change" to setresuid


class Network(StrEnum):
    """What a tenant's kernels reach over the network."""

    host = "host"
    """The machine's network: what the worker's host reaches (the default). Services on
    loopback are reachable too, so they must ask for credentials (the README)."""
    none = "none"
    """A network namespace of its own with loopback only: no connection leaves the
    sandbox. A warehouse is then reached through a unix socket bound into it."""


class SandboxSetting(StrEnum):
    """``NBCAST_SANDBOX`` / ``nbcast worker --sandbox``."""

    on = "on"
    """Every attempt runs in a sandbox (the default)."""
    off = "off"
    """Kernels run as the worker's own user, seeing what it sees: only for trusted
    tenants; the worker warns in its log and on the status page."""


def sandbox_setting(environ: Mapping[str, str] | None = None) -> SandboxSetting:
    """The installation's setting, ``NBCAST_SANDBOX`` (default ``on``)."""
    env = os.environ if environ is None else environ
    raw = (env.get("NBCAST_SANDBOX") or "on").strip().lower()
    try:
        return SandboxSetting(raw)
    except ValueError:
        raise ConfigError(f"NBCAST_SANDBOX must be on or off, not {raw[:20]!r}") from None


def uid_base(environ: Mapping[str, str] | None = None) -> int:
    """``NBCAST_SANDBOX_UID_BASE``, checked (module docstring)."""
    env = os.environ if environ is None else environ
    raw = (env.get("NBCAST_SANDBOX_UID_BASE") or "").strip()
    if not raw:
        return DEFAULT_UID_BASE
    if not raw.isascii() or not raw.isdigit():
        raise ConfigError("NBCAST_SANDBOX_UID_BASE must be a whole number")
    base = int(raw[:12])
    if not 1000 <= base <= _MAX_UID - MAX_TENANT_ID:
        raise ConfigError(
            f"NBCAST_SANDBOX_UID_BASE must be from 1,000 to {_MAX_UID - MAX_TENANT_ID:,}"
        )
    return base


def tenant_identity(tenant_id: int, base: int | None = None) -> int:
    """The uid (and gid) of tenant ``tenant_id``'s kernels."""
    if not 1 <= tenant_id <= MAX_TENANT_ID:
        raise ConfigError(f"tenant id {tenant_id} has no sandbox identity")
    return (uid_base() if base is None else base) + tenant_id


@dataclass(frozen=True, kw_only=True)
class SandboxSpec:
    """One attempt's sandbox; equal specs can share pre-started kernels.

    ``readonly`` are host paths the kernel sees read-only at the same place (the
    tenant's lake scope: Parquet folders, DuckDB files, unix-socket folders of its
    warehouse). ``memory_mb`` bounds each of its processes' data (``RLIMIT_DATA``) and,
    where cgroups can be used, the attempt as a whole; ``processes`` bounds its
    processes and threads. ``concurrency`` is the tenant's ``max_concurrent_runs``:
    without cgroups, the tenant's uid may have ``processes * (concurrency + 1)``
    processes on a machine.
    """

    tenant: str
    uid: int
    gid: int
    network: Network = Network.host
    memory_mb: int = 2048
    processes: int = DEFAULT_PROCESSES
    concurrency: int = 4
    readonly: tuple[str, ...] = field(default=())
    hidden: tuple[str, ...] = field(default=())
    """Paths kept hidden even under a folder the sandbox shows (the worker's home, run
    folders, artifact store and secret files: :func:`nbcast.sandbox.view.hidden_paths`)."""

    def __post_init__(self) -> None:
        if not 1 <= self.uid <= _MAX_UID or not 1 <= self.gid <= _MAX_UID:
            raise ConfigError("a sandbox needs an unprivileged uid and gid")
        if self.memory_mb < 64 or self.processes < 16 or self.concurrency < 1:
            raise ConfigError("a sandbox needs at least 64 MB, 16 processes and 1 run")
        for path in (*self.readonly, *self.hidden):
            if not os.path.isabs(path) or "\x00" in path:
                raise ConfigError(f"sandbox path {path[:80]!r} is not an absolute path")


@dataclass(frozen=True, kw_only=True)
class SandboxTemplate:
    """What every sandbox of one worker shares: the paths it hides and its uid base.
    :meth:`spec` completes it with one tenant's settings."""

    hidden: tuple[str, ...] = ()
    uid_base: int = DEFAULT_UID_BASE

    def spec(
        self,
        *,
        tenant: str,
        tenant_id: int,
        network: str,
        memory_mb: int,
        processes: int,
        concurrency: int,
    ) -> SandboxSpec:
        """The sandbox of one attempt of ``tenant`` (``ConfigError`` for settings no
        sandbox can have: the run fails alone, with that error)."""
        try:
            mode = Network(network)
        except ValueError:
            raise ConfigError(
                f"tenant {tenant}: network {network[:20]!r} is not host or none"
            ) from None
        identity = tenant_identity(tenant_id, self.uid_base)
        return SandboxSpec(
            tenant=tenant,
            uid=identity,
            gid=identity,
            network=mode,
            memory_mb=memory_mb,
            processes=processes,
            concurrency=concurrency,
            hidden=self.hidden,
        )


def default_template(
    *,
    work_dir: str,
    artifacts: str,
    home: str | None = None,
    database_file: str | None = None,
    environ: Mapping[str, str] | None = None,
) -> SandboxTemplate:
    """The template of a worker that keeps its run folders in ``work_dir`` and its
    artifacts in ``artifacts``: those, the home (``NBCAST_HOME``, default
    ``~/.nbcast``), the database file and the secret files are hidden
    (:func:`nbcast.sandbox.view.hidden_paths`)."""
    from nbcast.sandbox.view import hidden_paths

    env = os.environ if environ is None else environ
    home = home or env.get("NBCAST_HOME") or os.path.expanduser("~/.nbcast")
    # Made now if missing: a folder that appears under a shown one after a sandbox was
    # built would not be covered in it (the artifact store is made at its first write).
    for folder in (home, work_dir, artifacts):
        if "://" not in folder:
            with contextlib.suppress(OSError):
                os.makedirs(folder, mode=0o700, exist_ok=True)
    extra = [work_dir, artifacts]
    if database_file:
        extra.append(database_file)
    hidden = hidden_paths(home=home, extra=extra, environ=env)
    return SandboxTemplate(hidden=tuple(hidden), uid_base=uid_base(env))
