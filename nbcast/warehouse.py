"""Bounded-cost warehouse access from inside a notebook: ``warehouse.query(sql) -> DataFrame``.

::

    from nbcast import warehouse
    df = warehouse.query("select * from orders where region = ?", ["EMEA"])
    df = warehouse.query("select * from t where id = :id", {"id": 7}, connection="pg")

This module runs queries; the run context and the usage records live in
:mod:`nbcast.warehouse_context` and are re-exported here, so notebooks need only this
module.

Design decisions
----------------
* **Run context.** The runner writes a JSON file and points ``$NBCAST_RUN_CONTEXT`` at it,
  or calls :func:`configure`; ``configure`` wins. Without either, one connection
  ``default`` = the Parquet folder ``$NBCAST_LAKE``, else ``./lake``; limits 60 s,
  1,000,000 rows, 256 MiB. A malformed context is a :class:`ConfigError`. The full rules
  are in :mod:`nbcast.warehouse_context`.
* **Connections** are only those the context lists; any other name is a ``ConfigError``
  naming the allowed ones. They are opened on first use and cached per process, keyed
  by their spec. ``parquet``: an in-memory DuckDB with one view per ``*.parquet`` file,
  rebuilt when the folder's mtime changes (files added, removed or replaced); then
  ``allowed_paths`` is set to exactly those files, external access is disabled and the
  configuration locked, so SQL cannot wander to other files or download extensions.
  That keeps accidents out; it is not a security boundary, since notebook code is
  Python in the same process. ``duckdb``: the file opened read-only (external access
  stays on: warehouse files often hold views over outside files). ``sqlalchemy``: one
  engine per URL with ``pool_pre_ping``; every transaction is rolled back, never
  committed, so ``query`` cannot change the warehouse.
* **Parameters** are passed to the driver, never formatted into SQL. DuckDB takes a
  sequence (``?`` / ``$1``) or a mapping (``$name``); SQLAlchemy takes a mapping for
  ``sqlalchemy.text`` (``:name``; write ``\\:`` for a literal colon).
* **Streaming, not loading.** DuckDB results are pulled with ``fetch_df_chunk`` in
  chunks that grow from 4 to 64 vectors (of 2,048 rows) and never ask for more than the
  rows still allowed plus one; SQLAlchemy results with ``stream_results`` (a server-side
  cursor on PostgreSQL, so there ``query`` is for SELECT / VALUES / WITH statements) and
  ``fetchmany``. Each chunk becomes a DataFrame whose ``memory_usage(deep=True)`` is
  added up, so both caps trip after at most one chunk more than the cap.
* **Time.** One watchdog thread per process cancels each query at its deadline:
  DuckDB ``cursor.interrupt()`` (each query runs on its own cursor, so a late interrupt
  can hit nothing else); SQLAlchemy the DBAPI connection's ``cancel_safe`` / ``cancel``
  / ``interrupt`` (psycopg, psycopg2, sqlite3), after which that connection is
  invalidated, since a late cancel could hit its next statement. PostgreSQL also gets
  ``SET LOCAL statement_timeout`` so the server enforces it on its own. Other dialects
  without a cancel call are best effort: the deadline is checked between chunks only.
  Any database error once the watchdog fired, and PostgreSQL's statement-timeout
  cancel, becomes ``QueryLimitExceeded("seconds", ...)``.
* **Figures.** Every query, failed ones too, is recorded (:func:`usage`, and one line of
  the run's usage file); ``error`` is cut to 500 characters and the connection name to
  128 (the usage table's widths). The record format is in :mod:`nbcast.warehouse_context`.
* **Import cost.** Only the standard library at import time; DuckDB, pandas and
  SQLAlchemy are imported on first use, because this module loads in every kernel.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import heapq
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from nbcast.errors import ConfigError, QueryLimitExceeded
from nbcast.warehouse_context import (
    DEFAULT_CONNECTION,
    DEFAULT_LIMITS,
    ENV_LAKE,
    ENV_RUN_CONTEXT,
    ConnectionSpec,
    Limits,
    QueryUsage,
    RunContext,
    _record,
    _reset_state,
    _state_lock,
    configure,
    current_context,
    load_context,
    read_usage,
    summarize,
    usage,
)
from nbcast.warehouse_context import KINDS as KINDS  # importable from here, as before

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa

__all__ = [
    "DEFAULT_CONNECTION",
    "DEFAULT_LIMITS",
    "ENV_LAKE",
    "ENV_RUN_CONTEXT",
    "ConnectionSpec",
    "Limits",
    "QueryUsage",
    "RunContext",
    "close",
    "configure",
    "current_context",
    "load_context",
    "query",
    "read_usage",
    "reset",
    "summarize",
    "usage",
]

_VECTOR = 2048  # DuckDB's vector size: fetch_df_chunk counts in vectors
_FIRST_VECTORS, _MAX_VECTORS = 4, 64
_FIRST_ROWS, _MAX_ROWS_PER_FETCH = 10_000, 100_000
_ERROR_CHARS = 500
_NAME_CHARS = 128  # the usage table's column width: a made-up name must not break recording


_handles: dict[ConnectionSpec, _Handle] = {}


# --- connections -------------------------------------------------------------------------


@dataclasses.dataclass
class _Handle:
    """An open connection: a DuckDB connection or a SQLAlchemy engine."""

    spec: ConnectionSpec
    target: Any
    stamp: int = 0  # parquet: the folder's mtime when the views were made

    def close(self) -> None:
        if self.spec.kind == "sqlalchemy":
            self.target.dispose()
        else:
            self.target.close()


def _sql_string(value: str) -> str:
    return "'" + value.replace("'", "''") + "'"


def _open_parquet(spec: ConnectionSpec, name: str, context: RunContext) -> _Handle:
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
    return _Handle(spec=spec, target=con, stamp=stamp)


def _open(spec: ConnectionSpec, name: str, context: RunContext) -> _Handle:
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
        return _Handle(spec=spec, target=target)
    import sqlalchemy as sa

    try:
        engine = sa.create_engine(str(spec.url), pool_pre_ping=True)
    except (sa.exc.ArgumentError, ImportError) as exc:
        raise ConfigError(f"connection {name!r} ({spec}): {exc}") from exc
    return _Handle(spec=spec, target=engine)


def _handle(name: str, context: RunContext) -> _Handle:
    spec = context.connections.get(name)
    if spec is None:
        allowed = ", ".join(repr(n) for n in sorted(context.connections)) or "none"
        raise ConfigError(
            f"unknown connection {name!r} for tenant {context.tenant!r}; allowed: {allowed}"
        )
    with _state_lock:
        handle = _handles.get(spec)
        if handle is not None and spec.kind == "parquet":
            assert spec.path is not None
            try:
                fresh = spec.path.stat().st_mtime_ns == handle.stamp
            except OSError:
                fresh = False
            if not fresh:  # views are rebuilt; running queries keep the old connection alive
                del _handles[spec]
                handle = None
        if handle is None:
            handle = _handles[spec] = _open(spec, name, context)
        return handle


def close() -> None:
    """Close every cached connection; the next query opens (and re-scans) afresh."""
    with _state_lock:
        handles = list(_handles.values())
        _handles.clear()
    for handle in handles:
        handle.close()


def reset() -> None:
    """Forget :func:`configure`'s context, close connections, clear :func:`usage` (tests)."""
    close()
    _reset_state()


