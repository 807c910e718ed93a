"""Tables owned by the governance plane."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow
from nbcast.executor.models import DEFAULT_MAX_ATTEMPTS

__all__ = [
    "AuditCheckpoint",
    "AuditEntry",
    "AuditHead",
    "CostDay",
    "GovernanceJob",
    "Operator",
    "ServiceHeartbeat",
    "SlaMiss",
    "SlaWatermark",
    "Tenant",
    "TenantUsageDay",
    "User",
]


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
    (:mod:`nbcast.governance.ceilings`); None: the tenant's quotas when it was made."""
    # Budgets per UTC day (None: none) — nbcast.governance.budgets.
    budget_warehouse_bytes_per_day: Mapped[int | None] = mapped_column(sa.BigInteger, default=None)
    budget_cpu_s_per_day: Mapped[float | None] = mapped_column(default=None)
    # Retention (None: keep forever) — nbcast.governance.retention.
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
    """``admin``, ``author`` or ``viewer`` (:class:`nbcast.governance.roles.Role`)."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    added_by: Mapped[str | None] = mapped_column(sa.String(128), default=None)


class Operator(Base):
    """A person who operates the whole installation: creates tenants, sets any
    tenant's quotas and acts as an admin in every tenant. The first user of a fresh
    home is one (:mod:`nbcast.governance.roles`)."""

    __tablename__ = "operators"

    name: Mapped[str] = mapped_column(sa.String(128), primary_key=True)
    """The operator's identity, its source included (as :attr:`User.name`)."""
    granted_at: Mapped[datetime] = mapped_column(default=utcnow)
    granted_by: Mapped[str] = mapped_column(sa.String(128))
    """Who granted it: an identity, or ``configuration`` (``NbcastApp.admin_users``)."""


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


class AuditCheckpoint(Base):
    """A tenant's audit head at a moment, signed with a key the database does not hold
    (:mod:`nbcast.governance.checkpoints`). Append-only, as ``audit_log``."""

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


class TenantUsageDay(Base):
    """A tenant's use of one UTC day: what its daily budgets are held to. Added to by
    the execution plane as attempts end (:mod:`nbcast.governance.budgets`)."""

    __tablename__ = "tenant_usage_days"

    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), primary_key=True)
    day: Mapped[date] = mapped_column(sa.Date, primary_key=True)
    cpu_s: Mapped[float] = mapped_column(default=0.0, server_default="0")
    warehouse_bytes: Mapped[int] = mapped_column(sa.BigInteger, default=0, server_default="0")
    attempts: Mapped[int] = mapped_column(default=0, server_default="0")


class CostDay(Base):
    """The cost figures of one tenant's runs of one definition on one UTC day, kept
    when retention deletes the runs (:mod:`nbcast.governance.cost`)."""

    __tablename__ = "cost_days"

    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), primary_key=True)
    day: Mapped[date] = mapped_column(sa.Date, primary_key=True)
    definition_id: Mapped[int] = mapped_column(
        sa.ForeignKey("report_definitions.id"), primary_key=True
    )
    runs: Mapped[int]
    attempts: Mapped[int]
    cpu_s: Mapped[float]
    wall_s: Mapped[float]
    peak_mem_mb: Mapped[float]
    warehouse_rows: Mapped[int] = mapped_column(sa.BigInteger)
    warehouse_bytes: Mapped[int] = mapped_column(sa.BigInteger)
    warehouse_s: Mapped[float]
    render_s: Mapped[float]
    deliveries: Mapped[int]


class SlaMiss(Base):
    """A slot that was not delivered within its definition's SLA: one row per slot,
    however many scheduler replicas look (:mod:`nbcast.governance.sla`); its alert is
    sent by a delivery worker."""

    __tablename__ = "sla_misses"
    __table_args__ = (
        sa.UniqueConstraint("definition_id", "slot_key", name="uq_sla_misses_slot"),
        sa.Index("ix_sla_misses_tenant_fire", "tenant_id", "fire_at"),
        sa.Index(
            "ix_sla_misses_alerts",
            "alert_not_before",
            postgresql_where=sa.text("alert_state = 'PENDING'"),
            sqlite_where=sa.text("alert_state = 'PENDING'"),
        ),
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    definition_id: Mapped[int] = mapped_column(sa.ForeignKey("report_definitions.id"))
    slot_key: Mapped[str] = mapped_column(sa.String(32))
    fire_at: Mapped[datetime]
    deadline: Mapped[datetime]
    detected_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(sa.String(16))
    """The slot's run state when the miss was found (or ``UNMATERIALIZED``)."""
    reason: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    alert_state: Mapped[str] = mapped_column(sa.String(16))
    """``PENDING``, ``SENT``, ``FAILED`` or ``NONE`` (no alert channel configured)."""
    alert_attempts: Mapped[int] = mapped_column(default=0, server_default="0")
    alert_not_before: Mapped[datetime]
    alert_lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    alert_lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    alert_channel: Mapped[str | None] = mapped_column(sa.String(32), default=None)
    alert_to: Mapped[str | None] = mapped_column(sa.String(512), default=None)
    alerted_at: Mapped[datetime | None] = mapped_column(default=None)
    alert_error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)


class SlaWatermark(Base):
    """How far a definition's slots have been checked against its SLA."""

    __tablename__ = "sla_watermarks"

    definition_id: Mapped[int] = mapped_column(
        sa.ForeignKey("report_definitions.id"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    checked_until: Mapped[datetime]


class GovernanceJob(Base):
    """A periodic governance job (retention): when it last ran, and who runs it now
    (a lease, so one scheduler replica runs it)."""

    __tablename__ = "governance_jobs"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    last_day: Mapped[date | None] = mapped_column(sa.Date, default=None)
    last_run_at: Mapped[datetime | None] = mapped_column(default=None)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    last_result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
