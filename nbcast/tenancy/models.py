"""Tables of the tenancy layer, under every plane: tenants (their quotas, ceilings and
sandbox settings), users, operators, the audit chain and its checkpoints, and the
daily usage that budgets are held to."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow

__all__ = [
    "DEFAULT_MAX_ATTEMPTS",
    "AuditCheckpoint",
    "AuditEntry",
    "AuditHead",
    "Operator",
    "Tenant",
    "TenantUsageDay",
    "User",
]


DEFAULT_MAX_ATTEMPTS = 3
"""How many attempts a run gets unless its tenant says otherwise (``tenants.max_attempts``)."""


class Tenant(Base):
    """A tenant: the unit of isolation, quota and cost attribution."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Quotas (nbcast.tenancy.tenants.QUOTA_BOUNDS; what each means: the README).
    max_concurrent_runs: Mapped[int] = mapped_column(default=4, server_default="4")
    cpus_per_run: Mapped[float] = mapped_column(default=1.0, server_default="1")
    memory_mb_per_run: Mapped[int] = mapped_column(default=2048, server_default="2048")
    run_timeout_s: Mapped[int] = mapped_column(default=3600, server_default="3600")
    max_attempts: Mapped[int] = mapped_column(
        default=DEFAULT_MAX_ATTEMPTS, server_default=str(DEFAULT_MAX_ATTEMPTS)
    )
    share: Mapped[float] = mapped_column(default=1.0, server_default="1")
    max_processes_per_run: Mapped[int] = mapped_column(default=256, server_default="256")
    """Processes and threads one attempt may have at once (its sandbox's limit)."""
    sandbox_network: Mapped[str] = mapped_column(
        sa.String(8), default="host", server_default="host"
    )
    """What the tenant's kernels reach: ``host`` or ``none`` (:mod:`nbcast.sandbox.policy`)."""
    warehouse: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """The warehouse connections the tenant's runs may use (None: the embedded lake)."""
    quota_ceilings: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """The most a tenant admin may set each quota to, set by operators
    (:mod:`nbcast.tenancy.ceilings`); None: the tenant's quotas when it was made."""
    # Budgets per UTC day (None: none) — nbcast.tenancy.budgets.
    budget_warehouse_bytes_per_day: Mapped[int | None] = mapped_column(sa.BigInteger, default=None)
    budget_cpu_s_per_day: Mapped[float | None] = mapped_column(default=None)
    # Retention (None: keep forever) — nbcast.oversight.retention.
    retain_artifacts_days: Mapped[int | None] = mapped_column(default=None)
    retain_rows_days: Mapped[int | None] = mapped_column(default=None)


class User(Base):
    """A person who publishes, reviews or administers reports in one tenant."""

    __tablename__ = "users"
    __table_args__ = (sa.UniqueConstraint("tenant_id", "name", name="uq_users_tenant_name"),)

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    """The person's identity, its source included: ``ada`` (an OS user) or
    ``jupyter:alice`` (a jupyter-server user) — :mod:`nbcast.access`; unique per
    tenant, so the two sources never share a row."""
    email: Mapped[str | None] = mapped_column(sa.String(320), default=None)
    role: Mapped[str] = mapped_column(sa.String(32), default="viewer")
    """``admin``, ``author`` or ``viewer`` (:class:`nbcast.tenancy.roles.Role`)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    added_by: Mapped[str | None] = mapped_column(sa.String(128), default=None)


class Operator(Base):
    """A person who operates the whole installation: creates tenants, sets any
    tenant's quotas and acts as an admin in every tenant. The first user of a fresh
    home is one (:mod:`nbcast.tenancy.roles`)."""

    __tablename__ = "operators"

    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    """The operator's identity, its source included (as :attr:`User.name`)."""
    granted_at: Mapped[datetime] = mapped_column(default=utcnow)
    granted_by: Mapped[str] = mapped_column(sa.String(128))
    """Who granted it: an identity, or ``configuration`` (``NbcastApp.admin_users``)."""


_BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


class AuditEntry(Base):
    """One entry of a tenant's hash-chained audit log (:mod:`nbcast.tenancy.audit`).
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


class AuditCheckpoint(Base):
    """A tenant's audit head at a moment, signed with a key the database does not hold
    (:mod:`nbcast.tenancy.checkpoints`). Append-only, as ``audit_log``."""

    __tablename__ = "audit_checkpoints"
    __table_args__ = (
        sa.Index("uq_audit_checkpoints_tenant_seq", "tenant_id", "seq", unique=True),
        {"sqlite_autoincrement": True},
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    seq: Mapped[int] = mapped_column(sa.BigInteger)
    head: Mapped[str] = mapped_column(sa.String(64))
    made_at: Mapped[datetime]
    made_by: Mapped[str] = mapped_column(sa.String(128))
    key_id: Mapped[str] = mapped_column(sa.String(64))
    signature: Mapped[str] = mapped_column(sa.String(128))


class AuditHead(Base):
    """A tenant's last audit entry: its ``seq`` and hash (so entries removed from the
    end of the chain are found too)."""

    __tablename__ = "audit_heads"

    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), primary_key=True)
    seq: Mapped[int] = mapped_column(sa.BigInteger)
    hash: Mapped[str] = mapped_column(sa.String(64))
    updated_at: Mapped[datetime | None] = mapped_column(default=None)


class TenantUsageDay(Base):
    """A tenant's use of one UTC day: what its daily budgets are held to. Added to by
    the execution plane as attempts end (:mod:`nbcast.tenancy.budgets`)."""

    __tablename__ = "tenant_usage_days"

    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), primary_key=True)
    day: Mapped[date] = mapped_column(sa.Date, primary_key=True)
    cpu_s: Mapped[float] = mapped_column(default=0.0, server_default="0")
    warehouse_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    attempts: Mapped[int] = mapped_column(default=0, server_default="0")
