"""Scheduler: test runs carry the addresses they go to (``runs.test_to``).

A run of kind ``test`` (``nbcast run --test``) is delivered only to the addresses it
was asked for, never to the definition's subscribers; the column is None for every
other run.

Revision ID: 0019
Revises: 0018
Create Date: 2026-12-03
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType

revision = "0019"
down_revision = "0018"
branch_labels = None
depends_on = None


def upgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.add_column(sa.Column("test_to", JSONType, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("runs") as batch:
        batch.drop_column("test_to")
