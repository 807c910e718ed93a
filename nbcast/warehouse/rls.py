"""Recipient-scoped data on PostgreSQL: row-level security the notebook cannot undo.

A recipient-scoped run (its audience has a ``row_filter``, :mod:`nbcast.definitions.
audiences`) must see only its rows of the tenant's PostgreSQL warehouse, whatever its
code does. A session setting would not do: any session may ``SET`` or ``RESET`` it.
So the policies are keyed on the **session user**, which a non-superuser session cannot
change (``SET ROLE`` changes ``current_user`` only):

- nbcast keeps, in the warehouse database, a schema ``nbcast_rls`` owned by the
  warehouse's admin role: the table ``row_filters`` (a login role's name, its filter's
  attributes as ``jsonb``, its password; readable by the admin alone) and two
  ``SECURITY DEFINER`` functions, ``nbcast_rls.scoped()`` (whether the session user is
  such a role) and ``nbcast_rls.row_filter(attribute)`` (its value of ``attribute``, as
  text).
- For every (warehouse database, reader role, row filter) there is one login role
  ``nbcast_rf_<24 hex digits>`` (:func:`scoped_url` makes it on first use), with a
  random password, ``NOSUPERUSER NOBYPASSRLS NOCREATEDB NOCREATEROLE NOREPLICATION``,
  member of the **reader role** (``NOLOGIN``; it holds ``SELECT`` on the tables
  scoped runs may read).
- :func:`protect_table` turns row-level security on for a table (``ENABLE`` and
  ``FORCE``) with one restrictive policy per protected column::

      CREATE POLICY nbcast_rf_region ON sales.orders AS RESTRICTIVE FOR ALL TO PUBLIC
        USING ((SELECT NOT nbcast_rls.scoped())
               OR region = (SELECT CAST(nbcast_rls.row_filter('region') AS text)))
        WITH CHECK (…the same…);

  so a scoped session sees only the rows whose ``region`` is its filter's, and none at
  all of a table protected on an attribute its filter does not name (fail closed); a
  value the column's type cannot take (``"EMEA"`` for an integer) fails the query. For
  a table that had no row-level security before, it adds the permissive policy
  ``nbcast_unscoped`` (``USING (true)``), so every other session — the tenant's own
  unscoped connection, the loading jobs, the owner (``FORCE`` applies to it too) —
  sees and writes what it did before; privileges still decide who may read at all. A
  table that already had row-level security keeps its own permissive policies.

The kernel of a scoped run receives only the scoped role's URL
(:func:`scoped_connections`, which the worker calls when it writes the run's warehouse
context); ``RESET ALL``, ``SET ROLE NONE`` or ``SET ROLE nbcast_reader``, custom
settings and second connections with that URL change nothing, since every one of them
has the same session user.

Tenant configuration (a connection of the tenant's ``warehouse`` setting)::

    {"kind": "sqlalchemy",
     "url": "postgresql+psycopg://reports:…@db.internal/sales",
     "admin_url": "postgresql+psycopg://nbcast_admin:…@db.internal/sales",
     "row_filter": {"reader_role": "nbcast_reader"}}

``url`` is what unscoped runs use (and where scoped URLs point: its host, port,
database and driver with the scoped role's name and password). ``admin_url`` is a role
that owns the protected tables (or a superuser) and has ``CREATEROLE``; it is read by
the worker only and never reaches a kernel. ``row_filter`` is optional
(``reader_role`` defaults to :data:`DEFAULT_READER_ROLE`). A session counts as scoped
when its user has a row in ``row_filters`` or is named ``nbcast_rf_…`` (a filter role
of another database on the same server sees nothing protected here).

Set-up, once per warehouse database and protected column::

    from nbcast.warehouse import rls
    rls.protect_table(ADMIN_URL, "sales.orders", "region")             # attribute region
    rls.protect_table(ADMIN_URL, "sales.stores", "region_code", "region")

or ``nbcast warehouse protect TABLE COLUMN [--attribute A]`` with the admin URL in
``$NBCAST_WAREHOUSE_ADMIN_URL``. Grant the reader role nothing that holds rows of
several recipients unless it is protected.

This module runs in workers and in the CLI, never in a kernel; like the rest of
:mod:`nbcast.warehouse` it imports no plane, and SQLAlchemy only when called.
"""

