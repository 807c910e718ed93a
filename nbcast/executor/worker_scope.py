"""Which tenants a worker serves, and whether their kernels run in sandboxes.

``nbcast worker`` decides both once, at start (:func:`worker_scope`):

- ``--tenant T[,T2]`` makes a **dedicated worker**: it claims only those tenants'
  runs (each must exist). Without it the worker claims every tenant's.
- ``--sandbox on`` (the default, ``NBCAST_SANDBOX``) sandboxes every attempt. When
  this machine cannot (:func:`nbcast.sandbox.support.sandbox_support` says why — no
  bubblewrap, no namespaces), the worker says so in one line and serves only the
  tenants where its own user (``NBCAST_USER``, the OS user by default) is an admin:
  an operator may run their own tenants' code as themselves, never another tenant's.
  If there are none, it refuses to start.
- ``--sandbox off`` runs every claimed tenant's kernels as the worker's own user.
  The worker logs a warning, and its heartbeat says ``sandbox: off``, which the status
  page shows as a warning for as long as the worker runs.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass

import sqlalchemy as sa

from nbcast.db import Database
from nbcast.errors import ConfigError
from nbcast.limits import clip
from nbcast.sandbox.policy import SandboxSetting, SandboxTemplate, default_template
from nbcast.sandbox.support import sandbox_support
from nbcast.tenancy.models import Tenant, User

__all__ = ["WorkerScope", "worker_scope"]

log = logging.getLogger("nbcast.worker")


@dataclass(frozen=True)
class WorkerScope:
    """What :func:`worker_scope` decided."""

    sandbox: SandboxTemplate | None
    """What every attempt's sandbox shares; None: no sandbox."""
    tenants: list[int] | None
    """Ids of the tenants the worker claims for; None: every tenant."""
    notice: str = ""
    """The line the worker prints at start when the sandbox is not what was asked."""


def _tenant_ids(db: Database, names: Sequence[str]) -> list[int]:
    with db.session() as session:
        found = dict(
            session.execute(sa.select(Tenant.name, Tenant.id).where(Tenant.name.in_(names)))
            .tuples()
            .all()
        )
    missing = [name for name in names if name not in found]
    if missing:
        raise ConfigError(f"--tenant: no tenant {clip(missing[0])}")
    return sorted(found.values())


def _admin_tenants(db: Database, user: str) -> list[int]:
    with db.session() as session:
        return sorted(
            session.scalars(
                sa.select(User.tenant_id).where(User.name == user, User.role == "admin")
            )
        )


def worker_scope(
    db: Database,
    *,
    setting: SandboxSetting,
    user: str,
    tenants: Sequence[str] = (),
    work_dir: str,
    artifacts: str,
    home: str,
    database_file: str | None = None,
) -> WorkerScope:
    """Decide the worker's tenants and sandbox (module docstring); ``ConfigError`` when
    it has nothing it may run."""
    chosen = _tenant_ids(db, tenants) if tenants else None
    if setting is SandboxSetting.off:
        log.warning(
            "the sandbox is OFF (--sandbox off): reports run as this worker's OS user and "
            "can read what it can read; use it only for tenants that trust each other"
        )
        return WorkerScope(None, chosen)
    support = sandbox_support()
    if support.available and support.mode == "userns" and set(os.getgroups()) - {os.getgid()}:
        log.warning(
            "this worker's user has supplementary groups (%s): in a user namespace its "
            "reports keep them outside, and may read what those groups may read; run the "
            "worker as a user without them, or as root",
            ", ".join(map(str, sorted(os.getgroups()))),
        )
    if support.available:
        template = default_template(
            work_dir=work_dir, artifacts=artifacts, home=home, database_file=database_file
        )
        return WorkerScope(template, chosen)
    own = _admin_tenants(db, user)
    allowed = own if chosen is None else [t for t in chosen if t in own]
    if not allowed:
        raise ConfigError(
            f"this machine cannot sandbox reports ({support.reason}) and {clip(user)} is an "
            "admin of none of the tenants to serve; give --sandbox off to run them unsandboxed"
        )
    notice = (
        f"cannot sandbox reports here ({support.reason}): running only the tenants "
        f"{clip(user)} administers; --sandbox off runs every tenant unsandboxed"
    )
    log.warning("%s", notice)
    return WorkerScope(None, allowed, notice)
