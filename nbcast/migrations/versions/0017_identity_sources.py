"""Identities by source: an OS user and a jupyter-server user are different people.

Before this revision a name in ``users`` and ``operators`` was whoever acted under it
through either face: the command line's OS user (``NBCAST_USER``) and a
jupyter-server user of the same name shared its roles — so the server's owner
``root``, made the first operator, gave a web user called ``root`` operator powers.
From now on an identity carries its source (:mod:`nbcast.access`): the bare name is
the OS user, ``jupyter:NAME`` the jupyter-server user NAME. The columns stay as they
are (``name``, 128 characters, unique per tenant); the rows are mapped:

1. Every existing row keeps its id, name and role and is now what its name means, an
   **OS** identity: the command line acts exactly as before, and the authors, audit
   actors and ``added_by`` recorded so far (the audit chain cannot be rewritten) keep
   naming OS users.
2. Operators granted by configuration (``granted_by = 'configuration'``:
   ``NbcastApp.admin_users``, which only ever named jupyter-server users) become
   ``jupyter:NAME``. Every other operator — the first user of a fresh home (the
   server's owner or the first command-line user), and those granted with ``nbcast
   users grant NAME operator`` — stays an OS identity; a web user who had been
   granted the role by name gets it back with ``nbcast users grant jupyter:NAME
   operator``.
3. Each membership is copied to ``jupyter:NAME`` with the same role, email, time and
   ``added_by``, so the web user of that name keeps what they could do before —
   **except** the memberships of a name that is an OS operator after step 2: those
   are the owner's, the rows the web user named like them held only by that name (the
   hole this revision closes). Nobody gains a role they could not use before.
4. A name that already began with ``jupyter:`` (a web user so named, or
   ``NBCAST_USER`` set so) would now read as another web user; it becomes
   ``jupyter:`` and its whole name — the web user who could use it (no OS user can be
   called so any more). One longer than 120 characters has no room for that: the
   upgrade stops and names it, to be renamed or removed first. (Done before the
   other steps, longest first, so no rename meets another.)

Names longer than 120 characters get no jupyter copy: a jupyter-server user's name is
at most 120 now, so that its identity fits the column. No audit entry is written: the
mapping is the schema's, the same for every tenant, and this docstring is its record.

Downgrade gives each ``jupyter:NAME`` row back its bare name where that name is free
in its tenant (operators: anywhere); a copy whose OS twin exists stays as it is,
unreachable by anyone but a web user literally called ``jupyter:NAME``.

Revision ID: 0017
Revises: 0016
Create Date: 2026-12-04
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

from nbcast.errors import StorageError

revision = "0017"
down_revision = "0016"
branch_labels = None
depends_on = None

PREFIX = "jupyter:"
"""What a jupyter-server user's identity begins with (:data:`nbcast.access.JUPYTER_PREFIX`,
repeated: a migration does not change when the code does)."""

MAX_JUPYTER_NAME = 120
"""The longest jupyter-server user name (:data:`nbcast.access.MAX_JUPYTER_NAME`)."""

_PREFIXED = "substr(name, 1, 8) = 'jupyter:'"
"""A name that reads as a jupyter identity (``LIKE`` ignores case on SQLite)."""


def _prefix_legacy_names(bind: sa.Connection) -> None:
    """Step 4 of the module docstring."""
    for table, key in (("users", "id"), ("operators", "name")):
        rows = bind.execute(sa.text(f"SELECT {key}, name FROM {table} WHERE {_PREFIXED}")).all()
        for row_key, name in sorted(rows, key=lambda row: len(row[1]), reverse=True):
            if len(name) > MAX_JUPYTER_NAME:
                raise StorageError(
                    f"migration 0017: the {table[:-1]} named {name[:60]!r}… begins with "
                    f"{PREFIX!r}, which now names a jupyter-server user, and is too long to "
                    "be given the prefix; rename or remove it, then upgrade again"
                )
            bind.execute(
                sa.text(f"UPDATE {table} SET name = :new WHERE {key} = :key"),
                {"new": PREFIX + name, "key": row_key},
            )


def upgrade() -> None:
    bind = op.get_bind()
    _prefix_legacy_names(bind)
    # Step 2: admin_users named jupyter-server users.
    bind.execute(
        sa.text(
            "UPDATE operators SET name = 'jupyter:' || name "
            "WHERE granted_by = 'configuration' AND substr(name, 1, 8) <> 'jupyter:' "
            "AND length(name) <= :longest"
        ),
        {"longest": MAX_JUPYTER_NAME},
    )
    # Step 3: the web user of each member's name keeps the role, unless the name is an
    # OS operator's (the owner's rows).
    bind.execute(
        sa.text(
            "INSERT INTO users (tenant_id, name, email, role, created_at, added_by) "
            "SELECT u.tenant_id, 'jupyter:' || u.name, u.email, u.role, u.created_at, "
            "u.added_by FROM users u "
            "WHERE substr(u.name, 1, 8) <> 'jupyter:' AND length(u.name) <= :longest "
            "AND NOT EXISTS (SELECT 1 FROM operators o WHERE o.name = u.name) "
            "AND NOT EXISTS (SELECT 1 FROM users v "
            "WHERE v.tenant_id = u.tenant_id AND v.name = 'jupyter:' || u.name)"
        ),
        {"longest": MAX_JUPYTER_NAME},
    )


def downgrade() -> None:
    bind = op.get_bind()
    bind.execute(
        sa.text(
            f"UPDATE users SET name = substr(name, 9) WHERE {_PREFIXED} "
            "AND NOT EXISTS (SELECT 1 FROM users v "
            "WHERE v.tenant_id = users.tenant_id AND v.name = substr(users.name, 9))"
        )
    )
    bind.execute(
        sa.text(
            f"UPDATE operators SET name = substr(name, 9) WHERE {_PREFIXED} "
            "AND NOT EXISTS (SELECT 1 FROM operators o WHERE o.name = substr(operators.name, 9))"
        )
    )
