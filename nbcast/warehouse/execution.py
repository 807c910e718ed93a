"""Running one warehouse query under its run's caps: :func:`query` (``warehouse.query``).

Design decisions
----------------
* **Parameters** are passed to the driver, never formatted into SQL. DuckDB takes a
  sequence (``?`` / ``$1``) or a mapping (``$name``); SQLAlchemy takes a mapping for
  ``sqlalchemy.text`` (``:name``; write ``\\:`` for a literal colon).
* **Streaming, not loading.** DuckDB results are pulled with ``fetch_df_chunk`` in
  chunks that grow from 4 to 64 vectors (of 2,048 rows) and never ask for more than the
  rows still allowed plus one; SQLAlchemy results with ``stream_results`` (a server-side
  cursor on PostgreSQL, so there ``query`` is for SELECT / VALUES / WITH statements) and
  ``fetchmany``. Each chunk is counted into a :class:`~nbcast.warehouse.caps.Budget`.
* **Read-only.** A SQLAlchemy transaction is rolled back, never committed, so ``query``
  cannot change the warehouse.
* **Time.** The watchdog (:mod:`nbcast.warehouse.caps`) cancels each query at its
  deadline: DuckDB ``cursor.interrupt()`` (each query runs on its own cursor, so a late
  interrupt can hit nothing else); SQLAlchemy the DBAPI connection's ``cancel_safe`` /
  ``cancel`` / ``interrupt`` (psycopg, psycopg2, sqlite3), after which that connection
  is invalidated, since a late cancel could hit its next statement. PostgreSQL also gets
  ``SET LOCAL statement_timeout`` so the server enforces it on its own. Other dialects
  without a cancel call are best effort: the deadline is checked between chunks only.
  Any database error once the watchdog fired, and PostgreSQL's statement-timeout
  cancel, becomes ``QueryLimitExceeded("seconds", ...)``.
* **Figures.** Every query, failed ones too, is recorded
  (:func:`nbcast.warehouse.figures.record`); ``error`` is cut to 500 characters and the
  connection name to 128 (the usage table's widths).
* **Import cost.** DuckDB, pandas and SQLAlchemy are imported on first use.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from nbcast.warehouse import figures
from nbcast.warehouse.caps import WATCHDOG, Alarm, Budget, assemble
from nbcast.warehouse.connections import Handle, handle
from nbcast.warehouse.context import DEFAULT_CONNECTION, current_context

if TYPE_CHECKING:
    import pandas as pd
    import sqlalchemy as sa

__all__ = ["ERROR_CHARS", "NAME_CHARS", "query"]

ERROR_CHARS = 500
"""A recorded ``error`` is cut to this many characters."""
NAME_CHARS = 128
"""A recorded connection name is cut to this many characters (the usage table's width)."""

_VECTOR = 2048  # DuckDB's vector size: fetch_df_chunk counts in vectors
_FIRST_VECTORS, _MAX_VECTORS = 4, 64
_FIRST_ROWS, _MAX_ROWS_PER_FETCH = 10_000, 100_000


def _query_duckdb(found: Handle, sql: str, params: Any, budget: Budget) -> pd.DataFrame:
    import duckdb

    if params is not None:
        params = dict(params) if isinstance(params, Mapping) else list(params)
    cursor = found.target.cursor()  # own cursor: an interrupt reaches this query only
    alarm = Alarm(budget.limits.timeout_s, cursor.interrupt)
    frames: list[pd.DataFrame] = []
    try:
        with WATCHDOG.watching(alarm):
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
    return assemble(frames, budget)


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


def _query_sqlalchemy(found: Handle, sql: str, params: Any, budget: Budget) -> pd.DataFrame:
    import pandas as pd
    import sqlalchemy as sa

    if params is not None and not isinstance(params, Mapping):
        raise TypeError(
            f"connection {budget.connection!r} is SQLAlchemy: pass params as a mapping "
            "and write :name placeholders"
        )
    engine: sa.Engine = found.target
    statement = sa.text(sql)
    options = {"stream_results": True, "max_row_buffer": _MAX_ROWS_PER_FETCH}
    frames: list[pd.DataFrame] = []
    with engine.connect() as conn:  # never committed: closing rolls the transaction back
        alarm = Alarm(budget.limits.timeout_s, _canceller(conn.connection.dbapi_connection))
        try:
            with WATCHDOG.watching(alarm):
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
    return assemble(frames, budget)


def query(
    sql: str,
    params: Sequence[Any] | Mapping[str, Any] | None = None,
    connection: str = DEFAULT_CONNECTION,
) -> pd.DataFrame:
    """Run ``sql`` on a connection the run may use and return the result as a DataFrame.

    ``params`` are bound by the driver: a sequence for DuckDB's ``?`` / ``$1``, a mapping
    for DuckDB's ``$name`` or SQLAlchemy's ``:name``. Raises
    :class:`~nbcast.errors.QueryLimitExceeded` (``rows``, ``bytes``, ``seconds``, or
    ``budget`` for the tenant's daily warehouse budget) when the run's caps are
    exceeded and :class:`~nbcast.errors.ConfigError` for a connection
    the run context does not list. Every call, failed or not, is recorded
    (:func:`~nbcast.warehouse.usage`).
    """
    if not isinstance(sql, str) or not isinstance(connection, str):
        raise TypeError("sql and connection must be strings")
    context = current_context()
    earlier = sum(u.bytes for u in figures.usage()) if context.limits.budget_bytes_left else 0
    budget = Budget(context.limits, connection, earlier)
    error: str | None = None
    try:
        if isinstance(params, str | bytes):
            raise TypeError("params must be a sequence or a mapping, not a string")
        found = handle(connection, context)
        import pandas  # noqa: F401 - the first import is not the first query's time

        budget.started = time.perf_counter()  # nor is opening the connection
        run = _query_sqlalchemy if found.spec.kind == "sqlalchemy" else _query_duckdb
        return run(found, sql, params, budget)
    except BaseException as exc:
        error = f"{type(exc).__name__}: {exc}"[:ERROR_CHARS]
        raise
    finally:
        figures.record(
            figures.QueryUsage(
                run_id=context.run_id,
                tenant=context.tenant,
                connection=connection[:NAME_CHARS],
                sql_sha256=hashlib.sha256(sql.encode("utf-8")).hexdigest(),
                rows=budget.rows,
                bytes=budget.bytes,
                seconds=round(time.perf_counter() - budget.started, 6),
                error=error,
            ),
            context.usage_path,
        )