from __future__ import annotations

import hashlib
import json
import re
import secrets
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from nbcast.errors import ConfigError
from nbcast.warehouse.connections import SCOPED_ROLE_PREFIX
from nbcast.warehouse.context import parse_row_filter

if TYPE_CHECKING:
    import sqlalchemy as sa

__all__ = [
    "DEFAULT_READER_ROLE",
    "SCHEMA",
    "ProtectedTable",
    "RowFilterSetupError",
    "close",
    "drop_scoped_roles",
    "ensure_setup",
    "protect_table",
    "scoped_connections",
    "scoped_role_name",
    "scoped_url",
]

DEFAULT_READER_ROLE = "nbcast_reader"
"""The reader role when a connection's ``row_filter`` set-up names none."""
SCHEMA = "nbcast_rls"
"""The warehouse schema holding the mapping table and the policy functions."""

_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")
_LOCK_KEY = 0x6E62_6373  # "nbcs": serializes set-up and role changes per database


class RowFilterSetupError(ConfigError):
    """A connection cannot be scoped to a row filter: its set-up is missing or wrong,
    or the warehouse refused a step (the message says which)."""


@dataclass(frozen=True, kw_only=True)
class ProtectedTable:
    """What :func:`protect_table` did to one table."""

    table: str
    column: str
    attribute: str
    policy: str
    unscoped_policy_added: bool
    """Whether the table had no row-level security before (``nbcast_unscoped`` added)."""


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _checked_role(name: Any, what: str) -> str:
    if not isinstance(name, str) or not _IDENTIFIER.fullmatch(name):
        raise RowFilterSetupError(f"{what} must be a role name (letters, digits, _), not {name!r}")
    return name


_engines_lock = threading.Lock()
_engines: dict[str, sa.Engine] = {}
_set_up: set[tuple[str, str]] = set()


def _engine(admin_url: str) -> sa.Engine:
    import sqlalchemy as sa

    with _engines_lock:
        engine = _engines.get(admin_url)
        if engine is None:
            try:
                engine = sa.create_engine(
                    admin_url, pool_pre_ping=True, pool_size=1, max_overflow=4
                )
            except (sa.exc.ArgumentError, ImportError) as exc:
                raise RowFilterSetupError(f"admin_url: {exc}") from None
            if engine.dialect.name != "postgresql":
                engine.dispose()
                raise RowFilterSetupError("admin_url must be a PostgreSQL URL")
            _engines[admin_url] = engine
        return engine


def close() -> None:
    """Dispose of the admin connections this process holds (and forget what it set up)."""
    with _engines_lock:
        engines = list(_engines.values())
        _engines.clear()
        _set_up.clear()
    for engine in engines:
        engine.dispose()


def _setup_sql(reader: str) -> list[str]:
    schema, r = _ident(SCHEMA), _ident(reader)
    definer = "LANGUAGE sql STABLE SECURITY DEFINER SET search_path = pg_catalog, pg_temp"
    return [
        f"CREATE SCHEMA IF NOT EXISTS {schema}",
        f"""CREATE TABLE IF NOT EXISTS {schema}.row_filters (
              role_name text PRIMARY KEY,
              attrs jsonb NOT NULL,
              secret text NOT NULL,
              reader_role text NOT NULL,
              created_at timestamptz NOT NULL DEFAULT now())""",
        f"REVOKE ALL ON {schema}.row_filters FROM PUBLIC",
        f"""CREATE OR REPLACE FUNCTION {schema}.scoped() RETURNS boolean {definer} AS $$
              SELECT starts_with(session_user::text, '{SCOPED_ROLE_PREFIX}')
                  OR EXISTS (SELECT 1 FROM {schema}.row_filters
                             WHERE role_name = session_user::text) $$""",
        f"""CREATE OR REPLACE FUNCTION {schema}.row_filter(attribute text) RETURNS text
              {definer} AS $$
              SELECT attrs ->> attribute FROM {schema}.row_filters
              WHERE role_name = session_user::text $$""",
        # Policies run their expressions as the querying role: everyone may call these.
        f"GRANT USAGE ON SCHEMA {schema} TO PUBLIC",
        f"GRANT EXECUTE ON FUNCTION {schema}.scoped(), {schema}.row_filter(text) TO PUBLIC",
        f"""DO $$ BEGIN
              IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{reader}') THEN
                CREATE ROLE {r} NOLOGIN NOSUPERUSER NOBYPASSRLS;
              END IF;
            END $$""",
    ]


