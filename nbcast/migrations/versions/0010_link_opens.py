"""Every opening of a signed link: link_opens.

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import UTCDateTime

revision = "0010"
down_revision = "0009"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "link_opens",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("link_id", BIGINT, nullable=False),
        sa.Column("run_id", BIGINT, nullable=False),
        sa.Column("delivery_id", BIGINT, nullable=True),
        sa.Column("opened_at", UTCDateTime(), nullable=False),
        sa.Column("network", sa.String(length=64), nullable=False),
        sa.Column("user_agent", sa.String(length=256), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.ForeignKeyConstraint(["link_id"], ["signed_links.id"]),
        sa.ForeignKeyConstraint(["run_id"], ["runs.id"]),
        sa.ForeignKeyConstraint(["delivery_id"], ["deliveries.id"]),
        sa.PrimaryKeyConstraint("id"),
    )
    op.create_index("ix_link_opens_link_id", "link_opens", ["link_id"], unique=False)
    op.create_index("ix_link_opens_run_id", "link_opens", ["run_id"], unique=False)


def downgrade() -> None:
    op.drop_table("link_opens")
