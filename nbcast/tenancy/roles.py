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

**Who people are.** A person is an identity with a source (:mod:`nbcast.access`):
``ada`` is the OS user ada — the command line's ``NBCAST_USER`` (default: the login
name), and the holder of a server's own token, which is its owner's credential;
``jupyter:alice`` is the user alice whom jupyter-server's identity provider
authenticated. The ``users`` and ``operators`` rows hold identities, so a role given
to ``root`` on the command line is not held by a jupyter-server user called ``root``.

**How people get a role.**

- The first **OS** user to act on a fresh home (no operator yet) becomes its first
  **operator** and the admin of the tenant they act in. ``nbcast serve`` and a server
  extension make the server's owner (``NBCAST_USER`` or the login name) the first
  operator when they open the database (:func:`seed_operators`), so no web request
  can. A jupyter-server user never becomes an operator by being first;
  ``NbcastApp.admin_users`` names the jupyter-server users who are.
- A tenant with no members yet is **claimed** by the first person who acts in it (of
  either source): they become its admin. ``nbcast tenants create NAME --admin USER``
  names the admin at once, so nobody else can claim it. The default tenant of a fresh
  home goes to its first command-line user; on a fresh server it stays open to its
  first person, as it always was — under JupyterHub, the single-user server's own
  user, who is thus an admin there (not an operator). A caller whose tenant does not
  exist (a ``tenant_map`` entry naming a tenant nobody created) is refused: nothing is
  created or claimed for them. Claims and grants are audited.
- Admins add members and change roles (``nbcast users add|grant|revoke|list``, a
  jupyter-server user written ``jupyter:NAME``); a tenant always keeps one admin.
- What belongs to the installation rather than to a tenant — the services' health,
  the embedded services, the metrics, a schedule preview, the status pages — is for
  operators and for people with a role in an existing tenant
  (:func:`require_role_or_operator`); an authenticated user with none sees nothing.

What this protects depends on the face. Through the server it is a boundary: the
identity comes from jupyter-server's authentication. On the command line the user is
``NBCAST_USER`` (default: the login name) and whoever can run ``nbcast`` on a home can
also open its database, so roles there guard against mistakes and keep the audit
trail honest, not against the home's own OS user. That is why an OS identity is never
a jupyter-server user's (``NBCAST_USER`` cannot begin ``jupyter:``): the server's
identities are the ones its authentication vouches for, and what is granted to them
is granted to nobody else.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Source, identity, source_of
from nbcast.errors import AccessDeniedError
from nbcast.limits import clip
from nbcast.tenancy import audit
from nbcast.tenancy.models import Operator, Tenant, User

