"""Who may do what: roles per tenant, operators of the installation, one check.

Every person acts in one tenant with one **role**:

- ``viewer`` — reads definitions, versions and diffs, runs, artifacts, deliveries,
  links, costs, SLA misses;
- ``author`` — also publishes, pauses and resumes, runs now, backfills, cancels and
  reruns, retries deliveries, revokes links and unsubscribes recipients;
- ``admin`` — also adds people and changes their roles, sets the tenant's quotas,
  budgets and retention, reads and exports its audit trail and applies retention.

**Operators** run the installation: they create tenants, list them all, and act as
an admin in every tenant. Recipients need no account: a signed link or an
unsubscribe token is its own authority.

**The check is here, once.** Every command and query of the command layer calls
:func:`require` with the role it needs before it reads or writes anything of the
tenant; the CLI, the REST API, the status pages and the JupyterLab extension (through
the API) are faces over those functions, so none can skip it. A refusal is an
:class:`~nbcast.errors.AccessDeniedError` (exit 2 on the CLI, 403 on the API) and the
transaction writes nothing.

**How people get a role.**

- The first person to act on a fresh home (no operator yet) becomes its first
  **operator**, and the admin of the tenant they act in: ``nbcast serve`` and a
  server extension make the server's owner (``NBCAST_USER`` or the login name) that
  person when they start, so the first web request cannot.
- A tenant with no members yet is **claimed** by the first person who acts in it:
  they become its admin. ``nbcast tenants create NAME --admin USER`` names the admin
  at once, so nobody else can claim it; the default tenant is claimed by the home's
  first user. Claims and grants are audited.
- Admins add members and change roles (``nbcast users add|grant|revoke|list``);
  a tenant always keeps one admin.

What this protects depends on the face. Through the server it is a boundary: the
identity comes from jupyter-server's authentication. On the command line the user is
``NBCAST_USER`` (default: the login name) and whoever can run ``nbcast`` on a home can
also open its database, so roles there guard against mistakes and keep the audit
trail honest, not against the home's own OS user.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.errors import AccessDeniedError, ConfigError
from nbcast.governance import audit
from nbcast.governance.models import Operator, Tenant, User
from nbcast.limits import clip

__all__ = [
    "Membership",
    "Role",
    "bootstrap",
    "is_operator",
    "member",
    "readable_tenant",
    "require",
    "require_operator",
    "seed_operators",
]


class Role(StrEnum):
    """A person's role in a tenant (module docstring); each includes the ones below."""

    viewer = "viewer"
    """Reads everything of the tenant."""
    author = "author"
    """Publishes and schedules reports, runs, cancels, retries."""
    admin = "admin"
    """Manages the tenant's members, quotas, budgets, retention and audit trail."""

    @property
    def rank(self) -> int:
        """Viewer 1, author 2, admin 3."""
        return _RANK[self]


_RANK = {Role.viewer: 1, Role.author: 2, Role.admin: 3}


@dataclass(frozen=True, kw_only=True)
class Membership:
    """A caller as the command layer knows them: their tenant and their role there."""

    tenant: Tenant
    user: str
    role: Role
    operator: bool

    def may(self, needed: Role) -> bool:
        """Whether this member holds ``needed`` (an operator holds every role)."""
        return self.operator or self.role.rank >= needed.rank


def _tenant(session: Session, name: str, *, lock: bool) -> Tenant:
    query = sa.select(Tenant).where(Tenant.name == name)
    if lock and session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    tenant = session.scalar(query)
    if tenant is None:
        raise ConfigError(f"no tenant {clip(name)}")
    return tenant


def is_operator(session: Session, user: str) -> bool:
    """Whether ``user`` operates the installation."""
    return session.get(Operator, user) is not None


def bootstrap(session: Session, user: str, tenant: Tenant, now: datetime) -> bool:
    """Make ``user`` the first operator (and admin of ``tenant``) when the home has no
    operator yet; True if it did."""
    if session.scalar(sa.select(sa.func.count()).select_from(Operator)):
        return False
    session.add(Operator(name=user, granted_at=now, granted_by=user))
    audit.record(
        session,
        tenant.id,
        actor=user,
        action=audit.Action.operator_granted,
        obj=f"user:{user}",
        at=now,
        details={"how": "the first user of a fresh home"},
    )
    return True


