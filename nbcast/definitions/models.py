"""Tables owned by the definitions module: report definitions and their versions."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow

__all__ = ["DefinitionVersion", "ReportDefinition"]


class ReportDefinition(Base):
    """A report: a notebook published under a name unique within its tenant."""

    __tablename__ = "report_definitions"
    __table_args__ = (
        sa.UniqueConstraint("tenant_id", "name", name="uq_report_definitions_tenant_name"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    name: Mapped[str] = mapped_column(sa.String(128))
    source_path: Mapped[str] = mapped_column(sa.Text)
    created_by: Mapped[int] = mapped_column(sa.ForeignKey("users.id"))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    latest_version: Mapped[int] = mapped_column(default=0)


class DefinitionVersion(Base):
    """One immutable published version of a report definition."""

    __tablename__ = "definition_versions"
    __table_args__ = (
        sa.UniqueConstraint("definition_id", "version", name="uq_definition_versions_number"),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    definition_id: Mapped[int] = mapped_column(sa.ForeignKey("report_definitions.id"), index=True)
    version: Mapped[int]
    sha256: Mapped[str] = mapped_column(sa.String(64))
    notebook_json: Mapped[str] = mapped_column(sa.Text)
    parameter_schema: Mapped[list[dict[str, Any]]] = mapped_column(JSONType)
    spec: Mapped[dict[str, Any]] = mapped_column(JSONType)
    author_id: Mapped[int] = mapped_column(sa.ForeignKey("users.id"))
    message: Mapped[str] = mapped_column(sa.Text, default="")
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
