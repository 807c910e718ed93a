"""Governance: recipient scopes on runs, cost figures, budgets, retention, SLA misses.

- ``runs.audience`` (the recipient scope of the run, ``""`` for the base audience;
  :mod:`nbcast.definitions.audiences`) and ``runs.row_filter``; a slot has one row
  per audience: ``UNIQUE (definition_id, slot_key, audience)``.
- ``run_attempts.cpu_s`` and ``peak_mem_mb``: what the attempt's kernel used.
- ``tenants``: daily budgets (warehouse bytes, kernel CPU seconds) and retention
  (days to keep artifacts, days to keep run and delivery rows).
- ``tenant_usage_days``: each tenant's use per UTC day, what budgets are held to.
- ``cost_days``: per tenant, day and definition, the cost figures of runs that
  retention deleted (the cost report adds them to the live rows).
- ``sla_misses`` and ``sla_watermarks``: one row per slot that missed its promise,
  and how far each definition has been checked.
- ``governance_jobs``: when the daily jobs (retention) last ran, and who runs them.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0012"
down_revision = "0011"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("budget_warehouse_bytes_per_day", sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column("budget_cpu_s_per_day", sa.Float(), nullable=True))
        batch.add_column(sa.Column("retain_artifacts_days", sa.Integer(), nullable=True))
        batch.add_column(sa.Column("retain_rows_days", sa.Integer(), nullable=True))
    with op.batch_alter_table("runs") as batch:
        batch.add_column(
            sa.Column("audience", sa.String(length=16), nullable=False, server_default="")
        )
        batch.add_column(sa.Column("row_filter", JSONType, nullable=True))
        batch.drop_constraint("uq_runs_definition_slot", type_="unique")
        batch.create_unique_constraint(
            "uq_runs_definition_slot", ["definition_id", "slot_key", "audience"]
        )
    with op.batch_alter_table("run_attempts") as batch:
        batch.add_column(sa.Column("cpu_s", sa.Float(), nullable=True))
        batch.add_column(sa.Column("peak_mem_mb", sa.Float(), nullable=True))
    op.create_table(
        "tenant_usage_days",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("cpu_s", sa.Float(), nullable=False, server_default="0"),
        sa.Column("warehouse_bytes", sa.BigInteger(), nullable=False, server_default="0"),
        sa.Column("attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("tenant_id", "day"),
    )
    op.create_table(
        "cost_days",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("definition_id", sa.Integer(), nullable=False),
        sa.Column("runs", sa.Integer(), nullable=False),
        sa.Column("attempts", sa.Integer(), nullable=False),
        sa.Column("cpu_s", sa.Float(), nullable=False),
        sa.Column("wall_s", sa.Float(), nullable=False),
        sa.Column("peak_mem_mb", sa.Float(), nullable=False),
        sa.Column("warehouse_rows", sa.BigInteger(), nullable=False),
        sa.Column("warehouse_bytes", sa.BigInteger(), nullable=False),
        sa.Column("warehouse_s", sa.Float(), nullable=False),
        sa.Column("render_s", sa.Float(), nullable=False),
        sa.Column("deliveries", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.ForeignKeyConstraint(["definition_id"], ["report_definitions.id"]),
        sa.PrimaryKeyConstraint("tenant_id", "day", "definition_id"),
    )
    op.create_table(
        "sla_misses",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("definition_id", sa.Integer(), nullable=False),
        sa.Column("slot_key", sa.String(length=32), nullable=False),
        sa.Column("fire_at", UTCDateTime(), nullable=False),
        sa.Column("deadline", UTCDateTime(), nullable=False),
        sa.Column("detected_at", UTCDateTime(), nullable=False),
        sa.Column("state", sa.String(length=16), nullable=False),
        sa.Column("reason", sa.String(length=255), nullable=True),
        sa.Column("alert_state", sa.String(length=16), nullable=False),
        sa.Column("alert_attempts", sa.Integer(), nullable=False, server_default="0"),
        sa.Column("alert_not_before", UTCDateTime(), nullable=False),
        sa.Column("alert_lease_owner", sa.String(length=255), nullable=True),
        sa.Column("alert_lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("alert_channel", sa.String(length=32), nullable=True),
        sa.Column("alert_to", sa.String(length=512), nullable=True),
        sa.Column("alerted_at", UTCDateTime(), nullable=True),
        sa.Column("alert_error", JSONType, nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.ForeignKeyConstraint(["definition_id"], ["report_definitions.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("definition_id", "slot_key", name="uq_sla_misses_slot"),
    )
    op.create_index("ix_sla_misses_tenant_fire", "sla_misses", ["tenant_id", "fire_at"])
    op.create_index(
        "ix_sla_misses_alerts",
        "sla_misses",
        ["alert_not_before"],
        postgresql_where=sa.text("alert_state = 'PENDING'"),
        sqlite_where=sa.text("alert_state = 'PENDING'"),
    )
    op.create_table(
        "sla_watermarks",
        sa.Column("definition_id", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("checked_until", UTCDateTime(), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.ForeignKeyConstraint(["definition_id"], ["report_definitions.id"]),
        sa.PrimaryKeyConstraint("definition_id"),
    )
    op.create_table(
        "governance_jobs",
        sa.Column("name", sa.String(length=64), nullable=False),
        sa.Column("last_day", sa.Date(), nullable=True),
        sa.Column("last_run_at", UTCDateTime(), nullable=True),
        sa.Column("lease_owner", sa.String(length=255), nullable=True),
        sa.Column("lease_expires_at", UTCDateTime(), nullable=True),
        sa.Column("last_result", JSONType, nullable=True),
        sa.PrimaryKeyConstraint("name"),
    )


def downgrade() -> None:
    op.drop_table("governance_jobs")
    op.drop_table("sla_watermarks")
    op.drop_index("ix_sla_misses_alerts", "sla_misses")
    op.drop_index("ix_sla_misses_tenant_fire", "sla_misses")
    op.drop_table("sla_misses")
    op.drop_table("cost_days")
    op.drop_table("tenant_usage_days")
    with op.batch_alter_table("run_attempts") as batch:
        batch.drop_column("peak_mem_mb")
        batch.drop_column("cpu_s")
    with op.batch_alter_table("runs") as batch:
        batch.drop_constraint("uq_runs_definition_slot", type_="unique")
        batch.create_unique_constraint("uq_runs_definition_slot", ["definition_id", "slot_key"])
        batch.drop_column("row_filter")
        batch.drop_column("audience")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("retain_rows_days")
        batch.drop_column("retain_artifacts_days")
        batch.drop_column("budget_cpu_s_per_day")
        batch.drop_column("budget_warehouse_bytes_per_day")
