"""One supervisor for every service: ``service_heartbeats`` replaces the scheduler's
own ``scheduler_replicas``; runs get the index their keyset listing walks.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "service_heartbeats",
        sa.Column("id", sa.Integer(), nullable=False),
        sa.Column("kind", sa.String(length=32), nullable=False),
        sa.Column("name", sa.String(length=255), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("version", sa.String(length=32), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("beat_at", UTCDateTime(), nullable=False),
        sa.Column("stopped_at", UTCDateTime(), nullable=True),
        sa.Column("iterations", sa.BigInteger(), nullable=False),
        sa.Column("errors", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.Column("detail", JSONType, nullable=True),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("kind", "name", name="uq_service_heartbeats_name"),
    )
    op.drop_table("scheduler_replicas")
    op.create_index("ix_runs_tenant_fire", "runs", ["tenant_id", "fire_at", "id"])


def downgrade() -> None:
    op.drop_index("ix_runs_tenant_fire", table_name="runs")
    op.create_table(
        "scheduler_replicas",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("host", sa.String(length=255), nullable=False),
        sa.Column("pid", sa.Integer(), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.Column("slots_materialized", sa.BigInteger(), nullable=False),
        sa.Column("last_error", sa.Text(), nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )
    op.drop_table("service_heartbeats")
