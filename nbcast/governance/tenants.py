"""Looking up and creating tenants and users."""

from __future__ import annotations

import re

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.errors import ConfigError
from nbcast.governance.models import Tenant, User

__all__ = ["ensure_tenant", "ensure_user", "get_tenant"]

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
