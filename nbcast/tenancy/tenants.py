"""Tenants and their quotas: the commands behind ``nbcast tenants`` and the API's
tenant routes, and the plain lookups the planes use.

Commands check who asks (:mod:`nbcast.tenancy.roles`) and are audited:

- :func:`create_tenant` — operators only; names the tenant's first admin at once when
  asked, so nobody else can claim it;
- :func:`change_quota` — an admin of that tenant within the tenant's ceilings, or an
  operator; every value within :data:`QUOTA_BOUNDS`;
- :func:`set_ceilings` — operators only: the most the tenant's admins may set
  (:mod:`nbcast.tenancy.ceilings`);
- :func:`set_network` — operators only: what the tenant's sandboxed kernels reach;
- :func:`list_tenants` — operators only, keyset-paginated by name;
- :func:`tenant_record` — an operator, or a member of that tenant.

:func:`get_tenant`, :func:`ensure_tenant`, :func:`all_tenants` and :func:`set_quota`
are the unchecked lookups and writes the planes and tests build on.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.clock import Clock, format_instant
from nbcast.config import TENANT_NAME
from nbcast.db import Database
from nbcast.errors import AccessDeniedError, ConfigError, ConflictError, NotFoundError
from nbcast.limits import clip
from nbcast.tenancy import audit
from nbcast.tenancy.ceilings import ceilings_of, check_within, lower_to_ceilings
from nbcast.tenancy.models import Tenant, User

__all__ = [
    "NETWORKS",
    "NULLABLE_QUOTAS",
    "QUOTA_BOUNDS",
    "QUOTA_FIELDS",
    "QUOTA_MINIMUMS",
    "TenantRecord",
    "all_tenants",
    "change_quota",
    "check_quota",
    "create_tenant",
    "ensure_tenant",
    "ensure_user",
    "get_tenant",
    "list_tenants",
    "set_ceilings",
    "set_network",
    "set_quota",
    "tenant_record",
]


def get_tenant(session: Session, name: str) -> Tenant:
    """The tenant called ``name``; :class:`ConfigError` if there is none."""
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise ConfigError(f"no tenant {clip(name)}")
    return tenant


def ensure_tenant(session: Session, name: str) -> Tenant:
    """The tenant called ``name``, created if missing."""
    if not TENANT_NAME.fullmatch(name):
        raise ConfigError(f"tenant name {clip(name)} must match {TENANT_NAME.pattern}")
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == name))
    if tenant is None:
        tenant = Tenant(name=name)
        session.add(tenant)
        session.flush()
    return tenant


def ensure_user(session: Session, tenant: Tenant, name: str) -> User:
    """The user ``name`` of ``tenant``, created (role ``viewer``) if missing: for rows
    that name a person (a version's author) — roles are granted only through
    :mod:`nbcast.tenancy.members`."""
    user = session.scalar(sa.select(User).where(User.tenant_id == tenant.id, User.name == name))
    if user is None:
        user = User(tenant_id=tenant.id, name=name)
        session.add(user)
        session.flush()
    return user


QUOTA_FIELDS = {
    "max_concurrent_runs": int,
    "cpus_per_run": float,
    "memory_mb_per_run": int,
    "run_timeout_s": int,
    "max_attempts": int,
    "share": float,
    "max_processes_per_run": int,
    "budget_warehouse_bytes_per_day": int,
    "budget_cpu_s_per_day": float,
}
"""The quota fields a tenant has, and their types."""

QUOTA_BOUNDS: dict[str, float] = {
    "max_concurrent_runs": 10_000,
    "cpus_per_run": 1_024,
    "memory_mb_per_run": 16 * 1024 * 1024,
    "run_timeout_s": 7 * 86_400,
    "max_attempts": 100,
    "share": 1_000_000,
    "max_processes_per_run": 100_000,
    "budget_warehouse_bytes_per_day": 2**63 - 1,
    "budget_cpu_s_per_day": 86_400 * 100_000,
}
"""The largest value each quota accepts (the smallest is just above 0, or
:data:`QUOTA_MINIMUMS`)."""

QUOTA_MINIMUMS: dict[str, float] = {
    "memory_mb_per_run": 64,
    "max_processes_per_run": 16,
}
"""Quotas a sandbox needs more of than "above 0": a Python kernel alone has a dozen
threads and needs tens of MB (:class:`nbcast.sandbox.policy.SandboxSpec`)."""

NULLABLE_QUOTAS = frozenset({"budget_warehouse_bytes_per_day", "budget_cpu_s_per_day"})
"""The quotas that may be None (no budget)."""


def check_quota(field: str, value: Any) -> int | float | None:
    """``value`` as quota ``field`` holds it; unknown fields and values outside
    (0, :data:`QUOTA_BOUNDS`] (or below :data:`QUOTA_MINIMUMS`) or not finite are
    refused (:class:`ConfigError`). The same check holds ceilings."""
    if field not in QUOTA_FIELDS:
        raise ConfigError(f"unknown quota {clip(field)} (known: {', '.join(QUOTA_FIELDS)})")
    if value is None:
        if field not in NULLABLE_QUOTAS:
            raise ConfigError(f"{field} needs a value")
        return None
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not 0 < value <= QUOTA_BOUNDS[field]  # compared first: a huge int has no float
        or not math.isfinite(value)
        or (QUOTA_FIELDS[field] is int and not isinstance(value, int))
    ):
        raise ConfigError(
            f"{field} must be above 0 and at most {QUOTA_BOUNDS[field]:,}, not {clip(value)}"
        )
    if value < QUOTA_MINIMUMS.get(field, 0):
        raise ConfigError(f"{field} must be at least {QUOTA_MINIMUMS[field]:,}, not {value}")
    converted: int | float = QUOTA_FIELDS[field](value)
    return converted


def set_quota(session: Session, name: str, **values: Any) -> Tenant:
    """Change quota fields of tenant ``name`` (each checked by :func:`check_quota`);
    unchecked against ceilings: the planes' and tests' write."""
    tenant = get_tenant(session, name)
    for field, value in values.items():
        setattr(tenant, field, check_quota(field, value))
    return tenant


def all_tenants(session: Session) -> list[Tenant]:
    """Every tenant, by name (unchecked: for the planes, e.g. Ray's resources)."""
    return list(session.scalars(sa.select(Tenant).order_by(Tenant.name)))


@dataclass(frozen=True, kw_only=True)
class TenantRecord:
    """A tenant and its quotas."""

    name: str
    created_at: datetime
    quotas: dict[str, Any]
    ceilings: dict[str, Any]
    """The most its admins may set each quota to, set by operators; a budget's None:
    they may remove it (:mod:`nbcast.tenancy.ceilings`)."""
    network: str = "host"
    """What its sandboxed kernels reach over the network: ``host`` or ``none``
    (:func:`set_network`)."""

    @classmethod
    def of(cls, tenant: Tenant) -> TenantRecord:
        """The record of ``tenant``."""
        return cls(
            name=tenant.name,
            created_at=tenant.created_at,
            quotas={field: getattr(tenant, field) for field in QUOTA_FIELDS},
            ceilings=ceilings_of(tenant),
            network=tenant.sandbox_network,
        )

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``nbcast tenants list --json``, the API's ``Tenant``)."""
        return {
            "name": self.name,
            "created_at": format_instant(self.created_at),
            **self.quotas,
            "ceilings": self.ceilings,
            "network": self.network,
        }


def create_tenant(
    db: Database, clock: Clock, caller: Caller, name: str, *, admin: str | None = None, **quota: Any
) -> TenantRecord:
    """Create tenant ``name`` with optional quotas and first admin (operators only)."""
    from nbcast.tenancy.roles import Role, require_operator

    now = clock.now()
    with db.session() as session:
        require_operator(session, caller, "creating a tenant", now)
        if session.scalar(sa.select(Tenant.id).where(Tenant.name == name)) is not None:
            raise ConflictError(f"tenant {clip(name)} exists already")
        tenant = ensure_tenant(session, name)
        tenant.created_at = now
        set_quota(session, name, **quota)
        # Its admins may move its quotas up to where they start (nbcast.tenancy.ceilings).
        tenant.quota_ceilings = ceilings_of(tenant)
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.tenant_created,
            obj=f"tenant:{name}",
            at=now,
            details={"quotas": quota, "admin": admin},
        )
        if admin is not None:
            from nbcast.tenancy.members import USER_NAME

            if not USER_NAME.fullmatch(admin) or admin != admin.strip():
                raise ConfigError(f"admin {clip(admin)} must be 1-128 printable characters")
            session.add(
                User(
                    tenant_id=tenant.id,
                    name=admin,
                    role=Role.admin.value,
                    created_at=now,
                    added_by=caller.user,
                )
            )
            audit.record(
                session,
                tenant.id,
                actor=caller.user,
                action=audit.Action.role_granted,
                obj=f"user:{admin}",
                at=now,
                details={"role": Role.admin.value, "how": "named when the tenant was created"},
            )
        return TenantRecord.of(tenant)


def _is_member(session: Session, tenant: str, user: str) -> bool:
    return (
        session.scalar(
            sa.select(User.id)
            .join(Tenant, Tenant.id == User.tenant_id)
            .where(Tenant.name == tenant, User.name == user)
        )
        is not None
    )


def change_quota(
    db: Database, clock: Clock, caller: Caller, name: str, **values: Any
) -> TenantRecord:
    """Change quotas of tenant ``name`` (:func:`set_quota`'s checks): an admin of that
    tenant, or an operator; audited with the values before and after."""
    from nbcast.tenancy.roles import Role, is_operator, require

    if not values:
        raise ConfigError("name at least one quota to change")
    now = clock.now()
    with db.session() as session:
        operator = is_operator(session, caller.user)
        if not operator:
            # A tenant without members is claimed where its first person acts (their
            # own tenant), never by naming it here from another tenant.
            if name != caller.tenant and not _is_member(session, name, caller.user):
                raise AccessDeniedError(
                    f"{clip(caller.user)} has no role in tenant {clip(name)}; "
                    "changing quotas needs the admin role"
                )
            require(
                session, Caller(tenant=name, user=caller.user), Role.admin, "changing quotas", now
            )
        tenant = get_tenant(session, name)
        checked = {field: check_quota(field, value) for field, value in values.items()}
        if not operator:  # an admin moves within the operators' ceilings
            check_within(tenant, checked)
        before = {field: getattr(tenant, field) for field in values if field in QUOTA_FIELDS}
        set_quota(session, name, **values)
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.quota_changed,
            obj=f"tenant:{name}",
            at=now,
            details={"from": before, "to": {f: getattr(tenant, f) for f in before}},
        )
        return TenantRecord.of(tenant)


