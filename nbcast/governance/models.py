"""Tables owned by the governance plane."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow
from nbcast.executor.models import DEFAULT_MAX_ATTEMPTS

__all__ = ["ServiceHeartbeat", "Tenant", "User"]


class Tenant(Base):
    """A tenant: the unit of isolation, quota and cost attribution."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Quotas (nbcast.governance.tenants.QUOTA_BOUNDS; what each means: the README).
    max_concurrent_runs: Mapped[int] = mapped_column(default=4, server_default="4")
    cpus_per_run: Mapped[float] = mapped_column(default=1.0, server_default="1")
    memory_mb_per_run: Mapped[int] = mapped_column(default=2048, server_default="2048")
    run_timeout_s: Mapped[int] = mapped_column(default=3600, server_default="3600")
    max_attempts: Mapped[int] = mapped_column(
        default=DEFAULT_MAX_ATTEMPTS, server_default=str(DEFAULT_MAX_ATTEMPTS)
    )
    share: Mapped[float] = mapped_column(default=1.0, server_default="1")
    warehouse_budget_bytes: Mapped[int | None] = mapped_column(sa.BigInteger, default=None)
    warehouse: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """The warehouse connections the tenant's runs may use (None: the embedded lake)."""


class User(Base):
    """A person who publishes, reviews or administers reports in one tenant."""

    __tablename__ = "users"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "name", name="uq_users_tenant_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    email: Mapped[str | None] = mapped_column(sa.String(320), default=None)
    role: Mapped[str] = mapped_column(sa.String(32), default="author")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class ServiceHeartbeat(Base):
    """One service process's heartbeat (:mod:`nbcast.daemon`): who runs where, since
    when, how it is doing. One row per (kind, name), reused when a service of the
    same name starts again."""

    __tablename__ = "service_heartbeats"
    __table_args__ = (sa.UniqueConstraint("kind", "name", name="uq_service_heartbeats_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    kind: Mapped[str] = mapped_column(sa.String(32))
    """``scheduler``, ``worker`` or ``delivery-worker``."""
    name: Mapped[str] = mapped_column(sa.String(255))
    host: Mapped[str] = mapped_column(sa.String(255))
    pid: Mapped[int]
    version: Mapped[str] = mapped_column(sa.String(32))
    state: Mapped[str] = mapped_column(sa.String(16))
    """``running``, ``stopping`` or ``stopped``."""
    started_at: Mapped[datetime]
    beat_at: Mapped[datetime]
    stopped_at: Mapped[datetime | None] = mapped_column(default=None)
    iterations: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    errors: Mapped[int] = mapped_column(sa.BigInteger, default=0)
    last_error: Mapped[str | None] = mapped_column(sa.Text, default=None)
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
