"""Looking up and creating tenants and users."""

from __future__ import annotations

import re
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.errors import ConfigError
from nbcast.governance.models import Tenant, User

__all__ = [
    "QUOTA_FIELDS",
    "ensure_tenant",
    "ensure_user",
    "get_tenant",
    "list_tenants",
    "set_quota",
]

_NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")


def get_tenant(session: Session, name: str) -> Tenant:
    """The tenant called ``name``; :class:`ConfigError` if there is none."""
    tenant = session.scalar(sa.select(Tenant).where(Tenant.name == name))
    if tenant is None:
        raise ConfigError(f"no tenant {name!r}")
    return tenant


def ensure_tenant(session: Session, name: str) -> Tenant:
    """The tenant called ``name``, created if missing."""
    if not _NAME.fullmatch(name):
        raise ConfigError(f"tenant name {name!r} must match {_NAME.pattern}")
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


def set_quota(session: Session, name: str, **values: Any) -> Tenant:
    """Change quota fields of tenant ``name``; unknown fields and bad values are refused."""
    tenant = get_tenant(session, name)
    for field, value in values.items():
        if field not in QUOTA_FIELDS:
            raise ConfigError(f"unknown quota {field!r} (known: {', '.join(QUOTA_FIELDS)})")
        if value is None:
            if field != "warehouse_budget_bytes":
                raise ConfigError(f"{field} needs a value")
        elif value <= 0:
            raise ConfigError(f"{field} must be positive, not {value}")
        setattr(tenant, field, value)
    return tenant


def list_tenants(session: Session) -> list[Tenant]:
    """Every tenant, by name."""
    return list(session.scalars(sa.select(Tenant).order_by(Tenant.name)))