def _ensure(conn: sa.Connection, admin_url: str, reader: str) -> None:
    """Create the schema, table, functions and reader role unless this process did."""
    import sqlalchemy as sa

    if (admin_url, reader) in _set_up:
        return
    conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
    for statement in _setup_sql(reader):
        conn.exec_driver_sql(statement)
    _set_up.add((admin_url, reader))


def _failed(what: str, exc: BaseException) -> RowFilterSetupError:
    detail = " ".join(str(getattr(exc, "orig", None) or exc).split())[:300]
    return RowFilterSetupError(f"{what}: {detail}")


def ensure_setup(admin_url: str, reader_role: str = DEFAULT_READER_ROLE) -> None:
    """Create, if missing, the ``nbcast_rls`` schema, its table and functions and the
    reader role in the warehouse database of ``admin_url`` (idempotent)."""
    import sqlalchemy as sa

    reader = _checked_role(reader_role, "reader_role")
    try:
        with _engine(admin_url).begin() as conn:
            _set_up.discard((admin_url, reader))
            _ensure(conn, admin_url, reader)
    except sa.exc.DBAPIError as exc:
        raise _failed("setting up row filters", exc) from None


def _split_table(table: str) -> tuple[str, str]:
    parts = table.split(".")
    if len(parts) > 2 or not all(_IDENTIFIER.fullmatch(p) for p in parts):
        raise RowFilterSetupError(f"table must be [schema.]name, not {table[:80]!r}")
    return (parts[0], parts[1]) if len(parts) == 2 else ("public", parts[0])


def _policy_name(column: str) -> str:
    name = f"nbcast_rf_{column}"
    if len(name) <= 63:
        return name
    return f"nbcast_rf_{hashlib.sha256(column.encode()).hexdigest()[:20]}"


