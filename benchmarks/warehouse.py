"""What the caps cost: ``warehouse.query`` against the plain client on the same SQL.

Prints JSON: for each case the median milliseconds of N runs of ``warehouse.query`` (row,
byte and time caps armed, a usage file written) and of the plain client (DuckDB
``execute(...).df()`` on a connection with the same views; SQLAlchemy ``execute`` +
``fetchall`` into a DataFrame on PostgreSQL), and their ratio. Both sides use cached
connections, so this is the per-query overhead, not the connection set-up.

    python benchmarks/warehouse.py [--repeat 20] [--rows 1000000]

The Parquet lake is generated into a temporary folder; PostgreSQL (``$NBCAST_TEST_PG_URL``
or 127.0.0.1:5432/test) gets a scratch database that is dropped afterwards, and its
section says ``skipped`` when the server cannot be reached.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import sqlalchemy as sa

from nbcast import warehouse
from nbcast.testing.postgres import PostgresUnavailable, scratch_database

PG_ADMIN_URL = os.environ.get(
    "NBCAST_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
LIMITS = {"timeout_s": 120, "max_rows": 50_000_000, "max_bytes": 8 * 1024**3}

DUCKDB_CASES: dict[str, tuple[str, Sequence[Any] | None]] = {
    "aggregate_40_rows": (
        "select store_id, count(*) as n, sum(amount) as revenue "
        "from orders group by store_id order by store_id",
        None,
    ),
    "point_lookup_param": ("select * from orders where order_id = ?", [123_456]),
    "scan_100k_rows": ("select * from orders where order_id < 100000", None),
    "scan_1m_rows": ("select * from orders", None),
}
PG_CASES: dict[str, tuple[str, Mapping[str, Any] | None]] = {
    "aggregate_40_rows": (
        "select store_id, count(*) as n, sum(amount) as revenue "
        "from orders group by store_id order by store_id",
        None,
    ),
    "point_lookup_param": ("select * from orders where order_id = :id", {"id": 12_345}),
    "scan_100k_rows": ("select * from orders where order_id < 100000", None),
}
ORDERS_SQL = (
    "select i::bigint as order_id, (i % 40)::integer as store_id, "
    "'SKU-' || (i % 200) as sku, round((i % 997) * 0.37, 2)::double as amount, "
    "timestamp '2026-01-01' + to_seconds(i) as order_ts from range({rows}) t(i)"
)


def timed_ms(run: Callable[[], pd.DataFrame]) -> float:
    started = time.perf_counter()
    run()
    return (time.perf_counter() - started) * 1000


def compare(
    cases: Mapping[str, tuple[str, Any]],
    ours: Callable[[str, Any], pd.DataFrame],
    plain: Callable[[str, Any], pd.DataFrame],
    repeat: int,
) -> dict[str, Any]:
    """Per case: medians of ``repeat`` runs of each side, interleaved so drift hits both."""
    results: dict[str, Any] = {}
    for name, (sql, params) in cases.items():
        sides = [functools.partial(ours, sql, params), functools.partial(plain, sql, params)]
        rows = [len(side()) for side in sides]  # also the warm-up
        assert rows[0] == rows[1], (name, rows)
        times: list[list[float]] = [[], []]
        for i in range(repeat):
            for k in (i % 2, 1 - i % 2):
                times[k].append(timed_ms(sides[k]))
        ours_ms, plain_ms = (statistics.median(t) for t in times)
        results[name] = {
            "rows": rows[0],
            "warehouse_ms": round(ours_ms, 3),
            "plain_ms": round(plain_ms, 3),
            "ratio": round(ours_ms / plain_ms, 3),
        }
    return results


def bench_duckdb(folder: Path, rows: int, repeat: int) -> dict[str, Any]:
    lake = folder / "lake"
    lake.mkdir()
    with duckdb.connect() as con:
        con.execute(f"COPY ({ORDERS_SQL.format(rows=rows)}) TO '{lake / 'orders.parquet'}'")
    warehouse.configure(
        {
            "run_id": 1,
            "tenant": "bench",
            "connections": {"default": {"kind": "parquet", "path": str(lake)}},
            "limits": LIMITS,
            "usage_path": str(folder / "usage.jsonl"),
        }
    )
    plain_con = duckdb.connect()
    plain_con.execute(f"CREATE VIEW orders AS SELECT * FROM read_parquet('{lake}/orders.parquet')")

    def plain(sql: str, params: Any) -> pd.DataFrame:
        return plain_con.execute(sql, params).df()

    try:
        return compare(DUCKDB_CASES, warehouse.query, plain, repeat)
    finally:
        plain_con.close()
        warehouse.reset()


def bench_postgres(rows: int, repeat: int) -> dict[str, Any]:
    try:
        with scratch_database(PG_ADMIN_URL, prefix="nbcast_bench") as url:
            return _bench_postgres(url, rows, repeat)
    except PostgresUnavailable as exc:
        return {"skipped": str(exc)}


def _bench_postgres(url: str, rows: int, repeat: int) -> dict[str, Any]:
    engine = sa.create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(
                sa.text(
                    "CREATE TABLE orders AS SELECT i::bigint AS order_id, "
                    "(i % 40)::integer AS store_id, 'SKU-' || (i % 200) AS sku, "
                    "round((i % 997) * 0.37, 2)::float8 AS amount, "
                    "timestamp '2026-01-01' + i * interval '1 second' AS order_ts "
                    "FROM generate_series(0, :n - 1) i"
                ),
                {"n": rows},
            )
            conn.execute(sa.text("ALTER TABLE orders ADD PRIMARY KEY (order_id)"))
            conn.execute(sa.text("ANALYZE orders"))
        warehouse.configure(
            {
                "run_id": 1,
                "tenant": "bench",
                "connections": {"pg": {"kind": "sqlalchemy", "url": url}},
                "limits": LIMITS,
            }
        )

        def ours(sql: str, params: Any) -> pd.DataFrame:
            return warehouse.query(sql, params, connection="pg")

        def plain(sql: str, params: Any) -> pd.DataFrame:
            with engine.connect() as conn:
                result = conn.execute(sa.text(sql), params or {})
                return pd.DataFrame(result.fetchall(), columns=list(result.keys()))

        return compare(PG_CASES, ours, plain, repeat)
    finally:
        warehouse.reset()
        engine.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument("--repeat", type=int, default=20, help="timed runs per case and side")
    parser.add_argument("--rows", type=int, default=1_000_000, help="rows in the Parquet table")
    parser.add_argument("--pg-rows", type=int, default=200_000, help="rows in the PG table")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="nbcast-bench-") as tmp:
        duck = bench_duckdb(Path(tmp), args.rows, args.repeat)
    pg = bench_postgres(args.pg_rows, args.repeat)
    print(
        json.dumps(
            {
                "benchmark": "warehouse",
                "repeat": args.repeat,
                "duckdb_parquet": duck,
                "postgresql": pg,
                "versions": {
                    "duckdb": duckdb.__version__,
                    "pandas": pd.__version__,
                    "sqlalchemy": sa.__version__,
                },
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
