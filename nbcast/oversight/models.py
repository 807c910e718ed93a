"""Tables of the oversight layer: the SLA's misses and how far each definition was
checked, cost kept past retention, and the periodic jobs' leases."""

from __future__ import annotations

from datetime import date, datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType

__all__ = ["CostDay", "OversightJob", "SlaMiss", "SlaWatermark"]

_BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


class CostDay(Base):
    """The cost figures of one tenant's runs of one definition on one UTC day, kept
    when retention deletes the runs (:mod:`nbcast.oversight.cost`)."""

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
    however many scheduler replicas look (:mod:`nbcast.oversight.sla`); its alert is
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


class OversightJob(Base):
    """A periodic governance job (retention): when it last ran, and who runs it now
    (a lease, so one scheduler replica runs it)."""

    __tablename__ = "governance_jobs"

    name: Mapped[str] = mapped_column(sa.String(64), primary_key=True)
    last_day: Mapped[date | None] = mapped_column(sa.Date, default=None)
    last_run_at: Mapped[datetime | None] = mapped_column(default=None)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    last_result: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
