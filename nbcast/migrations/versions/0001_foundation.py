"""Foundation: tenants, users, report definitions, definition versions.

Revision ID: 0001
Revises:
Create Date: 2026-11-29
"""

from __future__ import annotations

from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    tenants = op.create_table(
        "tenants",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), nullable=False, unique=True),
        sa.Column("created_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "users",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("email", sa.String(320)),
        sa.Column("role", sa.String(32), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_users_tenant_name"),
    )
    op.create_table(
        "report_definitions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("name", sa.String(128), nullable=False),
        sa.Column("source_path", sa.Text, nullable=False),
        sa.Column("created_by", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.Column("latest_version", sa.Integer, nullable=False),
        sa.UniqueConstraint("tenant_id", "name", name="uq_report_definitions_tenant_name"),
    )
    op.create_table(
        "definition_versions",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column(
            "definition_id",
            sa.Integer,
            sa.ForeignKey("report_definitions.id"),
            nullable=False,
            index=True,
        ),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("sha256", sa.String(64), nullable=False),
        sa.Column("notebook_json", sa.Text, nullable=False),
        sa.Column("parameter_schema", JSONType, nullable=False),
        sa.Column("spec", JSONType, nullable=False),
        sa.Column("author_id", sa.Integer, sa.ForeignKey("users.id"), nullable=False),
        sa.Column("message", sa.Text, nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("definition_id", "version", name="uq_definition_versions_number"),
    )
    op.bulk_insert(tenants, [{"name": "default", "created_at": datetime.now(UTC)}])


def downgrade() -> None:
    op.drop_table("definition_versions")
    op.drop_table("report_definitions")
    op.drop_table("users")
    op.drop_table("tenants")
