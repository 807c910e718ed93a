"""Looking up and creating tenants and users."""

from __future__ import annotations

import math
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.config import TENANT_NAME
from nbcast.errors import ConfigError
from nbcast.governance.models import Tenant, User
from nbcast.limits import clip

__all__ = [
    "QUOTA_FIELDS",
    "ensure_tenant",
    "ensure_user",
    "get_tenant",
    "list_tenants",
    "set_quota",
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
    """The user ``name`` of ``tenant``, created (role ``author``) if missing."""
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
    "warehouse_budget_bytes": int,
}
"""The quota fields a tenant has, and their types."""

QUOTA_BOUNDS: dict[str, float] = {
    "max_concurrent_runs": 10_000,
    "cpus_per_run": 1_024,
    "memory_mb_per_run": 16 * 1024 * 1024,
    "run_timeout_s": 7 * 86_400,
    "max_attempts": 100,
    "share": 1_000_000,
    "warehouse_budget_bytes": 2**63 - 1,
}
"""The largest value each quota accepts (the smallest is just above 0)."""


def set_quota(session: Session, name: str, **values: Any) -> Tenant:
    """Change quota fields of tenant ``name``; unknown fields and values outside
    (0, :data:`QUOTA_BOUNDS`] or not finite are refused."""
    tenant = get_tenant(session, name)
    for field, value in values.items():
        if field not in QUOTA_FIELDS:
            raise ConfigError(f"unknown quota {clip(field)} (known: {', '.join(QUOTA_FIELDS)})")
        if value is None:
            if field != "warehouse_budget_bytes":
                raise ConfigError(f"{field} needs a value")
        elif (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or not 0 < value <= QUOTA_BOUNDS[field]
            or (QUOTA_FIELDS[field] is int and not isinstance(value, int))
        ):
            raise ConfigError(
                f"{field} must be above 0 and at most {QUOTA_BOUNDS[field]:,}, not {clip(value)}"
            )
        setattr(tenant, field, QUOTA_FIELDS[field](value) if value is not None else None)
    return tenant


def list_tenants(session: Session) -> list[Tenant]:
    """Every tenant, by name."""
    return list(session.scalars(sa.select(Tenant).order_by(Tenant.name)))