def set_ceilings(
    db: Database, clock: Clock, caller: Caller, name: str, **values: Any
) -> TenantRecord:
    """Set ceilings of tenant ``name`` (operators only; each value checked as a quota,
    a budget's may be None): quotas above a new ceiling come down to it; audited with
    the ceilings and quotas before and after (:mod:`nbcast.tenancy.ceilings`)."""
    from nbcast.tenancy.roles import require_operator

    if not values:
        raise ConfigError("name at least one ceiling to set")
    now = clock.now()
    with db.session() as session:
        require_operator(session, caller, "setting quota ceilings", now)
        tenant = get_tenant(session, name)
        checked = {field: check_quota(field, value) for field, value in values.items()}
        before = {field: ceilings_of(tenant)[field] for field in checked}
        lowered = lower_to_ceilings(tenant, checked)
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.ceilings_changed,
            obj=f"tenant:{name}",
            at=now,
            details={"from": before, "to": checked, "quotas_lowered": lowered},
        )
        return TenantRecord.of(tenant)


NETWORKS = ("host", "none")
"""A tenant's ``sandbox_network`` values (:class:`nbcast.sandbox.policy.Network`)."""


def set_network(
    db: Database, clock: Clock, caller: Caller, name: str, network: str
) -> TenantRecord:
    """Set what tenant ``name``'s kernels reach (operators only: it widens or narrows
    what a tenant's code can touch on the machine's network); audited."""
    from nbcast.tenancy.roles import require_operator

    if network not in NETWORKS:
        raise ConfigError(f"network must be host or none, not {clip(network)}")
    now = clock.now()
    with db.session() as session:
        require_operator(session, caller, "setting a tenant's network", now)
        tenant = get_tenant(session, name)
        before, tenant.sandbox_network = tenant.sandbox_network, network
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.network_changed,
            obj=f"tenant:{name}",
            at=now,
            details={"from": before, "to": network},
        )
        return TenantRecord.of(tenant)