def protect_table(
    admin_url: str,
    table: str,
    column: str,
    attribute: str | None = None,
    *,
    reader_role: str = DEFAULT_READER_ROLE,
) -> ProtectedTable:
    """Filter ``table`` for scoped runs: a scoped session sees only rows whose
    ``column`` equals its row filter's ``attribute`` (default: the column's name), the
    value cast to the column's type (module docstring). Also grants the reader role
    ``SELECT`` on the table and ``USAGE`` on its schema. Idempotent: protecting again
    replaces the column's policy.

    ``admin_url`` must be a role that owns the table (or a superuser) and may create
    roles. Raises :class:`RowFilterSetupError`.
    """
    import sqlalchemy as sa

    reader = _checked_role(reader_role, "reader_role")
    schema, name = _split_table(table)
    if not _IDENTIFIER.fullmatch(column):
        raise RowFilterSetupError(f"column must be a column name, not {column[:80]!r}")
    attribute = column if attribute is None else attribute
    if not _IDENTIFIER.fullmatch(attribute):
        raise RowFilterSetupError(f"attribute must be named like a column, not {attribute[:80]!r}")
    qualified = f"{_ident(schema)}.{_ident(name)}"
    policy = _policy_name(column)
    try:
        with _engine(admin_url).begin() as conn:
            _ensure(conn, admin_url, reader)
            found = conn.execute(
                sa.text(
                    "SELECT c.relrowsecurity, format_type(a.atttypid, a.atttypmod) "
                    "FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
                    "LEFT JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = :column "
                    "AND a.attnum > 0 AND NOT a.attisdropped "
                    "WHERE n.nspname = :schema AND c.relname = :name AND c.relkind IN ('r', 'p')"
                ),
                {"schema": schema, "name": name, "column": column},
            ).one_or_none()
            if found is None:
                raise RowFilterSetupError(f"no table {schema}.{name} in the warehouse")
            had_rls, column_type = found
            if column_type is None:
                raise RowFilterSetupError(f"table {schema}.{name} has no column {column!r}")
            value = f"(SELECT CAST({SCHEMA}.row_filter('{attribute}') AS {column_type}))"
            check = f"((SELECT NOT {SCHEMA}.scoped()) OR {_ident(column)} = {value})"
            statements = [
                f"ALTER TABLE {qualified} ENABLE ROW LEVEL SECURITY",
                f"ALTER TABLE {qualified} FORCE ROW LEVEL SECURITY",
                f"DROP POLICY IF EXISTS {_ident(policy)} ON {qualified}",
                f"CREATE POLICY {_ident(policy)} ON {qualified} AS RESTRICTIVE FOR ALL "
                f"TO PUBLIC USING {check} WITH CHECK {check}",
                f"GRANT USAGE ON SCHEMA {_ident(schema)} TO {_ident(reader)}",
                f"GRANT SELECT ON {qualified} TO {_ident(reader)}",
            ]
            if not had_rls:  # everyone else keeps seeing what they saw without RLS
                statements[2:2] = [
                    f"DROP POLICY IF EXISTS nbcast_unscoped ON {qualified}",
                    f"CREATE POLICY nbcast_unscoped ON {qualified} AS PERMISSIVE FOR ALL "
                    "TO PUBLIC USING (true) WITH CHECK (true)",
                ]
            for statement in statements:
                conn.exec_driver_sql(statement)
    except sa.exc.DBAPIError as exc:
        raise _failed(f"protecting {schema}.{name}", exc) from None
    return ProtectedTable(
        table=f"{schema}.{name}",
        column=column,
        attribute=attribute,
        policy=policy,
        unscoped_policy_added=not had_rls,
    )


def scoped_role_name(database: str, reader_role: str, row_filter: Mapping[str, Any]) -> str:
    """The login role of ``row_filter`` in ``database`` under ``reader_role``:
    ``nbcast_rf_`` and 24 hex digits of a hash of the three (roles are cluster-wide)."""
    canonical = json.dumps(
        {"database": database, "reader": reader_role, "filter": dict(row_filter)},
        sort_keys=True,
        separators=(",", ":"),
    )
    return SCOPED_ROLE_PREFIX + hashlib.sha256(canonical.encode()).hexdigest()[:24]


def scoped_url(
    admin_url: str,
    url: str,
    row_filter: Mapping[str, Any],
    *,
    reader_role: str = DEFAULT_READER_ROLE,
) -> str:
    """``url`` as the login role of ``row_filter``, which is created (or repaired) as
    needed through ``admin_url`` (module docstring). Concurrent callers agree: the
    role's password is made once and kept in ``nbcast_rls.row_filters``. Each call
    also resets the role's attributes, password and per-role settings, so what a
    hostile session of the role did to it (``ALTER ROLE … PASSWORD``, ``… SET``) lasts
    until the next scoped run at most."""
    import sqlalchemy as sa

    reader = _checked_role(reader_role, "reader_role")
    attrs = parse_row_filter(row_filter)
    if not attrs:
        raise RowFilterSetupError("scoped_url needs a row filter with at least one attribute")
    target = sa.engine.make_url(url)
    if target.get_backend_name() != "postgresql":
        raise RowFilterSetupError("row filters are enforced on PostgreSQL URLs only")
    attrs_json = json.dumps(attrs, sort_keys=True)
    lookup = sa.text(
        f"SELECT f.secret FROM {SCHEMA}.row_filters f JOIN pg_roles r ON r.rolname = f.role_name "
        "WHERE f.role_name = :role AND f.attrs = CAST(:attrs AS jsonb) "
        "AND f.reader_role = :reader"
    )
    try:
        with _engine(admin_url).begin() as conn:
            _ensure(conn, admin_url, reader)
            database = conn.exec_driver_sql("SELECT current_database()").scalar_one()
            role = scoped_role_name(str(database), reader, attrs)
            # One worker at a time changes roles: concurrent ALTER ROLEs of one role fail.
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            values = {"role": role, "attrs": attrs_json, "reader": reader}
            secret = conn.execute(lookup, values).scalar()
            if secret is None:
                secret = _make_role(conn, role, reader, attrs_json)
            else:  # undo what a session of the role may do to it (its password, settings)
                _check_role(conn, role)
                conn.exec_driver_sql(f"ALTER ROLE {_ident(role)} {_attributes(str(secret))}")
                conn.exec_driver_sql(f"ALTER ROLE {_ident(role)} RESET ALL")
    except sa.exc.DBAPIError as exc:
        _set_up.discard((admin_url, reader))  # the schema may be gone: set it up again
        raise _failed("making the row filter's role", exc) from None
    query = {k: v for k, v in target.query.items() if k not in ("user", "password")}
    scoped = target.set(username=role, password=str(secret), query=query)
    return scoped.render_as_string(hide_password=False)


