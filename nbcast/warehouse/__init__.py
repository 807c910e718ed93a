"""Bounded-cost warehouse access from inside a notebook: ``warehouse.query(sql) -> DataFrame``.

::

    from nbcast import warehouse
    df = warehouse.query("select * from orders where region = ?", ["EMEA"])
    df = warehouse.query("select * from t where id = :id", {"id": 7}, connection="pg")

Notebooks need only this package; its modules hold one idea each:

=============================================  ===========================================
:mod:`nbcast.warehouse.context`                the run context: connections, limits,
                                               :func:`configure`, :func:`current_context`
:mod:`nbcast.warehouse.connections`            opening and caching connections
:mod:`nbcast.warehouse.caps`                   the row, byte and time caps (the watchdog)
:mod:`nbcast.warehouse.execution`              :func:`query`: streaming under the caps
:mod:`nbcast.warehouse.figures`                :class:`QueryUsage`, :func:`usage`,
                                               :func:`read_usage`, :func:`summarize`
:mod:`nbcast.warehouse.rls`                    recipient scopes on PostgreSQL: row-level
                                               security, the scoped roles (worker side)
=============================================  ===========================================

Design decisions
----------------
* **Run context.** The runner writes a JSON file and points ``$NBCAST_RUN_CONTEXT`` at it,
  or calls :func:`configure`; ``configure`` wins. Without either, one connection
  ``default`` = the Parquet folder ``$NBCAST_LAKE``, else ``./lake``; limits 60 s,
  1,000,000 rows, 256 MiB. A malformed context is a :class:`ConfigError`. The full rules
  are in :mod:`nbcast.warehouse.context`.
* **Connections** are only those the context lists; any other name is a ``ConfigError``
  naming the allowed ones. They are opened on first use and cached per process
  (:mod:`nbcast.warehouse.connections`: Parquet folders as locked-down DuckDB views,
  DuckDB files read-only, SQLAlchemy URLs).
* **Parameters** are passed to the driver, never formatted into SQL; results are
  streamed in growing chunks, and the row and byte caps trip after at most one chunk
  more than the cap; a watchdog thread cancels a query at its deadline
  (:mod:`nbcast.warehouse.execution`, :mod:`nbcast.warehouse.caps`).
* **Row filters.** A recipient-scoped run's context carries ``row_filter``: the lake's
  and DuckDB files' tables become filtered views (cooperative), and PostgreSQL is read
  as a login role whose row-level security policies filter every query (enforced,
  :mod:`nbcast.warehouse.rls`); other SQLAlchemy connections are refused to such a run.
* **Read-only.** SQLAlchemy transactions are rolled back, never committed.
* **Figures.** Every query, failed ones too, is recorded (:func:`usage`, and one line of
  the run's usage file); the record format is in :mod:`nbcast.warehouse.figures`.
* **Import cost.** Only the standard library at import time, in every module of this
  package; DuckDB, pandas and SQLAlchemy are imported on first use, because it loads in
  every kernel. It imports no plane (definitions, scheduler, executor, delivery,
  governance): the executor reads usage files with :func:`read_usage`, never the other
  way round.
"""

from __future__ import annotations

from nbcast.errors import ConfigError as ConfigError  # importable from here, as before
from nbcast.errors import QueryLimitExceeded as QueryLimitExceeded
from nbcast.warehouse import context as _context
from nbcast.warehouse import figures as _figures
from nbcast.warehouse.connections import close
from nbcast.warehouse.context import (
    DEFAULT_CONNECTION,
    DEFAULT_LIMITS,
    ENV_LAKE,
    ENV_RUN_CONTEXT,
    KINDS,
    ConnectionSpec,
    Limits,
    WarehouseContext,
    configure,
    current_context,
    load_context,
)
from nbcast.warehouse.execution import query
from nbcast.warehouse.figures import QueryUsage, read_usage, summarize, usage

__all__ = [
    "DEFAULT_CONNECTION",
    "DEFAULT_LIMITS",
    "ENV_LAKE",
    "ENV_RUN_CONTEXT",
    "KINDS",
    "ConnectionSpec",
    "Limits",
    "QueryUsage",
    "RunContext",
    "WarehouseContext",
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


RunContext = WarehouseContext
"""The earlier name of :class:`WarehouseContext`, kept for notebooks that use it (it
collided with :class:`nbcast.run_context.RunContext`, the run a notebook executes for)."""


def reset() -> None:
    """Forget :func:`configure`'s context, close connections, clear :func:`usage` (tests)."""
    close()
    _context.forget()
    _figures.clear()