def list_tenants(
    session: Session,
    caller: Caller,
    now: datetime,
    *,
    limit: int | None = None,
    after: str | None = None,
) -> Page[TenantRecord]:
    """Every tenant, by name, a page at a time (operators only)."""
    from nbcast.tenancy.roles import require_operator

    require_operator(session, caller, "listing every tenant", now)
    size = page_limit(limit)
    query = sa.select(Tenant).order_by(Tenant.name).limit(size + 1)
    if after is not None:
        (last,) = decode_cursor(after, [str])
        query = query.where(Tenant.name > last)
    rows = list(session.scalars(query))
    more = len(rows) > size
    items = [TenantRecord.of(t) for t in rows[:size]]
    return Page(items, encode_cursor(items[-1].name) if more and items else None)


def tenant_record(session: Session, caller: Caller, name: str, now: datetime) -> TenantRecord:
    """Tenant ``name``: for an operator, or a member of it (another tenant's: not
    found; their own tenant without a role there: refused)."""
    from nbcast.tenancy.roles import Role, is_operator, require

    if not is_operator(session, caller.user):
        if name != caller.tenant:
            raise NotFoundError(f"no tenant {clip(name)}")
        require(session, caller, Role.viewer, "reading the tenant", now)
    try:
        return TenantRecord.of(get_tenant(session, name))
    except ConfigError:
        raise NotFoundError(f"no tenant {clip(name)}") from None
