"""Two PostgreSQL roles: the owner that migrates, the application that owns nothing.

On PostgreSQL, nbcast's services should connect (``NBCAST_DATABASE_URL``) as a role
that **owns nothing**: not the database, not the schema, not one table or function.
A role that owns ``audit_log`` may disable its append-only trigger
(``ALTER TABLE … DISABLE TRIGGER``) and a superuser may switch every trigger off for
its session (``SET session_replication_role = replica``); the application role may do
neither, nor ``GRANT`` itself more, so neither a bug of nbcast's nor whoever holds its
password can rewrite the audit log through it. Migrations run as the **owner** role
(``NBCAST_DATABASE_OWNER_URL``): ``nbcast db upgrade`` with it set migrates and then
grants the application role what it needs (:func:`grant_application_role`):

- ``SELECT, INSERT, UPDATE, DELETE`` on every table, except ``audit_log`` and
  ``audit_checkpoints`` (``SELECT, INSERT`` only: their rows are never changed) and
  ``alembic_version`` (``SELECT``: a service checks the schema, never moves it);
- ``USAGE, SELECT`` on every sequence, ``EXECUTE`` on nbcast's functions (the claim,
  the audit append), ``USAGE`` on the schema.

The grants are made again at every upgrade, so tables a later migration adds are
covered. A service that finds the schema behind, without the owner's URL, stops with
one line saying to run ``nbcast db upgrade`` as the owner. With one URL for both (the
embedded SQLite default, or a PostgreSQL role that owns the schema, as in development),
nothing changes: that role migrates on first use as before.
"""

from __future__ import annotations

import sqlalchemy as sa

from nbcast.errors import StorageError

__all__ = ["APPEND_ONLY_TABLES", "application_role", "grant_application_role"]

APPEND_ONLY_TABLES = ("audit_log", "audit_checkpoints")
"""Tables whose rows the application role may add but never change or delete."""


def application_role(url: str) -> str | None:
    """The role (user name) of a PostgreSQL URL; None for another database or a URL
    without one (libpq's default user)."""
    if not url.startswith("postgresql"):
        return None
    user = sa.engine.make_url(url).username
    return user or None


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def grant_application_role(conn: sa.Connection, role: str) -> None:
    """Grant ``role`` what the application needs and nothing more (module docstring).
    Runs as the owner, in the migration's transaction."""
    exists = conn.execute(sa.text("SELECT 1 FROM pg_roles WHERE rolname = :r"), {"r": role})
    if exists.scalar() is None:
        raise StorageError(f"the application role {role[:64]!r} does not exist")
    who = _ident(role)
    schema = _ident(str(conn.execute(sa.text("SELECT current_schema()")).scalar()))
    for statement in (
        f"GRANT USAGE ON SCHEMA {schema} TO {who}",
        f"GRANT SELECT, INSERT, UPDATE, DELETE ON ALL TABLES IN SCHEMA {schema} TO {who}",
        f"REVOKE UPDATE, DELETE, TRUNCATE ON {', '.join(APPEND_ONLY_TABLES)} FROM {who}",
        f"REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON alembic_version FROM {who}",
        f"GRANT USAGE, SELECT ON ALL SEQUENCES IN SCHEMA {schema} TO {who}",
        f"GRANT EXECUTE ON ALL FUNCTIONS IN SCHEMA {schema} TO {who}",
    ):
        conn.execute(sa.text(statement))
