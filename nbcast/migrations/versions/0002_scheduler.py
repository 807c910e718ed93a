"""Scheduler: runs, schedule states, scheduler replicas, run cancel requests.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "runs",
        sa.Column("id", BIGINT, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("definition_id", sa.Integer, sa.ForeignKey("report_definitions.id"),
                  nullable=False),
        sa.Column("version_id", sa.Integer, sa.ForeignKey("definition_versions.id"),
                  nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("kind", sa.String(16), nullable=False),
        sa.Column("slot_key", sa.String(32)),
        sa.Column("fire_at", UTCDateTime(), nullable=False),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("reason", sa.String(32)),
        sa.Column("parameters", JSONType, nullable=False),
        sa.Column("serial", sa.Boolean, nullable=False),
        sa.Column("not_before", UTCDateTime(), nullable=False),
        sa.Column("created_at", UTCDateTime(), nullable=False),
        sa.UniqueConstraint("definition_id", "slot_key", name="uq_runs_definition_slot"),
    )
    # Partial indexes: most slot rows are written once and never looked up by state
    # again (SKIPPED, MISSED, finished runs), so only live runs pay for these two.
    active = sa.text("state IN ('QUEUED', 'LEASED', 'RUNNING')")
    queued = sa.text("state = 'QUEUED'")
    op.create_index("ix_runs_active", "runs", ["definition_id", "state"],
                    postgresql_where=active, sqlite_where=active)
    op.create_index("ix_runs_queue", "runs", ["tenant_id", "not_before"],
                    postgresql_where=queued, sqlite_where=queued)
    op.create_table(
        "run_cancel_requests",
        sa.Column("id", sa.Integer, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("run_id", BIGINT, sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("reason", sa.String(32), nullable=False),
        sa.Column("requested_by", sa.String(128), nullable=False),
        sa.Column("requested_at", UTCDateTime(), nullable=False),
    )
    op.create_table(
        "schedule_states",
        sa.Column("definition_id", sa.Integer, sa.ForeignKey("report_definitions.id"),
                  primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False, index=True),
        sa.Column("schedule_version", sa.Integer, nullable=False),
        sa.Column("watermark", UTCDateTime(), nullable=False),
        sa.Column("next_fire_at", UTCDateTime()),
        sa.Column("paused", sa.Boolean, nullable=False),
        sa.Column("paused_at", UTCDateTime()),
        sa.Column("updated_at", UTCDateTime(), nullable=False),
        sa.Column("updated_by", sa.String(128), nullable=False),
    )
    op.create_index("ix_schedule_states_due", "schedule_states", ["paused", "next_fire_at"])
    op.create_table(
        "scheduler_replicas",
        sa.Column("name", sa.String(128), primary_key=True),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("pid", sa.Integer, nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("heartbeat_at", UTCDateTime(), nullable=False),
        sa.Column("slots_materialized", sa.BigInteger, nullable=False),
        sa.Column("last_error", sa.Text),
    )


def downgrade() -> None:
    op.drop_table("scheduler_replicas")
    op.drop_table("schedule_states")
    op.drop_table("run_cancel_requests")
    op.drop_table("runs")
