"""The execution plane's tables: each attempt at a run, the warehouse queries it made,
and the outbox it hands succeeded runs to the delivery plane through (written in the
same transaction as the run's completion: the transactional outbox belongs to its
producer). The ``runs`` table itself is the scheduler's (:mod:`nbcast.scheduler.models`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow

__all__ = ["OutboxRow", "Outcome", "RunAttempt", "WarehouseUsage"]


class Outcome(StrEnum):
    """How one attempt ended (the ``run_attempts.outcome`` column; None while it runs).

    Not to be confused with :class:`nbcast.executor.attempt.AttemptReport`, the
    engine's report of an attempt, whose ``state`` becomes one of these.
    """

    SUCCEEDED = "SUCCEEDED"
    """It ran to the end (or to a clean ``sys.exit()``)."""
    FAILED = "FAILED"
    """A cell raised, the kernel died, or the attempt could not start."""
    TIMED_OUT = "TIMED_OUT"
    """It ran past the run timeout and its kernel was stopped."""
    CANCELLED = "CANCELLED"
    """Its run was cancelled while it ran (or its worker was halted)."""
    LOST = "LOST"
    """Its lease expired (the worker died or lost the database): the reaper's verdict."""


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
    """An :class:`Outcome`; None while the attempt runs."""
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    duration_s: Mapped[float | None] = mapped_column(default=None)
    kernel_start_s: Mapped[float | None] = mapped_column(default=None)
    artifact_sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)
    cpu_s: Mapped[float | None] = mapped_column(default=None)
    """CPU seconds the attempt's kernel used (user + system, with its children)."""
    peak_mem_mb: Mapped[float | None] = mapped_column(default=None)
    """The kernel's peak resident memory, MB."""


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


class OutboxRow(Base):
    """A succeeded run handed to the delivery plane (inserted by the executor)."""

    __tablename__ = "delivery_outbox"
    __table_args__ = (
        sa.Index(
            "ix_delivery_outbox_pending",
            "id",
            postgresql_where=sa.text("consumed_at IS NULL"),
            sqlite_where=sa.text("consumed_at IS NULL"),
        ),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    consumed_at: Mapped[datetime | None] = mapped_column(default=None)
