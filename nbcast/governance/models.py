"""Tables owned by the governance plane."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow
from nbcast.executor.models import DEFAULT_MAX_ATTEMPTS

__all__ = ["AuditEntry", "AuditHead", "Operator", "ServiceHeartbeat", "Tenant", "User"]


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
    role: Mapped[str] = mapped_column(sa.String(32), default="viewer")
    """``admin``, ``author`` or ``viewer`` (:class:`nbcast.governance.roles.Role`)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    added_by: Mapped[str | None] = mapped_column(sa.String(128), default=None)


class Operator(Base):
    """A person who operates the whole installation: creates tenants, sets any
    tenant's quotas and acts as an admin in every tenant. The first user of a fresh
    home is one (:mod:`nbcast.governance.roles`)."""

    __tablename__ = "operators"

    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    granted_at: Mapped[datetime] = mapped_column(default=utcnow)
    granted_by: Mapped[str] = mapped_column(sa.String(128))


_BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


class AuditEntry(Base):
    """One entry of a tenant's hash-chained audit log (:mod:`nbcast.governance.audit`).
    Append-only: on PostgreSQL a trigger refuses UPDATE, DELETE and TRUNCATE."""

    __tablename__ = "audit_log"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "seq", name="uq_audit_log_tenant_seq"),
        sa.Index("ix_audit_log_tenant_at", "tenant_id", "at"),
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    seq: Mapped[int] = mapped_column(sa.BigInteger)
    at: Mapped[datetime]
    actor: Mapped[str] = mapped_column(sa.String(128))
    action: Mapped[str] = mapped_column(sa.String(64))
    object: Mapped[str] = mapped_column(sa.String(255))
    details: Mapped[str] = mapped_column(sa.Text)
    """The canonical JSON text that was hashed (kept as text, so it is what was hashed)."""
    prev_hash: Mapped[str] = mapped_column(sa.String(64))
    hash: Mapped[str] = mapped_column(sa.String(64))


class AuditHead(Base):
    """A tenant's last audit entry: its ``seq`` and hash (so entries removed from the
    end of the chain are found too)."""

    __tablename__ = "audit_heads"

    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger)
    hash: Mapped[str] = mapped_column(sa.String(64))
    updated_at: Mapped[datetime | None] = mapped_column(default=None)


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
