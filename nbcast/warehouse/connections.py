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
* **Import cost.** DuckDB and SQLAlchemy are imported when a connection is opened.
"""

from __future__ import annotations

import dataclasses
import threading
from pathlib import Path
from typing import Any

from nbcast.errors import ConfigError
from nbcast.warehouse.context import ENV_LAKE, ConnectionSpec, RunContext

__all__ = ["Handle", "close", "handle"]


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
_handles: dict[ConnectionSpec, Handle] = {}


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _open_parquet(spec: ConnectionSpec, name: str, context: RunContext) -> Handle:
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
            ident = '"' + path.stem.replace('"', '""') + '"'
            con.execute(
                f"CREATE VIEW {ident} AS SELECT * FROM read_parquet({_sql_string(str(path))})"
            )
        if files:
            con.execute(f"SET allowed_paths = [{', '.join(_sql_string(str(p)) for p in files)}]")
        con.execute("SET enable_external_access = false")
        con.execute("SET lock_configuration = true")
    except BaseException:
        con.close()
        raise
    return Handle(spec=spec, target=con, stamp=stamp)


def _open(spec: ConnectionSpec, name: str, context: RunContext) -> Handle:
    if spec.kind == "parquet":
        return _open_parquet(spec, name, context)
    if spec.kind == "duckdb":
        import duckdb

        assert spec.path is not None
        if not spec.path.is_file():
            raise ConfigError(f"connection {name!r}: no DuckDB database at {spec.path}")
        config: dict[str, str | bool | int | float | list[str]]
        config = {"autoinstall_known_extensions": False}
        target = duckdb.connect(str(spec.path), read_only=True, config=config)
        return Handle(spec=spec, target=target)
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(str(spec.url), pool_pre_ping=True)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"connection {name!r} ({spec}): {exc}") from exc
    return Handle(spec=spec, target=engine)


def handle(name: str, context: RunContext) -> Handle:
    """The open connection ``name`` of ``context``, opened (or re-scanned) if need be."""
    spec = context.connections.get(name)
    if spec is None:
        allowed = ", ".join(repr(n) for n in sorted(context.connections)) or "none"
        raise ConfigError(
            f"unknown connection {name!r} for tenant {context.tenant!r}; allowed: {allowed}"
        )
    with _lock:
        found = _handles.get(spec)
        if found is not None and spec.kind == "parquet":
            assert spec.path is not None
            try:
                fresh = spec.path.stat().st_mtime_ns == found.stamp
            except OSError:
                fresh = False
            if not fresh:  # views are rebuilt; running queries keep the old connection alive
                del _handles[spec]
                found = None
        if found is None:
            found = _handles[spec] = _open(spec, name, context)
        return found


def close() -> None:
    """Close every cached connection; the next query opens (and re-scans) afresh."""
    with _lock:
        handles = list(_handles.values())
        _handles.clear()
    for each in handles:
        each.close()
