"""Tables owned by the scheduling control plane."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, utcnow

__all__ = ["ScheduleState"]


class ScheduleState(Base):
    """The scheduler's bookkeeping for one definition.

    ``watermark`` is the fire time of the last materialized slot (or, before the
    first slot, the instant materialization starts from). ``next_fire_at`` is the
    first fire time after it, so finding due work is one indexed range scan — or,
    after a failure, when to try again.
    ``schedule_version`` is the version whose schedule is compiled; a newer version
    takes effect after the watermark.
    """

    __tablename__ = "schedule_states"
    __table_args__ = (sa.Index("ix_schedule_states_due", "paused", "next_fire_at"),)

    definition_id: Mapped[int] = mapped_column(
        sa.ForeignKey("report_definitions.id"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    schedule_version: Mapped[int]
    watermark: Mapped[datetime]
    next_fire_at: Mapped[datetime | None]
    paused: Mapped[bool] = mapped_column(default=False)
    paused_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str] = mapped_column(sa.String(128), default="")
    error: Mapped[str | None] = mapped_column(sa.Text, default=None)
    """Why the last attempt to materialize this definition failed (None: it did not).
    The definition is retried at ``next_fire_at``, with backoff; the others go on."""
    failures: Mapped[int] = mapped_column(default=0, server_default="0")
    """Failures in a row (the backoff's exponent); 0 after a success."""
    failed_at: Mapped[datetime | None] = mapped_column(default=None)
