"""Isolation of poison definitions: a failure is recorded on the definition's
scheduler state, which is retried with backoff while the others go on.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import UTCDateTime

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("schedule_states") as batch:
        batch.add_column(sa.Column("error", sa.Text(), nullable=True))
        batch.add_column(sa.Column("failures", sa.Integer(), nullable=False, server_default="0"))
        batch.add_column(sa.Column("failed_at", UTCDateTime(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("schedule_states") as batch:
        batch.drop_column("failed_at")
        batch.drop_column("failures")
        batch.drop_column("error")