def member(session: Session, caller: Caller, now: datetime | None = None) -> Membership:
    """The caller's membership of their tenant (claiming a tenant without members,
    bootstrapping a fresh home: module docstring); :class:`AccessDeniedError` when they
    hold no role there and operate nothing. ``now`` stamps a claim's audit entry
    (default: the real clock)."""
    now = now or datetime.now(UTC)
    tenant = _tenant(session, caller.tenant, lock=False)
    row = session.scalar(
        sa.select(User).where(User.tenant_id == tenant.id, User.name == caller.user)
    )
    operator = is_operator(session, caller.user)
    if row is not None:
        return Membership(tenant=tenant, user=caller.user, role=Role(row.role), operator=operator)
    if not operator:
        # Serialize the claim of an empty tenant (two first users at once).
        tenant = _tenant(session, caller.tenant, lock=True)
        operator = bootstrap(session, caller.user, tenant, now)
    members = session.scalar(
        sa.select(sa.func.count()).select_from(User).where(User.tenant_id == tenant.id)
    )
    if operator and members:
        return Membership(tenant=tenant, user=caller.user, role=Role.admin, operator=True)
    if members:
        raise AccessDeniedError(
            f"{clip(caller.user)} has no role in tenant {tenant.name}; an admin adds them "
            f"with: nbcast --tenant {tenant.name} users add {clip(caller.user)} --role viewer"
        )
    session.add(
        User(
            tenant_id=tenant.id,
            name=caller.user,
            role=Role.admin,
            added_by=caller.user,
            created_at=now,
        )
    )
    session.flush()
    audit.record(
        session,
        tenant.id,
        actor=caller.user,
        action=audit.Action.role_granted,
        obj=f"user:{caller.user}",
        at=now,
        details={"role": Role.admin.value, "how": "claimed: the tenant's first member"},
    )
    return Membership(tenant=tenant, user=caller.user, role=Role.admin, operator=operator)


def require(
    session: Session, caller: Caller, needed: Role, doing: str, now: datetime | None = None
) -> Membership:
    """The caller's membership, if it holds ``needed``; otherwise
    :class:`AccessDeniedError` saying what ``doing`` needs."""
    membership = member(session, caller, now)
    if not membership.may(needed):
        raise AccessDeniedError(
            f"{clip(caller.user)} is a {membership.role.value} in tenant "
            f"{membership.tenant.name}; {doing} needs the {needed.value} role"
        )
    return membership


def require_operator(
    session: Session, caller: Caller, doing: str, now: datetime | None = None
) -> None:
    """Nothing, if the caller operates the installation (a fresh home's first user
    becomes its operator here); :class:`AccessDeniedError` otherwise."""
    now = now or datetime.now(UTC)
    if is_operator(session, caller.user):
        return
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == caller.tenant))
    if tenant is not None and bootstrap(session, caller.user, tenant, now):
        if not session.scalar(
            sa.select(User).where(User.tenant_id == tenant.id, User.name == caller.user)
        ):
            session.add(
                User(
                    tenant_id=tenant.id,
                    name=caller.user,
                    role=Role.admin,
                    added_by=caller.user,
                    created_at=now,
                )
            )
        return
    raise AccessDeniedError(f"{clip(caller.user)} is not an operator; {doing} is for operators")


def readable_tenant(session: Session, caller: Caller) -> Tenant:
    """The caller's tenant, if they may read it (any role): what every query of the
    command layer scopes itself to."""
    return require(session, caller, Role.viewer, "reading the tenant's reports").tenant


def seed_operators(
    session: Session, owner: str, configured: frozenset[str], tenant: str, now: datetime
) -> None:
    """A server's start: its ``owner`` becomes the first operator of a fresh home (so
    the first web request cannot), and every name in ``configured``
    (``NbcastApp.admin_users``) is made an operator, each audited in ``tenant``."""
    owner_tenant = session.scalar(sa.select(Tenant).where(Tenant.name == tenant))
    if owner_tenant is None:
        return
    bootstrap(session, owner, owner_tenant, now)
    for name in sorted(configured):
        if session.get(Operator, name) is None:
            session.add(Operator(name=name, granted_at=now, granted_by="configuration"))
            audit.record(
                session,
                owner_tenant.id,
                actor=owner,
                action=audit.Action.operator_granted,
                obj=f"user:{name}",
                at=now,
                details={"how": "NbcastApp.admin_users"},
            )
