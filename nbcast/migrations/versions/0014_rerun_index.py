"""Executor: an index of reruns by the run they repeat.

The SLA monitor asks, for each batch of slot rows it judges, which reruns repeat
them (a rerun that delivered in time keeps the slot's promise). Without an index on
``rerun_of`` that is a scan of the tenant's runs in the fire-time range, every pass;
the index is partial (reruns are few), so it costs nothing on the hot insert path
of scheduled runs.

Revision ID: 0014
Revises: 0013
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0014"
down_revision = "0013"
branch_labels = None
depends_on = None

_WHERE = "rerun_of IS NOT NULL"


def upgrade() -> None:
    op.create_index(
        "ix_runs_rerun_of",
        "runs",
        ["rerun_of"],
        unique=False,
        postgresql_where=sa.text(_WHERE),
        sqlite_where=sa.text(_WHERE),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_rerun_of", table_name="runs")