# --- limits ------------------------------------------------------------------------------


class _Alarm:
    """One query's deadline and how to cancel it; ``fired`` once the watchdog did."""

    __slots__ = ("cancel", "deadline", "done", "fired")

    def __init__(self, timeout_s: float, cancel: Callable[[], object] | None) -> None:
        self.deadline = time.monotonic() + timeout_s
        self.cancel = cancel
        self.done = self.fired = False

    def __lt__(self, other: _Alarm) -> bool:
        return self.deadline < other.deadline


class _Watchdog:
    """One daemon thread per process cancels queries at their deadline, never after they end.

    Arming costs a heap push, not a thread start. Cancels run under the same lock that
    disarming takes, so once a query's ``with`` block is left its cancel can no longer run.
    """

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[_Alarm] = []
        self._live = 0
        self._pid = 0

    @contextlib.contextmanager
    def watching(self, alarm: _Alarm) -> Iterator[None]:
        """Arm ``alarm`` for the ``with`` block; after it, ``alarm.fired`` is final."""
        with self._cond:
            if self._pid != os.getpid():  # first use, or a forked child that lacks the thread
                self._pid, self._heap, self._live = os.getpid(), [], 0
                threading.Thread(target=self._run, name="nbcast-watchdog", daemon=True).start()
            heapq.heappush(self._heap, alarm)
            self._live += 1
            if self._heap[0] is alarm:
                self._cond.notify()
        try:
            yield
        finally:
            with self._cond:
                alarm.done = True
                self._live -= 1
                if len(self._heap) > 2 * self._live + 1024:  # drop ended alarms now and then
                    self._heap = [a for a in self._heap if not a.done]
                    heapq.heapify(self._heap)

    def _run(self) -> None:
        with self._cond:
            while True:
                now = time.monotonic()
                while self._heap and (self._heap[0].done or self._heap[0].deadline <= now):
                    alarm = heapq.heappop(self._heap)
                    if not alarm.done:
                        alarm.fired = True
                        if alarm.cancel is not None:
                            with contextlib.suppress(Exception):  # it may have just ended
                                alarm.cancel()
                wait = self._heap[0].deadline - now if self._heap else None
                self._cond.wait(None if wait is None else min(wait, threading.TIMEOUT_MAX))


