"""Executor: runs by definition and fire time, and reruns by the run they repeat.

The SLA monitor reads, for each definition it judges, the slot rows in a fire-time
range, and the reruns that repeat them (a rerun that delivered in time keeps the
slot's promise). Without these indexes the first is a scan of the tenant's runs in
that range (every definition's, filtered) and the second a scan as well, every pass:
~30 ms per definition with 10,000 definitions firing every minute.
``ix_runs_definition_fire`` serves the status pages' and the API's runs of one
definition too; ``ix_runs_rerun_of`` is partial (reruns are few).

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
        "ix_runs_definition_fire", "runs", ["definition_id", "fire_at"], unique=False
    )
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
    op.drop_index("ix_runs_definition_fire", table_name="runs")
