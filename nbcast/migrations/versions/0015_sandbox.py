"""Executor: each tenant's sandbox settings, and claims for dedicated workers.

``tenants`` gains ``sandbox_network`` (``host`` or ``none``: what its kernels reach,
:class:`nbcast.sandbox.policy.Network`) and ``max_processes_per_run`` (processes and
threads one attempt may have; the sandbox's ``pids`` limit).

``nbcast_claim_runs`` is migration 0013's with two changes: a last parameter
``p_tenants integer[]`` — NULL claims for every tenant, an array only for those
(``nbcast worker --tenant``) — and two more columns in each lease,
``sandbox_network`` and ``max_processes_per_run``. Its text is made from 0013's by
those edits, each checked, rather than copied whole a third time.

Revision ID: 0015
Revises: 0014
Create Date: 2026-12-03
"""

from __future__ import annotations

from importlib import import_module

import sqlalchemy as sa
from alembic import op

revision = "0015"
down_revision = "0014"
branch_labels = None
depends_on = None

_PREVIOUS = import_module("nbcast.migrations.versions.0013_daily_budgets")
OLD_SIGNATURE = _PREVIOUS.NEW_SIGNATURE
NEW_SIGNATURE = OLD_SIGNATURE.replace("boolean, boolean)", "boolean, boolean, integer[])")

_EDITS = (
    (
        "p_real boolean, p_budgets boolean)",
        "p_real boolean, p_budgets boolean, p_tenants integer[] DEFAULT NULL)",
    ),
    (
        "warehouse jsonb, audience text, row_filter jsonb, bytes_left bigint)",
        "warehouse jsonb, audience text, row_filter jsonb, bytes_left bigint,\n"
        "    sandbox_network text, max_processes_per_run integer)",
    ),
    (
        "WHERE w.waiting > 0 AND a.live < te.max_concurrent_runs",
        "WHERE w.waiting > 0 AND a.live < te.max_concurrent_runs\n"
        "          AND (p_tenants IS NULL OR te.id = ANY (p_tenants))",
    ),
    (
        "te.warehouse, l.audience::text, l.row_filter, left_bytes",
        "te.warehouse, l.audience::text, l.row_filter, left_bytes,\n"
        "               te.sandbox_network::text, te.max_processes_per_run",
    ),
)


def _claim_function() -> str:
    text: str = _PREVIOUS.CLAIM_FUNCTION
    for old, new in _EDITS:
        if text.count(old) != 1:
            raise RuntimeError(f"migration 0015: 0013's claim function changed at {old!r}")
        text = text.replace(old, new)
    return text


CLAIM_FUNCTION = _claim_function()


def upgrade() -> None:
    with op.batch_alter_table("tenants") as batch:
        batch.add_column(
            sa.Column("sandbox_network", sa.String(8), nullable=False, server_default="host")
        )
        batch.add_column(
            sa.Column("max_processes_per_run", sa.Integer(), nullable=False, server_default="256")
        )
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {OLD_SIGNATURE}")
        op.execute(CLAIM_FUNCTION)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.execute(f"DROP FUNCTION IF EXISTS {NEW_SIGNATURE}")
        op.execute(_PREVIOUS.CLAIM_FUNCTION)
    with op.batch_alter_table("tenants") as batch:
        batch.drop_column("max_processes_per_run")
        batch.drop_column("sandbox_network")