__all__ = [
    "Membership",
    "Role",
    "bootstrap",
    "is_operator",
    "member",
    "readable_tenant",
    "require",
    "require_operator",
    "require_role_or_operator",
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
    """Their identity (:class:`~nbcast.access.Caller`)."""
    role: Role
    operator: bool

    def may(self, needed: Role) -> bool:
        """Whether this member holds ``needed`` (an operator holds every role)."""
        return self.operator or self.role.rank >= needed.rank


def _tenant(session: Session, caller: Caller, *, lock: bool) -> Tenant:
    """The caller's tenant; refused (never created) when it does not exist."""
    query = sa.select(Tenant).where(Tenant.name == caller.tenant)
    if lock and session.get_bind().dialect.name == "postgresql":
        query = query.with_for_update()
    tenant = session.scalar(query)
    if tenant is None:
        raise AccessDeniedError(
            f"no tenant {clip(caller.tenant)} (where {clip(caller.user)} acts); an operator "
            f"creates it with: nbcast tenants create {clip(caller.tenant)}"
        )
    return tenant


def _row(session: Session, tenant: Tenant, user: str) -> User | None:
    return session.scalar(sa.select(User).where(User.tenant_id == tenant.id, User.name == user))


def is_operator(session: Session, user: str) -> bool:
    """Whether the identity ``user`` operates the installation."""
    return session.get(Operator, user) is not None


def bootstrap(session: Session, user: str, tenant: Tenant, now: datetime) -> bool:
    """Make ``user`` the first operator when the home has no operator yet and ``user``
    is an OS identity (a jupyter-server user never is the first: module docstring);
    True if it did. The caller makes them the admin of ``tenant`` too."""
    if source_of(user) is not Source.os:
        return False
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


def _make_admin(session: Session, tenant: Tenant, user: str, now: datetime, how: str) -> None:
    """``user`` becomes an admin of ``tenant`` (where they hold no row), audited."""
    session.add(
        User(tenant_id=tenant.id, name=user, role=Role.admin, added_by=user, created_at=now)
    )
    session.flush()
    audit.record(
        session,
        tenant.id,
        actor=user,
        action=audit.Action.role_granted,
        obj=f"user:{user}",
        at=now,
        details={"role": Role.admin.value, "how": how},
    )


def _members(session: Session, tenant: Tenant) -> int:
    return int(
        session.scalar(
            sa.select(sa.func.count()).select_from(User).where(User.tenant_id == tenant.id)
        )
        or 0
    )


def member(session: Session, caller: Caller, now: datetime | None = None) -> Membership:
    """The caller's membership of their tenant (claiming a tenant without members,
    bootstrapping a fresh home: module docstring); :class:`AccessDeniedError` when
    their tenant does not exist, or they hold no role there and operate nothing.
    ``now`` stamps a claim's audit entry (default: the real clock)."""
    now = now or datetime.now(UTC)
    tenant = _tenant(session, caller, lock=False)
    row = _row(session, tenant, caller.user)
    operator = is_operator(session, caller.user)
    if row is not None:
        return Membership(tenant=tenant, user=caller.user, role=Role(row.role), operator=operator)
    if not operator:
        # Serialize the claim of an empty tenant (two first users at once).
        tenant = _tenant(session, caller, lock=True)
        operator = bootstrap(session, caller.user, tenant, now)
    members = _members(session, tenant)
    if operator and members:
        return Membership(tenant=tenant, user=caller.user, role=Role.admin, operator=True)
    if members:
        raise AccessDeniedError(
            f"{clip(caller.user)} has no role in tenant {tenant.name}; an admin adds them "
            f"with: nbcast --tenant {tenant.name} users add {clip(caller.user)} --role viewer"
        )
    _make_admin(session, tenant, caller.user, now, "claimed: the tenant's first member")
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
    """Nothing, if the caller operates the installation (a fresh home's first OS user
    becomes its operator here, and an admin of their tenant);
    :class:`AccessDeniedError` otherwise."""
    now = now or datetime.now(UTC)
    if is_operator(session, caller.user):
        return
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == caller.tenant))
    if tenant is not None and bootstrap(session, caller.user, tenant, now):
        if _row(session, tenant, caller.user) is None:
            _make_admin(session, tenant, caller.user, now, "the first user of a fresh home")
        return
    raise AccessDeniedError(f"{clip(caller.user)} is not an operator; {doing} is for operators")


def require_role_or_operator(
    session: Session, caller: Caller, doing: str, now: datetime | None = None
) -> None:
    """Nothing, if the caller operates the installation or holds a role (any) in
    their tenant, which must exist; :class:`AccessDeniedError` otherwise.

    The check of what belongs to the installation rather than to a tenant (the
    services' health, the embedded services, metrics, a schedule preview, the status
    pages): an authenticated user without a role sees none of it. An operator passes
    wherever they are mapped (their tenant need not exist); anyone else goes through
    :func:`member`, so a tenant without members is claimed here as by any other act,
    and a tenant that does not exist is refused without being created."""
    if is_operator(session, caller.user):
        return
    require(session, caller, Role.viewer, doing, now)


def readable_tenant(session: Session, caller: Caller) -> Tenant:
    """The caller's tenant, if they may read it (any role): what every query of the
    command layer scopes itself to."""
    return require(session, caller, Role.viewer, "reading the tenant's reports").tenant


def seed_operators(
    session: Session, owner: str, configured: frozenset[str], tenant: str, now: datetime
) -> None:
    """A server's start: its ``owner`` (an OS user: the server's ``NBCAST_USER``)
    becomes the first operator of a fresh home, so the first web request cannot; every
    jupyter-server user named in ``configured`` (``NbcastApp.admin_users``) is made an
    operator as ``jupyter:<name>``, each audited in ``tenant``. No membership is made:
    ``tenant`` stays open to its first person (module docstring).
    :class:`~nbcast.errors.ConfigError` for a configured name that is too long."""
    identities = sorted(identity(Source.jupyter, name) for name in configured)
    owner_tenant = session.scalar(sa.select(Tenant).where(Tenant.name == tenant))
    if owner_tenant is None:
        return
    bootstrap(session, owner, owner_tenant, now)
    for name in identities:
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
