"""Executor: leases and attempts on runs, run attempts, warehouse usage, tenant quotas.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("max_concurrent_runs", sa.Integer, nullable=False,
                                   server_default="4"))
        batch.add_column(sa.Column("cpus_per_run", sa.Float, nullable=False,
                                   server_default="1"))
        batch.add_column(sa.Column("memory_mb_per_run", sa.Integer, nullable=False,
                                   server_default="2048"))
        batch.add_column(sa.Column("run_timeout_s", sa.Integer, nullable=False,
                                   server_default="3600"))
        batch.add_column(sa.Column("max_attempts", sa.Integer, nullable=False,
                                   server_default="3"))
        batch.add_column(sa.Column("share", sa.Float, nullable=False, server_default="1"))
        batch.add_column(sa.Column("warehouse_budget_bytes", sa.BigInteger))
        batch.add_column(sa.Column("warehouse", JSONType))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("attempt", sa.Integer, nullable=False, server_default="0"))
        batch.add_column(sa.Column("lease_owner", sa.String(255)))
        batch.add_column(sa.Column("lease_expires_at", UTCDateTime()))
        batch.add_column(sa.Column("started_at", UTCDateTime()))
        batch.add_column(sa.Column("finished_at", UTCDateTime()))
        batch.add_column(sa.Column("artifact_sha256", sa.String(64)))
        batch.add_column(sa.Column("error", JSONType))
    # Claims read QUEUED runs of one tenant in (not_before, id) order; with id in the
    # index a LIMIT stops after a few entries even when many runs share not_before.
    op.drop_index("ix_runs_queue", "runs")
    queued = sa.text("state = 'QUEUED'")
    op.create_index("ix_runs_queue", "runs", ["tenant_id", "not_before", "id"],
                    postgresql_where=queued, sqlite_where=queued)
    live = sa.text("state IN ('LEASED', 'RUNNING')")
    op.create_index("ix_runs_leased", "runs", ["tenant_id", "lease_expires_at"],
                    postgresql_where=live, sqlite_where=live)
    op.create_table(
        "run_attempts",
        sa.Column("id", BIGINT, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("run_id", BIGINT, sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("worker", sa.String(255), nullable=False),
        sa.Column("host", sa.String(255), nullable=False),
        sa.Column("engine", sa.String(32), nullable=False),
        sa.Column("started_at", UTCDateTime(), nullable=False),
        sa.Column("ended_at", UTCDateTime()),
        sa.Column("outcome", sa.String(16)),
        sa.Column("error", JSONType),
        sa.Column("duration_s", sa.Float),
        sa.Column("kernel_start_s", sa.Float),
        sa.Column("artifact_sha256", sa.String(64)),
        sa.UniqueConstraint("run_id", "attempt", name="uq_run_attempts_run_attempt"),
    )
    op.create_table(
        "warehouse_usage",
        sa.Column("id", BIGINT, primary_key=True),
        sa.Column("tenant_id", sa.Integer, sa.ForeignKey("tenants.id"), nullable=False,
                  index=True),
        sa.Column("run_id", BIGINT, sa.ForeignKey("runs.id"), nullable=False, index=True),
        sa.Column("attempt", sa.Integer, nullable=False),
        sa.Column("connection", sa.String(128), nullable=False),
        sa.Column("sql_sha256", sa.String(64), nullable=False),
        sa.Column("rows", BIGINT, nullable=False),
        sa.Column("bytes", BIGINT, nullable=False),
        sa.Column("seconds", sa.Float, nullable=False),
        sa.Column("error", sa.Text),
        sa.Column("recorded_at", UTCDateTime(), nullable=False),
    )


def downgrade() -> None:
    op.drop_table("warehouse_usage")
    op.drop_table("run_attempts")
    op.drop_index("ix_runs_leased", "runs")
    op.drop_index("ix_runs_queue", "runs")
    queued = sa.text("state = 'QUEUED'")
    op.create_index("ix_runs_queue", "runs", ["tenant_id", "not_before"],
                    postgresql_where=queued, sqlite_where=queued)
    with op.batch_alter_table("runs") as batch:
        for name in ("error", "artifact_sha256", "finished_at", "started_at",
                     "lease_expires_at", "lease_owner", "attempt"):
            batch.drop_column(name)
    with op.batch_alter_table("tenants") as batch:
        for name in ("warehouse", "warehouse_budget_bytes", "share", "max_attempts",
                     "run_timeout_s", "memory_mb_per_run", "cpus_per_run",
                     "max_concurrent_runs"):
            batch.drop_column(name)
