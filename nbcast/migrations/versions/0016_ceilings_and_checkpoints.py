"""Governance: quota ceilings per tenant, and signed checkpoints of the audit chain.

- ``tenants.quota_ceilings`` (JSON: quota field -> the most a tenant admin may set,
  ``null`` for a budget an admin may remove): set by operators
  (:mod:`nbcast.tenancy.ceilings`). A tenant that exists when this runs gets its
  current quotas as its ceilings, so nothing an admin set before can be raised now
  without an operator.
- ``audit_checkpoints``: each a tenant's audit head (``seq``, ``hash``) at a moment,
  signed with a key the database does not hold (:mod:`nbcast.tenancy.checkpoints`);
  one per tenant and ``seq`` (replicas that checkpoint the same head record it once).
  Append-only like ``audit_log``: on PostgreSQL a trigger refuses ``UPDATE``,
  ``DELETE`` and ``TRUNCATE``.

Revision ID: 0016
Revises: 0015
Create Date: 2026-12-03
"""

from __future__ import annotations

import json

import sqlalchemy as sa
from alembic import op

from nbcast.db import UTCDateTime

revision = "0016"
down_revision = "0015"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")
JSON = sa.JSON(none_as_null=True).with_variant(sa.dialects.postgresql.JSONB(), "postgresql")

CEILING_FIELDS = (
    "max_concurrent_runs",
    "cpus_per_run",
    "memory_mb_per_run",
    "run_timeout_s",
    "max_attempts",
    "share",
    "max_processes_per_run",
    "budget_warehouse_bytes_per_day",
    "budget_cpu_s_per_day",
)

APPEND_ONLY = r"""
CREATE TRIGGER audit_checkpoints_no_update_delete BEFORE UPDATE OR DELETE
    ON audit_checkpoints FOR EACH ROW EXECUTE FUNCTION nbcast_audit_append_only();
CREATE TRIGGER audit_checkpoints_no_truncate BEFORE TRUNCATE ON audit_checkpoints
    FOR EACH STATEMENT EXECUTE FUNCTION nbcast_audit_append_only();
"""


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(sa.Column("quota_ceilings", JSON, nullable=True))
    bind = op.get_bind()
    tenants = sa.table("tenants", sa.column("id"), *(sa.column(f) for f in CEILING_FIELDS))
    for row in bind.execute(sa.select(tenants)).mappings().all():
        ceilings = {field: row[field] for field in CEILING_FIELDS}
        bind.execute(
            sa.text("UPDATE tenants SET quota_ceilings = :c WHERE id = :id").bindparams(
                sa.bindparam("c", type_=JSON)
            ),
            {"c": json.loads(json.dumps(ceilings)), "id": row["id"]},
        )
    op.create_table(
        "audit_checkpoints",
        sa.Column("id", BIGINT, primary_key=True, autoincrement=True),
        sa.Column("tenant_id", sa.Integer(), sa.ForeignKey("tenants.id"), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("head", sa.String(64), nullable=False),
        sa.Column("made_at", UTCDateTime(), nullable=False),
        sa.Column("made_by", sa.String(128), nullable=False),
        sa.Column("key_id", sa.String(64), nullable=False),
        sa.Column("signature", sa.String(128), nullable=False),
        sqlite_autoincrement=True,
    )
    op.create_index(
        "uq_audit_checkpoints_tenant_seq", "audit_checkpoints", ["tenant_id", "seq"], unique=True
    )
    if bind.dialect.name == "postgresql":
        op.execute(APPEND_ONLY)


def downgrade() -> None:
    op.drop_index("uq_audit_checkpoints_tenant_seq", table_name="audit_checkpoints")
    op.drop_table("audit_checkpoints")
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("quota_ceilings")
