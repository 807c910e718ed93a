"""Tables owned by the governance plane."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow

__all__ = ["Tenant", "User"]


class Tenant(Base):
    """A tenant: the unit of isolation, quota and cost attribution."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Quotas (see nbcast.executor.quotas for what each one means).
    max_concurrent_runs: Mapped[int] = mapped_column(default=4, server_default="4")
    cpus_per_run: Mapped[float] = mapped_column(default=1.0, server_default="1")
    memory_mb_per_run: Mapped[int] = mapped_column(default=2048, server_default="2048")
    run_timeout_s: Mapped[int] = mapped_column(default=3600, server_default="3600")
    max_attempts: Mapped[int] = mapped_column(default=3, server_default="3")
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