_WATCHDOG = _Watchdog()


class _Budget:
    """Counts what a query fetched and raises :class:`QueryLimitExceeded` past a cap."""

    def __init__(self, limits: Limits, connection: str) -> None:
        self.limits = limits
        self.connection = connection
        self.started = time.perf_counter()
        self.rows = 0
        self.bytes = 0

    def rows_wanted(self) -> int:
        """Rows still allowed plus one, which tells over-cap from at-cap."""
        return self.limits.max_rows + 1 - self.rows

    def add(self, frame: pd.DataFrame) -> None:
        self.rows += len(frame)
        self.bytes += int(frame.memory_usage(deep=True, index=False).sum())
        self.check()

    def check(self) -> None:
        limits = self.limits
        if self.rows > limits.max_rows:
            raise QueryLimitExceeded(
                "rows",
                limits.max_rows,
                f"query on connection {self.connection!r} returned more than "
                f"{limits.max_rows:,} rows (this run's cap); aggregate or filter in SQL",
            )
        if self.bytes > limits.max_bytes:
            raise QueryLimitExceeded(
                "bytes",
                limits.max_bytes,
                f"query result on connection {self.connection!r} exceeds {limits.max_bytes:,} "
                f"bytes ({limits.max_bytes / 2**20:.1f} MiB) in memory (this run's cap); "
                "select fewer columns or rows",
            )
        if time.perf_counter() - self.started > limits.timeout_s:
            raise self.timeout()

    def timeout(self) -> QueryLimitExceeded:
        return QueryLimitExceeded(
            "seconds",
            self.limits.timeout_s,
            f"query on connection {self.connection!r} ran longer than "
            f"{self.limits.timeout_s:g} s (this run's statement timeout)",
        )


def _assemble(frames: list[pd.DataFrame], budget: _Budget) -> pd.DataFrame:
    import pandas as pd

    frame = frames[0] if len(frames) == 1 else pd.concat(frames, ignore_index=True)
    budget.bytes += int(frame.index.memory_usage())
    budget.check()
    return frame


# --- running queries ---------------------------------------------------------------------


