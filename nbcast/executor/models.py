"""The ``runs`` table and its states.

The scheduler *inserts* runs — QUEUED, or SKIPPED / MISSED with a reason — and the
execution plane owns every later change. A cancellation asked for by another plane
(for example the ``replace`` overlap policy) is a row in ``run_cancel_requests``
that the executor honours, never an update of ``runs`` from outside.
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow

__all__ = [
    "ACTIVE_STATES",
    "CancelRequest",
    "Run",
    "RunAttempt",
    "RunKind",
    "RunState",
    "WarehouseUsage",
]


class RunState(StrEnum):
    """Where a run is. SKIPPED and MISSED are terminal and created so, with a reason."""

    QUEUED = "QUEUED"
    LEASED = "LEASED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    SKIPPED = "SKIPPED"
    MISSED = "MISSED"


ACTIVE_STATES = (RunState.QUEUED, RunState.LEASED, RunState.RUNNING)
"""States in which a run counts as 'still queued or running' for the overlap policy."""


class RunKind(StrEnum):
    """Why a run exists."""

    scheduled = "scheduled"
    """A slot of the definition's schedule."""
    backfill = "backfill"
    """A past slot materialized on request (``nbcast backfill``)."""
    manual = "manual"
    """Asked for by a person (``nbcast run``); it has no slot."""


class Run(Base):
    """One slot's record (a run, or why there is none), or one manual run."""

    __tablename__ = "runs"
    __table_args__ = (
        sa.UniqueConstraint("definition_id", "slot_key", name="uq_runs_definition_slot"),
        sa.Index(
            "ix_runs_active",
            "definition_id",
            "state",
            postgresql_where=sa.text("state IN ('QUEUED', 'LEASED', 'RUNNING')"),
            sqlite_where=sa.text("state IN ('QUEUED', 'LEASED', 'RUNNING')"),
        ),
        sa.Index(
            "ix_runs_queue",
            "tenant_id",
            "not_before",
            "id",
            postgresql_where=sa.text("state = 'QUEUED'"),
            sqlite_where=sa.text("state = 'QUEUED'"),
        ),
        sa.Index("ix_runs_tenant_fire", "tenant_id", "fire_at", "id"),
        sa.Index(
            "ix_runs_leased",
            "tenant_id",
            "lease_expires_at",
            postgresql_where=sa.text("state IN ('LEASED', 'RUNNING')"),
            sqlite_where=sa.text("state IN ('LEASED', 'RUNNING')"),
        ),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    definition_id: Mapped[int] = mapped_column(sa.ForeignKey("report_definitions.id"))
    version_id: Mapped[int] = mapped_column(sa.ForeignKey("definition_versions.id"))
    version: Mapped[int]
    kind: Mapped[str] = mapped_column(sa.String(16))
    slot_key: Mapped[str | None] = mapped_column(sa.String(32))
    fire_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str | None] = mapped_column(sa.String(32))
    parameters: Mapped[dict[str, Any]] = mapped_column(JSONType)
    serial: Mapped[bool] = mapped_column(default=True)
    """Runs one at a time with the definition's other runs (every overlap policy but
    ``allow``; manual runs are never serial)."""
    not_before: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Owned by the execution plane from here on.
    attempt: Mapped[int] = mapped_column(default=0, server_default="0")
    """The current attempt number: the fencing token of every write of that attempt."""
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    artifact_sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)


class CancelRequest(Base):
    """A request, from outside the execution plane, to cancel a run."""

    __tablename__ = "run_cancel_requests"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    reason: Mapped[str] = mapped_column(sa.String(32))
    requested_by: Mapped[str] = mapped_column(sa.String(128))
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)


class RunAttempt(Base):
    """One attempt at a run: who ran it, where, when, and how it ended."""

    __tablename__ = "run_attempts"
    __table_args__ = (sa.UniqueConstraint("run_id", "attempt", name="uq_run_attempts_run_attempt"),)

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    # No index of its own: uq_run_attempts_run_attempt leads with it.
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"))
    attempt: Mapped[int]
    worker: Mapped[str] = mapped_column(sa.String(255))
    host: Mapped[str] = mapped_column(sa.String(255))
    engine: Mapped[str] = mapped_column(sa.String(32))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), default=None)
    """SUCCEEDED, FAILED, TIMED_OUT, CANCELLED, or LOST (the lease expired)."""
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    duration_s: Mapped[float | None] = mapped_column(default=None)
    kernel_start_s: Mapped[float | None] = mapped_column(default=None)
    artifact_sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)


class WarehouseUsage(Base):
    """One warehouse query of one attempt: the figures for cost attribution."""

    __tablename__ = "warehouse_usage"

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    attempt: Mapped[int]
    connection: Mapped[str] = mapped_column(sa.String(128))
    sql_sha256: Mapped[str] = mapped_column(sa.String(64))
    rows: Mapped[int] = mapped_column(sa.BigInteger)
    bytes: Mapped[int] = mapped_column(sa.BigInteger)
    seconds: Mapped[float]
    error: Mapped[str | None] = mapped_column(sa.Text, default=None)
    recorded_at: Mapped[datetime]
