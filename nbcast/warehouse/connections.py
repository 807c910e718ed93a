"""The connections a run's queries use, opened on first use and cached per process.

:func:`handle` returns the open connection for a name the run context lists;
:func:`close` closes them all (``warehouse.close()``).

Design decisions
----------------
* **Only what the context lists.** Any other name is a
  :class:`~nbcast.errors.ConfigError` naming the allowed ones. Handles are keyed by the
  connection's spec, so two names for one place share one connection.
* ``parquet``: an in-memory DuckDB with one view per ``*.parquet`` file, rebuilt when the
  folder's mtime changes (files added, removed or replaced); then ``allowed_paths`` is
  set to exactly those files, external access is disabled and the configuration locked,
  so SQL cannot wander to other files or download extensions. That keeps accidents out;
  it is not a security boundary, since notebook code is Python in the same process.
* ``duckdb``: the file opened read-only (external access stays on: warehouse files often
  hold views over outside files).
* ``sqlalchemy``: one engine per URL with ``pool_pre_ping``; :mod:`nbcast.warehouse.execution`
  rolls every transaction back.
* **Row filters** (a recipient-scoped run, ``WarehouseContext.row_filter``). ``parquet``: each
  file's view keeps only the rows whose columns equal the filter's values, for every
  attribute the file has as a column (matched case-insensitively, the value cast to
  the column's type; a value that does not cast matches nothing); a file without
  such a column is not filtered. ``duckdb``: the file is attached read-only to an
  in-memory DuckDB under its usual name, and each table and view of its ``main``
  schema is a view there with the same filter (unqualified names reach the views).
  Both are **cooperative**: they scope what ``warehouse.query`` shows, but SQL
  that names the files (``read_parquet('…')``, ``wh.main.orders``) or Python that opens
  them reads every row. ``sqlalchemy``: enforced by the database, not here — the
  worker gives a scoped run a PostgreSQL login role whose row-level security policies
  filter every query (:mod:`nbcast.warehouse.rls`); here a scoped run refuses any
  SQLAlchemy URL that is not such a role's, and any connection the worker withheld.
* **Import cost.** DuckDB and SQLAlchemy are imported when a connection is opened.
"""

from __future__ import annotations

import dataclasses
import json
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from nbcast.errors import ConfigError
from nbcast.warehouse.context import ENV_LAKE, ConnectionSpec, WarehouseContext

__all__ = ["SCOPED_ROLE_PREFIX", "Handle", "close", "handle"]


@dataclasses.dataclass
class Handle:
    """An open connection: a DuckDB connection or a SQLAlchemy engine (``target``)."""

    spec: ConnectionSpec
    target: Any
    stamp: int = 0
    """``parquet``: the folder's mtime when the views were made."""

    def close(self) -> None:
        """Close the DuckDB connection or dispose of the engine."""
        if self.spec.kind == "sqlalchemy":
            self.target.dispose()
        else:
            self.target.close()


_lock = threading.Lock()
_handles: dict[tuple[ConnectionSpec, str], Handle] = {}

SCOPED_ROLE_PREFIX = "nbcast_rf_"
"""How the PostgreSQL login roles of row filters are named (:mod:`nbcast.warehouse.rls`)."""


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _filter_key(row_filter: Mapping[str, Any] | None) -> str:
    return json.dumps(dict(row_filter or {}), sort_keys=True)


def _literal(value: str | int | bool) -> str:
    if isinstance(value, bool):
        return "TRUE" if value else "FALSE"
    if isinstance(value, int):
        return str(value)
    return _sql_string(value)


def _where(columns: list[tuple[str, str]], row_filter: Mapping[str, Any] | None) -> str:
    """The ``WHERE`` clause a row filter puts on a relation with ``columns`` (name,
    type), or "" when it names none of them (module docstring)."""
    if not row_filter:
        return ""
    by_name = {name.lower(): (name, kind) for name, kind in columns}
    terms = []
    for attribute, value in sorted(row_filter.items()):
        found = by_name.get(attribute.lower())
        if found is not None:
            column, kind = found
            terms.append(f"{_ident(column)} = TRY_CAST({_literal(value)} AS {kind})")
    return " WHERE " + " AND ".join(terms) if terms else ""


def _columns(con: Any, relation: str) -> list[tuple[str, str]]:
    return [
        (str(r[0]), str(r[1])) for r in con.execute(f"DESCRIBE SELECT * FROM {relation}").fetchall()
    ]