def _query_duckdb(handle: _Handle, sql: str, params: Any, budget: _Budget) -> pd.DataFrame:
    import duckdb

    if params is not None:
        params = dict(params) if isinstance(params, Mapping) else list(params)
    cursor = handle.target.cursor()  # own cursor: an interrupt reaches this query only
    alarm = _Alarm(budget.limits.timeout_s, cursor.interrupt)
    frames: list[pd.DataFrame] = []
    try:
        with _WATCHDOG.watching(alarm):
            cursor.execute(sql, params)
            vectors = _FIRST_VECTORS
            while True:
                wanted = -(-budget.rows_wanted() // _VECTOR)
                chunk = cursor.fetch_df_chunk(max(1, min(vectors, wanted)))
                if len(chunk) or not frames:  # an empty result still has its columns
                    frames.append(chunk)
                    budget.add(chunk)
                if not len(chunk):
                    break
                vectors = min(vectors * 2, _MAX_VECTORS)
    except duckdb.Error as exc:
        if alarm.fired:
            raise budget.timeout() from exc
        raise
    finally:
        cursor.close()
    return _assemble(frames, budget)


def _canceller(dbapi_connection: Any) -> Callable[[], object] | None:
    for name in ("cancel_safe", "cancel", "interrupt"):
        method = getattr(dbapi_connection, name, None)
        if callable(method):
            return method  # type: ignore[no-any-return]
    return None


def _is_statement_timeout(exc: sa.exc.DBAPIError) -> bool:
    orig = exc.orig
    code = getattr(orig, "sqlstate", None) or getattr(orig, "pgcode", None)
    return code == "57014" and "statement timeout" in str(orig)


def _query_sqlalchemy(handle: _Handle, sql: str, params: Any, budget: _Budget) -> pd.DataFrame:
    import pandas as pd
    import sqlalchemy as sa

    if params is not None and not isinstance(params, Mapping):
        raise TypeError(
            f"connection {budget.connection!r} is SQLAlchemy: pass params as a mapping "
            "and write :name placeholders"
        )
    engine: sa.Engine = handle.target
    statement = sa.text(sql)
    options = {"stream_results": True, "max_row_buffer": _MAX_ROWS_PER_FETCH}
    frames: list[pd.DataFrame] = []
    with engine.connect() as conn:  # never committed: closing rolls the transaction back
        alarm = _Alarm(budget.limits.timeout_s, _canceller(conn.connection.dbapi_connection))
        try:
            with _WATCHDOG.watching(alarm):
                if engine.dialect.name == "postgresql":
                    ms = max(1, round(budget.limits.timeout_s * 1000))  # 0 would mean "none"
                    conn.exec_driver_sql(f"SET LOCAL statement_timeout = {ms:d}")
                result = conn.execute(statement, dict(params or {}), execution_options=options)
                if not result.returns_rows:
                    return pd.DataFrame()
                columns = list(result.keys())
                size = _FIRST_ROWS
                while True:
                    wanted = min(size, budget.rows_wanted())
                    rows = result.fetchmany(wanted)
                    if rows or not frames:  # an empty result still has its columns
                        frames.append(pd.DataFrame.from_records(rows, columns=columns))
                        budget.add(frames[-1])
                    if len(rows) < wanted:  # a short fetch is the end (DBAPI): no extra trip
                        break
                    size = min(size * 2, _MAX_ROWS_PER_FETCH)
                result.close()
        except sa.exc.DBAPIError as exc:
            if alarm.fired or _is_statement_timeout(exc):
                raise budget.timeout() from exc
            raise
        finally:
            # Only now is `fired` final. A cancel in flight must not hit the next statement.
            if alarm.fired:
                conn.invalidate()
    return _assemble(frames, budget)


def query(
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
    connection: str = DEFAULT_CONNECTION,
) -> pd.DataFrame:
    """Run ``sql`` on a connection the run may use and return the result as a DataFrame.

    ``params`` are bound by the driver: a sequence for DuckDB's ``?`` / ``$1``, a mapping
    for DuckDB's ``$name`` or SQLAlchemy's ``:name``. Raises
    :class:`~nbcast.errors.QueryLimitExceeded` (``rows``, ``bytes`` or ``seconds``) when
    the run's caps are exceeded and :class:`~nbcast.errors.ConfigError` for a connection
    the run context does not list. Every call, failed or not, is recorded (:func:`usage`).
    """
    if not isinstance(sql, str) or not isinstance(connection, str):
        raise TypeError("sql and connection must be strings")
    context = current_context()
    budget = _Budget(context.limits, connection)
    error: str | None = None
    try:
        if isinstance(params, str | bytes):
            raise TypeError("params must be a sequence or a mapping, not a string")
        handle = _handle(connection, context)
        import pandas  # noqa: F401 - the first import is not the first query's time

        budget.started = time.perf_counter()  # nor is opening the connection
        run = _query_sqlalchemy if handle.spec.kind == "sqlalchemy" else _query_duckdb
        return run(handle, sql, params, budget)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[:_ERROR_CHARS]
        raise
    finally:
        _record(
            context,
            QueryUsage(
                run_id=context.run_id,
                tenant=context.tenant,
                connection=connection[:_NAME_CHARS],
                sql_sha256=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
                rows=budget.rows,
                bytes=budget.bytes,
                seconds=round(time.perf_counter() - budget.started, 6),
                error=error,
            ),
        )
