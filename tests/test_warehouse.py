"""``nbcast.warehouse`` against real DuckDB, real PostgreSQL and real SQLite: no mocks.

Parquet lakes are written into ``tmp_path`` with DuckDB's ``COPY ... TO``; PostgreSQL
tests use a scratch database made for this session and dropped after it.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import duckdb
import pytest
import sqlalchemy as sa

from nbcast import warehouse
from nbcast.errors import ConfigError, QueryLimitExceeded
from tests.conftest import REPO, scratch_pg_database

EXAMPLE_LAKE = REPO / "notebooks" / "examples" / "lake"
# About 10^10 rows to sum: tens of seconds on any machine, so only the cap can end it.
SLOW_DUCKDB_SQL = "select sum(a.i * b.i) from range(10000000) a(i), range(10000000) b(i)"
"""10^14 products: hours of work, so only an interruption ends it within a test's timeout."""


@pytest.fixture(autouse=True)
def _fresh_warehouse(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(warehouse.ENV_RUN_CONTEXT, raising=False)
    monkeypatch.delenv(warehouse.ENV_LAKE, raising=False)
    warehouse.reset()
    yield
    warehouse.reset()


def write_parquet(path: Path, select: str) -> None:
    """Write the result of ``select`` to ``path`` as Parquet."""
    with duckdb.connect() as con:
        con.execute(f"COPY ({select}) TO '{path}' (FORMAT parquet)")


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """A small lake: ``items`` (1,000 rows) and ``regions`` (4 rows)."""
    folder = tmp_path / "lake"
    folder.mkdir()
    write_parquet(
        folder / "items.parquet",
        "select i::integer as id, 'item ' || i as name, (i % 7) * 1.5 as price "
        "from range(1000) t(i)",
    )
    write_parquet(
        folder / "regions.parquet",
        "select * from (values ('EMEA'), ('AMER'), ('APAC'), ('LATAM')) t(region)",
    )
    return folder


@pytest.fixture(scope="session")
def pg_scratch_url() -> Iterator[str]:
    """A scratch PostgreSQL database with a ``customers`` table, dropped after the session."""
    with scratch_pg_database("nbcast_wh") as url:
        engine = sa.create_engine(url)
        with engine.begin() as conn:
            conn.execute(sa.text("CREATE TABLE customers (id integer PRIMARY KEY, name text)"))
            conn.execute(
                sa.text(
                    "INSERT INTO customers SELECT i, 'customer ' || i FROM generate_series(1, 50) i"
                )
            )
        engine.dispose()
        yield url
        warehouse.close()


def context(
    lake: Path | None = None, *, limits: dict[str, Any] | None = None, **extra: Any
) -> dict[str, Any]:
    """A run context dict with the lake as ``default`` plus ``extra`` connections/keys."""
    connections = {"default": {"kind": "parquet", "path": str(lake)}} if lake else {}
    connections.update(extra.pop("connections", {}))
    return {
        "run_id": 42,
        "tenant": "acme",
        "connections": connections,
        "limits": limits or {},
        **extra,
    }


def usage_lines(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


# --- results and parameters --------------------------------------------------------------


def test_query_returns_a_dataframe_with_the_rows(lake: Path) -> None:
    warehouse.configure(context(lake))
    df = warehouse.query("select id, name from items where id < 3 order by id")
    assert list(df.columns) == ["id", "name"]
    assert df["id"].tolist() == [0, 1, 2]
    assert df["name"].tolist() == ["item 0", "item 1", "item 2"]
    assert warehouse.query("select count(*) as n from regions")["n"].tolist() == [4]


def test_an_empty_result_keeps_its_columns(lake: Path) -> None:
    warehouse.configure(context(lake))
    df = warehouse.query("select id, name from items where false")
    assert (len(df), list(df.columns)) == (0, ["id", "name"])


def test_positional_and_named_params_on_duckdb(lake: Path) -> None:
    warehouse.configure(context(lake))
    q = warehouse.query
    assert q("select name from items where id = ?", [7])["name"].tolist() == ["item 7"]
    assert q("select name from items where id = $1", (8,))["name"].tolist() == ["item 8"]
    assert q("select name from items where id = $id", {"id": 9})["name"].tolist() == ["item 9"]


@pytest.mark.postgres
def test_named_params_on_postgres(pg_scratch_url: str) -> None:
    warehouse.configure(context(connections={"pg": {"kind": "sqlalchemy", "url": pg_scratch_url}}))
    df = warehouse.query(
        "select id, name from customers where id between :lo and :hi order by id",
        {"lo": 3, "hi": 5},
        connection="pg",
    )
    assert df.to_dict("list") == {
        "id": [3, 4, 5],
        "name": ["customer 3", "customer 4", "customer 5"],
    }
    empty = warehouse.query("select id from customers where id < :n", {"n": 0}, connection="pg")
    assert (len(empty), list(empty.columns)) == (0, ["id"])


@pytest.mark.postgres
def test_sql_injection_through_params_stays_data(lake: Path, pg_scratch_url: str) -> None:
    pg = {"pg": {"kind": "sqlalchemy", "url": pg_scratch_url}}
    warehouse.configure(context(lake, connections=pg))
    evil = "x' or '1'='1'; drop table customers; --"
    assert warehouse.query("select count(*) as n from items where name = ?", [evil])["n"][0] == 0
    assert warehouse.query("select ?::varchar as v", [evil])["v"].tolist() == [evil]
    rows = warehouse.query("select id from customers where name = :n", {"n": evil}, "pg")
    assert rows.empty
    assert warehouse.query("select :v as v", {"v": evil}, "pg")["v"].tolist() == [evil]
    assert warehouse.query("select count(*) as n from customers", None, "pg")["n"][0] == 50


def test_params_of_the_wrong_shape_are_refused(lake: Path, tmp_path: Path) -> None:
    lite = {"lite": {"kind": "sqlalchemy", "url": f"sqlite:///{tmp_path / 'lite.db'}"}}
    warehouse.configure(context(lake, connections=lite))
    with pytest.raises(TypeError, match="not a string"):
        warehouse.query("select ?", "abc")
    with pytest.raises(TypeError, match="mapping"):
        warehouse.query("select 1", [1], connection="lite")


# --- caps --------------------------------------------------------------------------------


def test_row_cap_is_enforced_and_recorded(lake: Path, tmp_path: Path) -> None:
    usage_path = tmp_path / "usage.jsonl"
    warehouse.configure(context(lake, limits={"max_rows": 10}, usage_path=str(usage_path)))
    assert len(warehouse.query("select * from items limit 10")) == 10  # at the cap: fine
    with pytest.raises(QueryLimitExceeded, match="more than 10 rows") as raised:
        warehouse.query("select * from items")
    assert (raised.value.limit, raised.value.cap) == ("rows", 10)
    ok, failed = usage_lines(usage_path)
    assert ok["error"] is None
    assert ok["rows"] == 10
    assert failed["error"].startswith("QueryLimitExceeded: ")
    assert 10 < failed["rows"] <= 10 + 2048  # at most one DuckDB vector past the cap


@pytest.mark.timeout(60)
def test_row_cap_streams_a_huge_result_without_loading_it(lake: Path) -> None:
    warehouse.configure(context(lake, limits={"max_rows": 1000}))
    with pytest.raises(QueryLimitExceeded) as raised:
        warehouse.query("select * from range(10000000000) t(i)")  # 10^10 rows: never loadable
    assert raised.value.limit == "rows"
    assert warehouse.usage()[-1].rows <= 1000 + 2048


@pytest.mark.postgres
def test_row_cap_on_postgres_fetches_one_row_past_the_cap(pg_scratch_url: str) -> None:
    pg = {"pg": {"kind": "sqlalchemy", "url": pg_scratch_url}}
    warehouse.configure(context(connections=pg, limits={"max_rows": 10}))
    with pytest.raises(QueryLimitExceeded, match="more than 10 rows"):
        warehouse.query("select * from customers", connection="pg")
    assert warehouse.usage()[-1].rows == 11


def test_byte_cap_is_enforced(lake: Path) -> None:
    warehouse.configure(context(lake, limits={"max_bytes": 100_000}))
    small = warehouse.query("select repeat('x', 100) as s from range(100) t(i)")
    assert len(small) == 100
    with pytest.raises(QueryLimitExceeded, match=r"exceeds 100,000 bytes \(0\.1 MiB\)") as raised:
        warehouse.query("select repeat('x', 1000) as s from range(10000) t(i)")
    assert (raised.value.limit, raised.value.cap) == ("bytes", 100_000)
    assert warehouse.usage()[-1].error is not None
    assert warehouse.usage()[-1].bytes > 100_000


def test_recorded_bytes_are_the_frames_deep_memory_usage(lake: Path) -> None:
    warehouse.configure(context(lake))
    # Several fetched chunks, strings included: the chunked count must add up exactly.
    df = warehouse.query("select i, 'row ' || i as label from range(70000) t(i)")
    assert len(df) == 70000
    assert warehouse.usage()[-1].bytes == int(df.memory_usage(deep=True).sum())


@pytest.mark.timeout(30)
def test_duckdb_timeout_interrupts_a_slow_query(lake: Path) -> None:
    warehouse.configure(context(lake, limits={"timeout_s": 0.5}))
    started = time.perf_counter()
    with pytest.raises(QueryLimitExceeded, match=r"longer than 0\.5 s") as raised:
        warehouse.query(SLOW_DUCKDB_SQL)
    assert (raised.value.limit, raised.value.cap) == ("seconds", 0.5)
    assert time.perf_counter() - started >= 0.5  # not before its time (the test's timeout
    # is what shows it was interrupted: the query itself would run for hours)
    assert warehouse.query("select 1 as one")["one"].tolist() == [1]  # the connection lives on


@pytest.mark.postgres
@pytest.mark.timeout(30)
def test_postgres_statement_timeout(pg_scratch_url: str) -> None:
    pg = {"pg": {"kind": "sqlalchemy", "url": pg_scratch_url}}
    warehouse.configure(context(connections=pg, limits={"timeout_s": 0.5}))
    with pytest.raises(QueryLimitExceeded, match=r"longer than 0\.5 s") as raised:
        warehouse.query("select pg_sleep(3600)", connection="pg")  # only a cancel ends it
    assert raised.value.limit == "seconds"
    assert warehouse.usage()[-1].error.startswith("QueryLimitExceeded")  # type: ignore[union-attr]
    assert warehouse.query("select 1 as one", connection="pg")["one"].tolist() == [1]


@pytest.mark.timeout(30)
def test_other_dialects_are_cancelled_best_effort_sqlite(tmp_path: Path) -> None:
    lite_url = f"sqlite:///{tmp_path / 'lite.db'}"
    with sa.create_engine(lite_url).begin() as conn:
        conn.execute(sa.text("create table t (x integer)"))
    lite = {"lite": {"kind": "sqlalchemy", "url": lite_url}}
    warehouse.configure(context(connections=lite, limits={"timeout_s": 0.5}))
    endless = "with recursive c(n) as (select 1 union all select n + 1 from c) select max(n) from c"
    with pytest.raises(QueryLimitExceeded, match="longer than"):
        warehouse.query(endless, connection="lite")  # only sqlite3's interrupt() stops it
    # query() never commits: a write is rolled back.
    warehouse.query("insert into t values (1)", connection="lite")
    assert warehouse.query("select count(*) as n from t", connection="lite")["n"][0] == 0


# --- the run context ---------------------------------------------------------------------


def test_unknown_connection_is_a_config_error_naming_the_allowed_ones(
    lake: Path, tmp_path: Path
) -> None:
    wh = {"wh": {"kind": "duckdb", "path": str(tmp_path / "wh.duckdb")}}
    warehouse.configure(context(lake, connections=wh))
    with pytest.raises(ConfigError, match=r"unknown connection 'prod'.*allowed: 'default', 'wh'"):
        warehouse.query("select 1", connection="prod")
    assert warehouse.usage()[-1].connection == "prod"
    assert warehouse.usage()[-1].error.startswith("ConfigError")  # type: ignore[union-attr]
    with pytest.raises(ConfigError):
        warehouse.query("select 1", connection="x" * 1000)
    assert warehouse.usage()[-1].connection == "x" * 128  # fits the usage table's column


def test_context_from_the_environment_file(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    # Relative paths in a context file are relative to the file's folder.
    relative_lake = {"default": {"kind": "parquet", "path": "../lake"}}
    data = context(limits={"max_rows": 5}, usage_path="usage.jsonl", connections=relative_lake)
    (run_dir / "context.json").write_text(json.dumps(data))
    monkeypatch.setenv(warehouse.ENV_RUN_CONTEXT, str(run_dir / "context.json"))
    ctx = warehouse.current_context()
    assert (ctx.run_id, ctx.tenant, ctx.limits.max_rows) == (42, "acme", 5)
    assert ctx.connections["default"].path == lake
    assert len(warehouse.query("select * from regions")) == 4
    [line] = usage_lines(run_dir / "usage.jsonl")
    assert (line["run_id"], line["tenant"], line["connection"]) == (42, "acme", "default")

    # configure() wins over the environment; configure(None) hands back to it.
    warehouse.configure(context(lake, limits={"max_rows": 2}))
    with pytest.raises(QueryLimitExceeded):
        warehouse.query("select * from regions")
    assert warehouse.configure(None).limits.max_rows == 5


def test_a_broken_environment_context_is_an_error_not_a_fallback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(warehouse.ENV_RUN_CONTEXT, str(tmp_path / "missing.json"))
    with pytest.raises(ConfigError, match="NBCAST_RUN_CONTEXT"):
        warehouse.query("select 1")
    (tmp_path / "bad.json").write_text("{not json")
    monkeypatch.setenv(warehouse.ENV_RUN_CONTEXT, str(tmp_path / "bad.json"))
    with pytest.raises(ConfigError, match="cannot read run context"):
        warehouse.current_context()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        pytest.param({"limits": {"max_row": 5}}, "unknown keys", id="limit_typo"),
        pytest.param({"limits": {"max_rows": 0}}, "positive integer", id="zero_rows"),
        pytest.param({"limits": {"timeout_s": True}}, "positive number", id="bool_timeout"),
        pytest.param({"connections": {"x": {"kind": "oracle"}}}, "kind must be", id="bad_kind"),
        pytest.param({"connections": {"x": {"kind": "sqlalchemy"}}}, r"x\.url", id="no_url"),
        pytest.param(
            {"connections": {"x": {"kind": "duckdb", "path": "a", "url": "b"}}},
            "unknown keys",
            id="url_on_duckdb",
        ),
        pytest.param({"run_id": 1.5}, "run_id", id="float_run_id"),
        pytest.param({"connections": []}, "connections must be", id="connections_list"),
    ],
)
def test_invalid_contexts_are_refused(change: dict[str, Any], message: str) -> None:
    data = {**context(Path("/tmp/lake")), **change}
    with pytest.raises(ConfigError, match=message):
        warehouse.configure(data)


def test_default_context_reads_nbcast_lake(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    with pytest.raises(ConfigError, match="NBCAST_LAKE"):  # no ./lake here
        warehouse.query("select 1")
    monkeypatch.setenv(warehouse.ENV_LAKE, str(lake))
    ctx = warehouse.current_context()
    assert (ctx.source, ctx.usage_path, ctx.limits) == ("default", None, warehouse.DEFAULT_LIMITS)
    assert warehouse.query("select count(*) as n from items")["n"][0] == 1000
    # An empty $NBCAST_LAKE counts as unset: ./lake under the current folder.
    monkeypatch.setenv(warehouse.ENV_LAKE, "")
    monkeypatch.chdir(tmp_path)
    assert warehouse.current_context().connections["default"].path == lake
    assert [u.connection for u in warehouse.usage()] == ["default", "default"]


def test_the_example_lake_if_generated(monkeypatch: pytest.MonkeyPatch) -> None:
    if not (EXAMPLE_LAKE / "orders.parquet").is_file():
        pytest.skip("example lake not generated (make lake)")
    monkeypatch.setenv(warehouse.ENV_LAKE, str(EXAMPLE_LAKE))
    df = warehouse.query(
        "select r.region, count(*) as orders from orders o join regions r using (region) "
        "where o.order_ts >= ? and o.order_ts < ? group by r.region order by r.region",
        ["2026-06-15", "2026-06-16"],
    )
    assert df["region"].tolist() == ["AMER", "APAC", "EMEA", "LATAM"]
    assert (df["orders"] > 0).all()


# --- connection kinds --------------------------------------------------------------------


def test_parquet_views_follow_the_folder_and_sql_stays_inside_it(lake: Path) -> None:
    warehouse.configure(context(lake))
    assert len(warehouse.query("select * from regions")) == 4
    write_parquet(lake / "late.parquet", "select 1 as x")
    assert warehouse.query("select x from late")["x"].tolist() == [1]  # views were rebuilt
    secret = lake.parent / "secret.csv"
    secret.write_text("a\n1\n")
    with pytest.raises(duckdb.Error, match="disabled by configuration"):
        warehouse.query(f"select * from read_csv('{secret}')")
    with pytest.raises(duckdb.Error, match="locked"):
        warehouse.query("set enable_external_access = true")


def test_queries_from_several_threads_share_one_connection(lake: Path) -> None:
    warehouse.configure(context(lake))
    with ThreadPoolExecutor(4) as pool:
        counts = list(
            pool.map(
                lambda n: len(warehouse.query("select * from items where id < ?", [n])), range(40)
            )
        )
    assert counts == list(range(40))
    assert len(warehouse.usage()) == 40


def test_duckdb_file_is_opened_read_only(tmp_path: Path) -> None:
    path = tmp_path / "wh.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("create table sales as select i as id, i * 2 as amount from range(5) t(i)")
    warehouse.configure(context(connections={"wh": {"kind": "duckdb", "path": str(path)}}))
    assert warehouse.query("select sum(amount) as s from sales", connection="wh")["s"][0] == 20
    with pytest.raises(duckdb.Error, match="read-only"):
        warehouse.query("create table x as select 1", connection="wh")


# --- usage figures -----------------------------------------------------------------------


def test_usage_file_read_usage_and_summarize(lake: Path, tmp_path: Path) -> None:
    usage_path = tmp_path / "usage.jsonl"
    warehouse.configure(context(lake, limits={"max_rows": 500}, usage_path=str(usage_path)))
    sql = "select * from items where id < ?"
    warehouse.query(sql, [100])
    warehouse.query(sql, [200])
    with pytest.raises(QueryLimitExceeded):
        warehouse.query("select * from items")
    lines = usage_lines(usage_path)
    assert [set(line) for line in lines] == [
        {"run_id", "tenant", "connection", "sql_sha256", "rows", "bytes", "seconds", "error"}
    ] * 3
    records = warehouse.read_usage(usage_path)
    assert records == warehouse.usage()
    assert records[0].sql_sha256 == records[1].sql_sha256 != records[2].sql_sha256
    assert [r.rows for r in records[:2]] == [100, 200]
    totals = warehouse.summarize(records)
    assert (totals["queries"], totals["errors"]) == (3, 1)
    assert totals["rows"] == sum(r.rows for r in records)
    assert totals["bytes"] == sum(r.bytes for r in records) > 0
    assert totals["seconds"] == pytest.approx(sum(r.seconds for r in records))
    empty = {"queries": 0, "errors": 0, "rows": 0, "bytes": 0, "seconds": 0.0}
    assert warehouse.summarize([]) == empty


def test_read_usage_ignores_a_torn_last_line_and_refuses_garbage(tmp_path: Path) -> None:
    assert warehouse.read_usage(tmp_path / "none.jsonl") == []
    record = warehouse.QueryUsage(
        run_id=1, tenant="t", connection="c", sql_sha256="ab", rows=1, bytes=2, seconds=0.5
    )
    path = tmp_path / "usage.jsonl"
    path.write_text(json.dumps(record.to_json()) + "\n" + '{"run_id": 1, "ten')
    assert warehouse.read_usage(path) == [record]
    path.write_text('{"run_id": 1}\n')
    with pytest.raises(ValueError, match=r"usage\.jsonl:1"):
        warehouse.read_usage(path)


def test_an_unwritable_usage_file_is_a_config_error(lake: Path, tmp_path: Path) -> None:
    warehouse.configure(context(lake, usage_path=str(tmp_path / "no" / "such" / "usage.jsonl")))
    with pytest.raises(ConfigError, match="cannot append to usage file"):
        warehouse.query("select 1")


# --- the module itself -------------------------------------------------------------------


def test_importing_the_package_stays_cheap() -> None:
    code = (
        "import sys, nbcast.warehouse, nbcast.warehouse.execution; "
        "heavy = {'duckdb', 'pandas', 'sqlalchemy', 'numpy'} "
        "& set(sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO
    ).stdout.strip()
    assert out == "[]"


def test_every_name_the_module_had_is_still_importable() -> None:
    """``nbcast.warehouse`` became a package; notebooks and the executor keep their names."""
    from nbcast.warehouse import (  # noqa: F401 - importing them is the test
        DEFAULT_CONNECTION,
        DEFAULT_LIMITS,
        ENV_LAKE,
        ENV_RUN_CONTEXT,
        KINDS,
        ConfigError,
        ConnectionSpec,
        Limits,
        QueryLimitExceeded,
        QueryUsage,
        RunContext,
        close,
        configure,
        current_context,
        load_context,
        query,
        read_usage,
        reset,
        summarize,
        usage,
    )

    assert callable(warehouse.query)
    assert KINDS == ("parquet", "duckdb", "sqlalchemy")


def test_reset_forgets_the_context_and_the_figures(lake: Path) -> None:
    warehouse.configure(context(lake))
    warehouse.query("select 1")
    assert warehouse.current_context().tenant == "acme"
    assert warehouse.usage()
    warehouse.reset()
    assert warehouse.current_context().source == "default"
    assert warehouse.usage() == []


def test_public_api_is_documented() -> None:
    assert "Design decisions" in (warehouse.__doc__ or "")
    for name in warehouse.__all__:
        value = getattr(warehouse, name)
        if callable(value):
            assert value.__doc__, name


def test_connection_urls_never_print_their_password() -> None:
    spec = warehouse.ConnectionSpec(kind="sqlalchemy", url="postgresql://ana:s3cret@db/x")
    assert "s3cret" not in str(spec)
    assert "s3cret" not in repr(spec)
    assert str(spec) == "sqlalchemy:postgresql://ana:***@db/x"