def _attributes(secret: str) -> str:
    """What a row filter's role may do, whatever a session of it changed: log in and
    inherit the reader's privileges, nothing else (``NOSUPERUSER``, ``NOBYPASSRLS`` and
    ``NOREPLICATION`` are given when it is created: only a superuser may alter those,
    and a role that has one is refused, :func:`_check_role`)."""
    if not re.fullmatch(r"[0-9a-f]{16,128}", secret):  # it goes into a quoted literal
        raise RowFilterSetupError("a row filter role's recorded secret is malformed")
    return f"LOGIN INHERIT NOCREATEDB NOCREATEROLE CONNECTION LIMIT -1 PASSWORD '{secret}'"


def _check_role(conn: sa.Connection, role: str) -> None:
    """Refuse a role a superuser gave powers that would let it see every row."""
    import sqlalchemy as sa

    powers = conn.execute(
        sa.text(
            "SELECT rolsuper OR rolbypassrls OR rolreplication FROM pg_roles WHERE rolname = :r"
        ),
        {"r": role},
    ).scalar()
    if powers:
        raise RowFilterSetupError(
            f"role {role} has SUPERUSER, BYPASSRLS or REPLICATION: drop it "
            "(nbcast.warehouse.rls.drop_scoped_roles) and it is made again"
        )


def _make_role(conn: sa.Connection, role: str, reader: str, attrs_json: str) -> str:
    """Create (or reset) ``role`` with a new password and record its filter."""
    import sqlalchemy as sa

    secret = secrets.token_hex(24)  # hex only: safe inside the quoted literal below
    exists = conn.execute(
        sa.text("SELECT 1 FROM pg_roles WHERE rolname = :role"), {"role": role}
    ).scalar()
    attributes = _attributes(secret)
    if exists:
        _check_role(conn, role)
        conn.exec_driver_sql(f"ALTER ROLE {_ident(role)} {attributes}")
        conn.exec_driver_sql(f"GRANT {_ident(reader)} TO {_ident(role)}")
    else:
        safe = "NOSUPERUSER NOBYPASSRLS NOREPLICATION"
        conn.exec_driver_sql(
            f"CREATE ROLE {_ident(role)} {attributes} {safe} IN ROLE {_ident(reader)}"
        )
    conn.execute(
        sa.text(
            f"INSERT INTO {SCHEMA}.row_filters (role_name, attrs, secret, reader_role) "
            "VALUES (:role, CAST(:attrs AS jsonb), :secret, :reader) "
            "ON CONFLICT (role_name) DO UPDATE SET attrs = excluded.attrs, "
            "secret = excluded.secret, reader_role = excluded.reader_role"
        ),
        {"role": role, "attrs": attrs_json, "secret": secret, "reader": reader},
    )
    return secret


