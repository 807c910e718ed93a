"""Tables owned by the governance plane."""

from __future__ import annotations

from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, utcnow

__all__ = ["Tenant", "User"]


class Tenant(Base):
    """A tenant: the unit of isolation, quota and cost attribution."""

    __tablename__ = "tenants"

    id: Mapped[int] = mapped_column(primary_key=True)
    name: Mapped[str] = mapped_column(sa.String(64), unique=True)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


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
