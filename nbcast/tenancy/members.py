"""The members of a tenant and the operators of the installation: the commands behind
``nbcast users``, each audited in its own transaction.

An admin of the tenant (or an operator) adds a member with a role, changes a member's
role, or removes them; anyone in the tenant lists its members. A tenant always keeps
one admin: removing or demoting the last one is refused. Operators grant and revoke
the operator role; the last operator cannot be revoked.

People are named by identity (:mod:`nbcast.access`): ``ada`` is the OS user ada, who
acts through the command line; ``jupyter:alice`` is the jupyter-server user alice, who
acts through the server. ``nbcast users add alice`` therefore gives the *command
line's* alice a role; the colleague who signs in to the server as alice is added as
``jupyter:alice``. The two are different people to every check, whatever their names.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import datetime

import sqlalchemy as sa

from nbcast.access import JUPYTER_PREFIX, MAX_JUPYTER_NAME, Caller, source_of
from nbcast.clock import Clock, format_instant
from nbcast.db import Database
from nbcast.errors import ConfigError, ConflictError, NotFoundError
from nbcast.limits import clip
from nbcast.tenancy import audit
from nbcast.tenancy.models import Operator, User
from nbcast.tenancy.roles import Role, is_operator, require, require_operator

__all__ = [
    "MemberRecord",
    "add_member",
    "grant_operator",
    "list_members",
    "remove_member",
    "revoke_operator",
    "set_role",
]

_UNPRINTABLE = r"\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff"
"""Control characters (C0, DEL, C1: a terminal escape), the bidirectional overrides
and isolates (a name that prints reversed) and lone surrogates (not storable)."""

USER_NAME = re.compile(
    f"{JUPYTER_PREFIX}[^{_UNPRINTABLE}]{{1,{MAX_JUPYTER_NAME}}}"
    f"|(?!{JUPYTER_PREFIX})[^{_UNPRINTABLE}]{{1,128}}"
)
"""An identity as people type it: an OS user's name (1 to 128 printable characters,
not beginning ``jupyter:``) or ``jupyter:`` and a jupyter-server user's name (1 to
120)."""

EMAIL = re.compile(f"[^@\\s{_UNPRINTABLE}]{{1,64}}@[^@\\s{_UNPRINTABLE}]{{1,255}}")
"""An email address as far as nbcast checks it: a local part, ``@``, a domain, none
with spaces or unprintable characters."""


@dataclass(frozen=True, kw_only=True)
class MemberRecord:
    """A member of a tenant."""

    tenant: str
    name: str
    """Their identity: ``ada`` (an OS user) or ``jupyter:alice`` (:mod:`nbcast.access`)."""
    role: str
    email: str | None
    operator: bool
    added_at: datetime
    added_by: str | None

    def to_json(self) -> dict[str, object]:
        """The JSON form (``nbcast users list --json``)."""
        return {
            "tenant": self.tenant,
            "name": self.name,
            "source": source_of(self.name).value,
            "role": self.role,
            "email": self.email,
            "operator": self.operator,
            "added_at": format_instant(self.added_at),
            "added_by": self.added_by,
        }


def _role(value: str) -> Role:
    try:
        return Role(value)
    except ValueError:
        raise ConfigError(
            f"role {clip(value)} is not one of {', '.join(r.value for r in Role)}"
        ) from None


def _name(value: str) -> str:
    if not USER_NAME.fullmatch(value or "") or value != value.strip():
        raise ConfigError(
            f"user {clip(value)} must be an OS user's name (1-128 printable characters) "
            f"or {JUPYTER_PREFIX}NAME for a jupyter-server user (NAME 1-{MAX_JUPYTER_NAME})"
        )
    return value


def _record(user: User, tenant: str, operator: bool) -> MemberRecord:
    return MemberRecord(
        tenant=tenant,
        name=user.name,
        role=user.role,
        email=user.email,
        operator=operator,
        added_at=user.created_at,
        added_by=user.added_by,
    )


def add_member(
    db: Database, clock: Clock, caller: Caller, name: str, role: str, email: str | None = None
) -> MemberRecord:
    """Add ``name`` to the caller's tenant with ``role`` (admin only)."""
    wanted, name = _role(role), _name(name)
    if email is not None and not EMAIL.fullmatch(email):
        raise ConfigError(f"email {clip(email)} is not an address")
    now = clock.now()
    with db.session() as session:
        membership = require(session, caller, Role.admin, "adding a member", now)
        tenant = membership.tenant
        exists = session.scalar(
            sa.select(User).where(User.tenant_id == tenant.id, User.name == name)
        )
        if exists is not None:
            raise ConflictError(
                f"{clip(name)} is already a {exists.role} in tenant {tenant.name} "
                "(nbcast users grant changes a role)"
            )
        user = User(
            tenant_id=tenant.id,
            name=name,
            role=wanted.value,
            email=email,
            created_at=now,
            added_by=caller.user,
        )
        session.add(user)
        session.flush()
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.user_added,
            obj=f"user:{name}",
            at=now,
            details={"role": wanted.value, "email": email},
        )
        return _record(user, tenant.name, is_operator(session, name))