def drop_scoped_roles(admin_url: str) -> int:
    """Drop every row filter's login role recorded in the warehouse of ``admin_url``
    and forget them; return how many. Their sessions keep running until they end; a
    later scoped run makes its role again."""
    import sqlalchemy as sa

    try:
        with _engine(admin_url).begin() as conn:
            present = conn.exec_driver_sql(
                f"SELECT to_regclass('{SCHEMA}.row_filters') IS NOT NULL"
            ).scalar()
            if not present:
                return 0
            conn.execute(sa.text("SELECT pg_advisory_xact_lock(:k)"), {"k": _LOCK_KEY})
            roles = conn.exec_driver_sql(
                f"SELECT f.role_name FROM {SCHEMA}.row_filters f "
                "JOIN pg_roles r ON r.rolname = f.role_name"
            ).scalars()
            dropped = 0
            for role in list(roles):
                conn.exec_driver_sql(f"DROP OWNED BY {_ident(role)}")
                conn.exec_driver_sql(f"DROP ROLE {_ident(role)}")
                dropped += 1
            conn.exec_driver_sql(f"DELETE FROM {SCHEMA}.row_filters")
    except sa.exc.DBAPIError as exc:
        raise _failed("dropping the row filters' roles", exc) from None
    return dropped


def _reader_of(name: str, setup: Any) -> str:
    if setup is None:
        return DEFAULT_READER_ROLE
    if not isinstance(setup, Mapping) or set(setup) - {"reader_role"}:
        raise RowFilterSetupError(
            f"connections.{name}.row_filter must be an object with at most reader_role"
        )
    return _checked_role(setup.get("reader_role", DEFAULT_READER_ROLE), "reader_role")


def _is_postgresql(url: Any) -> bool:
    import sqlalchemy as sa

    try:
        return isinstance(url, str) and sa.engine.make_url(url).get_backend_name() == "postgresql"
    except sa.exc.ArgumentError:
        return False


def scoped_connections(
    connections: Mapping[str, Mapping[str, Any]], row_filter: Mapping[str, Any] | None
) -> dict[str, dict[str, Any]]:
    """The connections a run's kernel gets, from the tenant's configured ones.

    Always: ``admin_url`` and the ``row_filter`` set-up are removed (they never reach a
    kernel). For a recipient-scoped run (``row_filter`` non-empty):

    - a PostgreSQL ``sqlalchemy`` connection with an ``admin_url`` gets the URL of the
      filter's login role (:func:`scoped_url`, which creates or repairs it);
    - any other ``sqlalchemy`` connection — another database, or PostgreSQL without an
      ``admin_url`` — is **withheld**: ``{"kind": "sqlalchemy", "withheld": why}``, so
      its URL (which would see every row) is not in the run's context and a query on
      it fails saying why;
    - ``parquet`` and ``duckdb`` connections are kept: the kernel filters them, as a
      courtesy (:mod:`nbcast.warehouse.connections`).

    Raises :class:`RowFilterSetupError` when a connection's set-up is malformed or the
    warehouse refuses to make the role (a worker should fail the attempt, retryably).
    """
    attrs = parse_row_filter(row_filter) if row_filter else None
    result: dict[str, dict[str, Any]] = {}
    for name, given in connections.items():
        if not isinstance(given, Mapping):
            raise RowFilterSetupError(f"connections.{name} must be an object")
        plain = {k: v for k, v in given.items() if k not in ("admin_url", "row_filter")}
        reader = _reader_of(str(name), given.get("row_filter"))
        if not attrs or given.get("kind") != "sqlalchemy":
            result[str(name)] = plain
            continue
        admin_url = given.get("admin_url")
        if not _is_postgresql(given.get("url")):
            why = "row filters are enforced on PostgreSQL connections only"
        elif not isinstance(admin_url, str) or not admin_url:
            why = "it has no admin_url to make the row filter's PostgreSQL role with"
        else:
            url = scoped_url(admin_url, str(given["url"]), attrs, reader_role=reader)
            result[str(name)] = {**plain, "url": url}
            continue
        result[str(name)] = {"kind": "sqlalchemy", "withheld": f"recipient-scoped run: {why}"}
    return result
