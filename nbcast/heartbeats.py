"""The ``service_heartbeats`` table: one row per service process (:mod:`nbcast.daemon`
writes it; :mod:`nbcast.views.health` reads it)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType

__all__ = ["ServiceHeartbeat"]


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
