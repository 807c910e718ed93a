"""Delivery: the outbox, renditions, the delivery ledger and its attempts,
unsubscriptions, signed links.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import JSONType, UTCDateTime

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table('unsubscriptions',
    sa.Column('id', sa.Integer(), nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('scope', sa.String(length=128), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('recipient', sa.String(length=512), nullable=False),
    sa.Column('source', sa.String(length=32), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('tenant_id', 'scope', 'channel', 'recipient', name='uq_unsubscriptions_scope')
    )
    op.create_table('deliveries',
    sa.Column('id', BIGINT, nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('run_id', BIGINT, nullable=False),
    sa.Column('definition_id', sa.Integer(), nullable=False),
    sa.Column('channel', sa.String(length=32), nullable=False),
    sa.Column('recipient', sa.String(length=512), nullable=False),
    sa.Column('formats', JSONType, nullable=False),
    sa.Column('only_if', sa.String(length=16), nullable=True),
    sa.Column('fire_at', UTCDateTime(), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('reason', sa.String(length=32), nullable=True),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('retry_base', sa.Integer(), nullable=False),
    sa.Column('not_before', UTCDateTime(), nullable=False),
    sa.Column('lease_owner', sa.String(length=255), nullable=True),
    sa.Column('lease_expires_at', UTCDateTime(), nullable=True),
    sa.Column('outcome_unknown', sa.Boolean(), nullable=False),
    sa.Column('possible_duplicate', sa.Boolean(), nullable=False),
    sa.Column('content_sha256', sa.String(length=64), nullable=True),
    sa.Column('receipt', JSONType, nullable=True),
    sa.Column('error', JSONType, nullable=True),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('sent_at', UTCDateTime(), nullable=True),
    sa.Column('updated_at', UTCDateTime(), nullable=False),
    sa.ForeignKeyConstraint(['definition_id'], ['report_definitions.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'channel', 'recipient', name='uq_deliveries_run_recipient')
    )
    op.create_index('ix_deliveries_due', 'deliveries', ['not_before', 'id'], unique=False, postgresql_where=sa.text("state = 'PENDING'"), sqlite_where=sa.text("state = 'PENDING'"))
    op.create_index('ix_deliveries_recipient', 'deliveries', ['definition_id', 'channel', 'recipient', 'fire_at'], unique=False)
    op.create_index(op.f('ix_deliveries_run_id'), 'deliveries', ['run_id'], unique=False)
    op.create_index('ix_deliveries_sending', 'deliveries', ['lease_expires_at'], unique=False, postgresql_where=sa.text("state = 'SENDING'"), sqlite_where=sa.text("state = 'SENDING'"))
    op.create_table('delivery_outbox',
    sa.Column('id', BIGINT, nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('run_id', BIGINT, nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('consumed_at', UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id')
    )
    op.create_index('ix_delivery_outbox_pending', 'delivery_outbox', ['id'], unique=False, postgresql_where=sa.text('consumed_at IS NULL'), sqlite_where=sa.text('consumed_at IS NULL'))
    op.create_table('renditions',
    sa.Column('id', BIGINT, nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('run_id', BIGINT, nullable=False),
    sa.Column('format', sa.String(length=16), nullable=False),
    sa.Column('variant', sa.String(length=16), nullable=False),
    sa.Column('state', sa.String(length=16), nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('lease_owner', sa.String(length=255), nullable=True),
    sa.Column('lease_expires_at', UTCDateTime(), nullable=True),
    sa.Column('sha256', sa.String(length=64), nullable=True),
    sa.Column('size', sa.BigInteger(), nullable=True),
    sa.Column('filename', sa.String(length=255), nullable=True),
    sa.Column('media_type', sa.String(length=128), nullable=True),
    sa.Column('seconds', sa.Float(), nullable=True),
    sa.Column('error', JSONType, nullable=True),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('rendered_at', UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('run_id', 'format', 'variant', name='uq_renditions_run_format')
    )
    op.create_table('delivery_attempts',
    sa.Column('id', BIGINT, nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('delivery_id', BIGINT, nullable=False),
    sa.Column('attempt', sa.Integer(), nullable=False),
    sa.Column('worker', sa.String(length=255), nullable=False),
    sa.Column('started_at', UTCDateTime(), nullable=False),
    sa.Column('ended_at', UTCDateTime(), nullable=True),
    sa.Column('outcome', sa.String(length=16), nullable=True),
    sa.Column('detail', JSONType, nullable=True),
    sa.ForeignKeyConstraint(['delivery_id'], ['deliveries.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id'),
    sa.UniqueConstraint('delivery_id', 'attempt', name='uq_delivery_attempts_attempt')
    )
    op.create_table('signed_links',
    sa.Column('id', BIGINT, nullable=False),
    sa.Column('tenant_id', sa.Integer(), nullable=False),
    sa.Column('run_id', BIGINT, nullable=False),
    sa.Column('delivery_id', BIGINT, nullable=True),
    sa.Column('recipient', sa.String(length=512), nullable=False),
    sa.Column('sha256', sa.String(length=64), nullable=False),
    sa.Column('filename', sa.String(length=255), nullable=False),
    sa.Column('media_type', sa.String(length=128), nullable=False),
    sa.Column('key_id', sa.String(length=32), nullable=False),
    sa.Column('created_at', UTCDateTime(), nullable=False),
    sa.Column('expires_at', UTCDateTime(), nullable=False),
    sa.Column('revoked_at', UTCDateTime(), nullable=True),
    sa.ForeignKeyConstraint(['delivery_id'], ['deliveries.id'], ),
    sa.ForeignKeyConstraint(['run_id'], ['runs.id'], ),
    sa.ForeignKeyConstraint(['tenant_id'], ['tenants.id'], ),
    sa.PrimaryKeyConstraint('id')
    )
    op.create_index(op.f('ix_signed_links_run_id'), 'signed_links', ['run_id'], unique=False)

    if op.get_bind().dialect.name == "postgresql":
        # deliveries is a queue like runs (migration 0004).
        op.execute(
            "ALTER TABLE deliveries SET (autovacuum_vacuum_scale_factor = 0.01, "
            "autovacuum_vacuum_threshold = 1000, autovacuum_vacuum_cost_delay = 0)"
        )


def downgrade() -> None:
    for table in ("signed_links", "delivery_attempts", "renditions", "delivery_outbox",
                  "deliveries", "unsubscriptions"):
        op.drop_table(table)