def _admins(session: sa.orm.Session, tenant_id: int) -> int:
    return int(
        session.scalar(
            sa.select(sa.func.count())
            .select_from(User)
            .where(User.tenant_id == tenant_id, User.role == Role.admin.value)
        )
        or 0
    )


def _serialize(session: sa.orm.Session, what: str, key: str = "") -> None:
    """Hold, until the transaction ends, the PostgreSQL advisory lock of ``what`` (the
    members of tenant ``key``, or the operators): "never the last admin" and "never
    the last operator" are counts, and two changes counted at once under READ
    COMMITTED would each leave the other's last one. Taken before the caller's own role
    is read, so a change made meanwhile is seen. (SQLite serializes writers itself: a
    transaction that read before another's commit fails to write.)"""
    if session.get_bind().dialect.name == "postgresql":
        session.execute(
            sa.text("SELECT pg_advisory_xact_lock(hashtext(:what), hashtext(:key))"),
            {"what": f"nbcast.{what}", "key": key},
        )


def set_role(db: Database, clock: Clock, caller: Caller, name: str, role: str) -> MemberRecord:
    """Give member ``name`` of the caller's tenant ``role`` (admin only)."""
    wanted = _role(role)
    now = clock.now()
    with db.session() as session:
        _serialize(session, "members", caller.tenant)
        membership = require(session, caller, Role.admin, "changing a role", now)
        tenant = membership.tenant
        user = session.scalar(sa.select(User).where(User.tenant_id == tenant.id, User.name == name))
        if user is None:
            raise NotFoundError(f"{clip(name)} is not a member of tenant {tenant.name}")
        before = Role(user.role)
        if before is Role.admin and wanted is not Role.admin and _admins(session, tenant.id) <= 1:
            raise ConflictError(f"{clip(name)} is the last admin of tenant {tenant.name}")
        user.role = wanted.value
        if before is not wanted:
            audit.record(
                session,
                tenant.id,
                actor=caller.user,
                action=audit.Action.role_granted,
                obj=f"user:{name}",
                at=now,
                details={"role": wanted.value, "was": before.value},
            )
        return _record(user, tenant.name, is_operator(session, name))


def remove_member(db: Database, clock: Clock, caller: Caller, name: str) -> None:
    """Remove ``name`` from the caller's tenant (admin only; never the last admin)."""
    now = clock.now()
    with db.session() as session:
        _serialize(session, "members", caller.tenant)
        membership = require(session, caller, Role.admin, "removing a member", now)
        tenant = membership.tenant
        user = session.scalar(sa.select(User).where(User.tenant_id == tenant.id, User.name == name))
        if user is None:
            raise NotFoundError(f"{clip(name)} is not a member of tenant {tenant.name}")
        if user.role == Role.admin.value and _admins(session, tenant.id) <= 1:
            raise ConflictError(f"{clip(name)} is the last admin of tenant {tenant.name}")
        role = user.role
        session.delete(user)
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.role_revoked,
            obj=f"user:{name}",
            at=now,
            details={"role": role},
        )


def list_members(session: sa.orm.Session, caller: Caller, now: datetime) -> list[MemberRecord]:
    """The members of the caller's tenant, by name (any member)."""
    tenant = require(session, caller, Role.viewer, "listing members", now).tenant
    users = session.scalars(
        sa.select(User).where(User.tenant_id == tenant.id).order_by(User.name).limit(10_000)
    ).all()
    operators = set(session.scalars(sa.select(Operator.name)).all())
    return [_record(user, tenant.name, user.name in operators) for user in users]


def grant_operator(db: Database, clock: Clock, caller: Caller, name: str) -> bool:
    """Make ``name`` an operator (operators only); False if they were one already."""
    name = _name(name)
    now = clock.now()
    with db.session() as session:
        _serialize(session, "operators")
        require_operator(session, caller, "granting the operator role", now)
        if session.get(Operator, name) is not None:
            return False
        if session.scalar(sa.select(User.id).where(User.name == name).limit(1)) is None:
            # An operator nobody is yet could be taken by whoever names themselves so.
            raise NotFoundError(f"{clip(name)} is a member of no tenant; add them first")
        session.add(Operator(name=name, granted_at=now, granted_by=caller.user))
        tenant = require(session, caller, Role.viewer, "granting the operator role", now).tenant
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.operator_granted,
            obj=f"user:{name}",
            at=now,
        )
        return True


def revoke_operator(db: Database, clock: Clock, caller: Caller, name: str) -> None:
    """Take the operator role from ``name`` (operators only; never the last one)."""
    now = clock.now()
    with db.session() as session:
        _serialize(session, "operators")
        require_operator(session, caller, "revoking the operator role", now)
        row = session.get(Operator, name)
        if row is None:
            raise NotFoundError(f"{clip(name)} is not an operator")
        if (session.scalar(sa.select(sa.func.count()).select_from(Operator)) or 0) <= 1:
            raise ConflictError(f"{clip(name)} is the last operator")
        session.delete(row)
        tenant = require(session, caller, Role.viewer, "revoking the operator role", now).tenant
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.operator_revoked,
            obj=f"user:{name}",
            at=now,
        )
