"""Delivery: on SQLite, a signed link's id is never handed out twice.

A link token names its link by id. SQLite gives a new row the largest id plus one, so
after the newest links are deleted (retention, a test's clean-up) a new link could get
the id an old token still names. ``signed_links`` is rebuilt ``AUTOINCREMENT`` (SQLite
then never reuses an id, even of deleted rows); its rows keep their ids (migrations run
on SQLite with foreign keys off and checked before the commit: :mod:`nbcast.db`).
PostgreSQL's sequences never reuse an id: nothing changes there.

Revision ID: 0018
Revises: 0017
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0018"
down_revision = "0017"
branch_labels = None
depends_on = None


def _rebuild(autoincrement: bool) -> None:
    if op.get_bind().dialect.name != "sqlite":
        return
    with op.batch_alter_table(
        "signed_links", recreate="always", table_kwargs={"sqlite_autoincrement": autoincrement}
    ):
        pass


def upgrade() -> None:
    _rebuild(True)


def downgrade() -> None:
    _rebuild(False)