def _open_parquet(spec: ConnectionSpec, name: str, context: WarehouseContext) -> Handle:
    import duckdb

    folder = spec.path
    assert folder is not None
    if not folder.is_dir():
        hint = f" (set ${ENV_LAKE} or create ./lake)" if context.source == "default" else ""
        raise ConfigError(f"connection {name!r}: no Parquet folder at {folder}{hint}")
    stamp = folder.stat().st_mtime_ns
    files = sorted(p for p in folder.glob("*.parquet") if p.is_file() and p.name[0] != ".")
    seen: dict[str, Path] = {}
    for path in files:
        other = seen.setdefault(path.stem.lower(), path)
        if other != path:
            raise ConfigError(f"connection {name!r}: {other.name} and {path.name} name one view")
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False})
    try:
        for path in files:
            source = f"read_parquet({_sql_string(str(path))})"
            where = _where(_columns(con, source), context.row_filter)
            con.execute(f"CREATE VIEW {_ident(path.stem)} AS SELECT * FROM {source}{where}")
        if files:
            con.execute(f"SET allowed_paths = [{', '.join(_sql_string(str(p)) for p in files)}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return Handle(spec=spec, target=con, stamp=stamp)


def _open(spec: ConnectionSpec, name: str, context: WarehouseContext) -> Handle:
    if spec.kind == "parquet":
        return _open_parquet(spec, name, context)
    if spec.kind == "duckdb":
        import duckdb

        assert spec.path is not None
        if not spec.path.is_file():
            raise ConfigError(f"connection {name!r}: no DuckDB database at {spec.path}")
        config: dict[str, str | bool | int | float | list[str]]
        config = {"autoinstall_known_extensions": False}
        if context.row_filter:
            return Handle(spec=spec, target=_open_filtered_duckdb(spec.path, context.row_filter))
        target = duckdb.connect(str(spec.path), read_only=True, config=config)
        return Handle(spec=spec, target=target)
    import sqlalchemy as sa

    try:
        url = sa.engine.make_url(str(spec.url))
        if context.row_filter and not (
            url.get_backend_name() == "postgresql"
            and (url.username or "").startswith(SCOPED_ROLE_PREFIX)
        ):
            raise ConfigError(
                f"connection {name!r} ({spec}) cannot apply this run's row filter: a "
                "recipient-scoped run reads SQLAlchemy connections only as the PostgreSQL "
                "role nbcast made for its filter (nbcast.warehouse.rls)"
            )
        engine = sa.create_engine(url, pool_pre_ping=True)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"connection {name!r} ({spec}): {exc}") from exc
    return Handle(spec=spec, target=engine)


def _open_filtered_duckdb(path: Path, row_filter: Mapping[str, Any]) -> Any:
    """An in-memory DuckDB with the file attached read-only under its usual name (its
    stem) and one view per table or view of the file's ``main`` schema, filtered by
    ``row_filter`` (module docstring). Views of an in-memory database, not temporary
    ones: every query runs on its own cursor, and a cursor does not see the temporary
    objects of the connection it came from."""
    import duckdb

    alias = path.stem if path.stem.lower() not in ("memory", "system", "temp") else "warehouse"
    con = duckdb.connect(":memory:", config={"autoinstall_known_extensions": False})
    try:
        con.execute(f"ATTACH {_sql_string(str(path))} AS {_ident(alias)} (READ_ONLY)")
        relations = con.execute(
            "SELECT table_name FROM information_schema.tables "
            "WHERE table_catalog = ? AND table_schema = 'main' ORDER BY table_name",
            [alias],
        ).fetchall()
        for (table,) in relations:
            source = f"{_ident(alias)}.main.{_ident(str(table))}"
            where = _where(_columns(con, source), row_filter)
            con.execute(f"CREATE VIEW {_ident(str(table))} AS SELECT * FROM {source}{where}")
    except BaseException:
        con.close()
        raise
    return con


def handle(name: str, context: WarehouseContext) -> Handle:
    """The open connection ``name`` of ``context``, opened (or re-scanned) if need be."""
    spec = context.connections.get(name)
    if spec is None:
        allowed = ", ".join(repr(n) for n in sorted(context.connections)) or "none"
        raise ConfigError(
            f"unknown connection {name!r} for tenant {context.tenant!r}; allowed: {allowed}"
        )
    if spec.withheld is not None:
        raise ConfigError(f"connection {name!r} is withheld from this run: {spec.withheld}")
    key = (spec, _filter_key(context.row_filter))
    with _lock:
        found = _handles.get(key)
        if found is not None and spec.kind == "parquet":
            assert spec.path is not None
            try:
                fresh = spec.path.stat().st_mtime_ns == found.stamp
            except OSError:
                fresh = False
            if not fresh:  # views are rebuilt; running queries keep the old connection alive
                del _handles[key]
                found = None
        if found is None:
            found = _handles[key] = _open(spec, name, context)
        return found


def close() -> None:
    """Close every cached connection; the next query opens (and re-scans) afresh."""
    with _lock:
        handles = list(_handles.values())
        _handles.clear()
    for each in handles:
        each.close()
