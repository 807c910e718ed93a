"""Governance: roles that mean something, operators, and the hash-chained audit log.

- ``users.role`` becomes a checked role (``viewer`` by default; a home upgraded from
  before roles makes each tenant's earliest user its admin, and the default tenant's
  earliest user its first operator), and records who added the member.
- ``operators``: who operates the installation.
- ``audit_log`` and ``audit_heads`` (:mod:`nbcast.tenancy.audit`); on PostgreSQL a
  trigger refuses ``UPDATE``, ``DELETE`` and ``TRUNCATE`` of ``audit_log``, and
  ``nbcast_audit_append`` appends one entry inside a statement (the signed-link
  endpoint's one round trip), hashing it exactly as the Python side does for the
  ASCII text it is given.

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-01
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.db import UTCDateTime

revision = "0011"
down_revision = "0010"
branch_labels = None
depends_on = None

BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")

APPEND_ONLY = r"""
CREATE OR REPLACE FUNCTION nbcast_audit_append_only() RETURNS trigger
LANGUAGE plpgsql AS $fn$
BEGIN
    RAISE EXCEPTION 'audit_log is append-only: % refused', TG_OP
        USING ERRCODE = 'insufficient_privilege';
END
$fn$;
CREATE TRIGGER audit_log_no_update_delete BEFORE UPDATE OR DELETE ON audit_log
    FOR EACH ROW EXECUTE FUNCTION nbcast_audit_append_only();
CREATE TRIGGER audit_log_no_truncate BEFORE TRUNCATE ON audit_log
    FOR EACH STATEMENT EXECUTE FUNCTION nbcast_audit_append_only();

CREATE OR REPLACE FUNCTION nbcast_audit_append(
    p_tenant integer, p_at timestamptz, p_actor text, p_action text, p_object text,
    p_details text) RETURNS bigint
LANGUAGE plpgsql VOLATILE AS $fn$
DECLARE
    head record;
    next_seq bigint;
    encoded text;
    digest text;
BEGIN
    INSERT INTO audit_heads (tenant_id, seq, hash) VALUES (p_tenant, 0, repeat('0', 64))
        ON CONFLICT DO NOTHING;
    SELECT seq, hash INTO head FROM audit_heads WHERE tenant_id = p_tenant FOR UPDATE;
    next_seq := head.seq + 1;
    -- nbcast.tenancy.audit.canonical, for ASCII text: a JSON array, no spaces.
    encoded := '[' || p_tenant::text || ',' || next_seq::text || ','
        || to_json(to_char(p_at AT TIME ZONE 'UTC', 'YYYY-MM-DD"T"HH24:MI:SS.US"Z"'))::text
        || ',' || to_json(p_actor)::text || ',' || to_json(p_action)::text || ','
        || to_json(p_object)::text || ',' || p_details || ']';
    digest := encode(sha256(convert_to(head.hash || E'\n' || encoded, 'UTF8')), 'hex');
    INSERT INTO audit_log (tenant_id, seq, at, actor, action, object, details, prev_hash, hash)
        VALUES (p_tenant, next_seq, p_at, p_actor, p_action, p_object, p_details, head.hash,
                digest);
    UPDATE audit_heads SET seq = next_seq, hash = digest, updated_at = p_at
        WHERE tenant_id = p_tenant;
    RETURN next_seq;
END
$fn$;
"""


def upgrade() -> None:
    with op.batch_alter_table("users") as batch:
        batch.add_column(sa.Column("added_by", sa.String(length=128), nullable=True))
    op.create_table(
        "operators",
        sa.Column("name", sa.String(length=128), nullable=False),
        sa.Column("granted_at", UTCDateTime(), nullable=False),
        sa.Column("granted_by", sa.String(length=128), nullable=False),
        sa.PrimaryKeyConstraint("name"),
    )
    op.create_table(
        "audit_log",
        sa.Column("id", BIGINT, nullable=False),
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("at", UTCDateTime(), nullable=False),
        sa.Column("actor", sa.String(length=128), nullable=False),
        sa.Column("action", sa.String(length=64), nullable=False),
        sa.Column("object", sa.String(length=255), nullable=False),
        sa.Column("details", sa.Text(), nullable=False),
        sa.Column("prev_hash", sa.String(length=64), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("id"),
        sa.UniqueConstraint("tenant_id", "seq", name="uq_audit_log_tenant_seq"),
    )
    op.create_index("ix_audit_log_tenant_at", "audit_log", ["tenant_id", "at"])
    op.create_table(
        "audit_heads",
        sa.Column("tenant_id", sa.Integer(), nullable=False),
        sa.Column("seq", sa.BigInteger(), nullable=False),
        sa.Column("hash", sa.String(length=64), nullable=False),
        sa.Column("updated_at", UTCDateTime(), nullable=True),
        sa.ForeignKeyConstraint(["tenant_id"], ["tenants.id"]),
        sa.PrimaryKeyConstraint("tenant_id"),
    )
    # A home from before roles: every user was an "author" and nobody could manage
    # anyone. Each tenant's earliest user becomes its admin, the rest keep their
    # role, and the default tenant's earliest user becomes the first operator.
    op.execute(
        "UPDATE users SET role = 'admin' WHERE id IN "
        "(SELECT min(id) FROM users GROUP BY tenant_id)"
    )
    op.execute(
        "INSERT INTO operators (name, granted_at, granted_by) "
        "SELECT u.name, u.created_at, 'migration 0011' FROM users u "
        "JOIN tenants t ON t.id = u.tenant_id "
        "WHERE t.name = 'default' ORDER BY u.id LIMIT 1"
    )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(APPEND_ONLY)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_truncate ON audit_log")
        op.execute("DROP TRIGGER IF EXISTS audit_log_no_update_delete ON audit_log")
        op.execute("DROP FUNCTION IF EXISTS nbcast_audit_append_only()")
        op.execute(
            "DROP FUNCTION IF EXISTS nbcast_audit_append(integer, timestamptz, text, text, "
            "text, text)"
        )
    op.drop_table("audit_heads")
    op.drop_index("ix_audit_log_tenant_at", "audit_log")
    op.drop_table("audit_log")
    op.drop_table("operators")
    with op.batch_alter_table("users") as batch:
        batch.drop_column("added_by")
