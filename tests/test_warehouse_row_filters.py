"""Row filters in ``nbcast.warehouse`` (the kernel side), on real DuckDB and SQLite: the
lake's and a DuckDB file's tables seen through filtered views, the context's
``row_filter`` checked, and the connections a scoped run may not use refused.

What a hostile notebook can still do against the lake (the views are cooperative) is
shown too, so the documentation's claim stays true. PostgreSQL's enforced filters are
in ``test_warehouse_rls.py``.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import duckdb
import pytest

from nbcast import warehouse
from nbcast.errors import ConfigError
from nbcast.warehouse import rls


@pytest.fixture(autouse=True)
def _fresh_warehouse(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv(warehouse.ENV_RUN_CONTEXT, raising=False)
    monkeypatch.delenv(warehouse.ENV_LAKE, raising=False)
    warehouse.reset()
    yield
    warehouse.reset()


def write_parquet(path: Path, select: str) -> None:
    with duckdb.connect() as con:
        con.execute(f"COPY ({select}) TO '{path}' (FORMAT parquet)")


@pytest.fixture
def lake(tmp_path: Path) -> Path:
    """``orders`` (region and amount, 40 rows over four regions), ``Stores`` (its column
    spelled ``REGION``), ``products`` (no region) and ``flags`` (region_id integer)."""
    folder = tmp_path / "lake"
    folder.mkdir()
    write_parquet(
        folder / "orders.parquet",
        "select i as id, ['EMEA','APAC','AMER','LATAM'][1 + i % 4] as region, i * 10 as amount "
        "from range(40) t(i)",
    )
    write_parquet(
        folder / "stores.parquet",
        "select * from (values (1, 'EMEA'), (2, 'APAC'), (3, 'EMEA')) t(store, \"REGION\")",
    )
    write_parquet(folder / "products.parquet", "select i as sku from range(5) t(i)")
    write_parquet(
        folder / "flags.parquet", "select i % 3 as region_id, true as ok from range(9) t(i)"
    )
    return folder


def context(lake: Path, row_filter: Any = None, **connections: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "run_id": 7,
        "tenant": "acme",
        "connections": {"default": {"kind": "parquet", "path": str(lake)}, **connections},
    }
    if row_filter is not None:
        data["row_filter"] = row_filter
    return data


def test_an_unscoped_run_sees_every_row(lake: Path) -> None:
    warehouse.configure(context(lake))
    assert warehouse.current_context().row_filter is None
    assert len(warehouse.query("select * from orders")) == 40


def test_the_lakes_tables_are_filtered_views(lake: Path) -> None:
    warehouse.configure(context(lake, {"region": "EMEA"}))
    assert warehouse.current_context().row_filter == {"region": "EMEA"}
    orders = warehouse.query(
        "select region, count(*) as n, sum(amount) as s from orders group by 1"
    )
    assert orders.to_dict("records") == [{"region": "EMEA", "n": 10, "s": sum(range(0, 400, 40))}]
    # A column matched whatever its case; a table without the column is not filtered.
    assert warehouse.query("select store from stores order by 1")["store"].tolist() == [1, 3]
    assert len(warehouse.query("select * from products")) == 5
    # Joins and subqueries see the filtered views too.
    joined = warehouse.query(
        "select count(*) as n from orders o join stores s on s.region = o.region"
    )
    assert joined["n"].tolist() == [20]


def test_several_attributes_and_typed_values(lake: Path) -> None:
    warehouse.configure(context(lake, {"region": "APAC", "region_id": 2}))
    assert warehouse.query("select count(*) as n from orders")["n"].tolist() == [10]
    assert warehouse.query("select distinct region_id from flags")["region_id"].tolist() == [2]
    warehouse.configure(context(lake, {"ok": False}))
    assert len(warehouse.query("select * from flags")) == 0


def test_a_value_that_does_not_fit_the_column_matches_nothing(lake: Path) -> None:
    warehouse.configure(context(lake, {"region_id": "EMEA"}))  # an integer column
    assert len(warehouse.query("select * from flags")) == 0
    assert len(warehouse.query("select * from orders")) == 40  # no region_id column here


def test_another_filter_in_the_same_process_gets_its_own_views(lake: Path) -> None:
    warehouse.configure(context(lake, {"region": "EMEA"}))
    assert set(warehouse.query("select region from orders")["region"]) == {"EMEA"}
    warehouse.configure(context(lake, {"region": "LATAM"}))
    assert set(warehouse.query("select region from orders")["region"]) == {"LATAM"}
    warehouse.configure(context(lake))
    assert len(warehouse.query("select region from orders")) == 40


def test_the_lakes_filter_is_cooperative_only(lake: Path) -> None:
    """What the README says: SQL that names the file reads every row (as does Python
    that opens it), so the lake's views are no boundary against a hostile notebook."""
    warehouse.configure(context(lake, {"region": "EMEA"}))
    path = lake / "orders.parquet"
    assert len(warehouse.query(f"select * from read_parquet('{path}')")) == 40


def test_a_duckdb_files_tables_are_shadowed_by_filtered_views(tmp_path: Path) -> None:
    path = tmp_path / "wh.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute(
            "create table sales as select i as id, case when i % 2 = 0 then 'EMEA' else 'APAC' "
            "end as region from range(10) t(i)"
        )
        con.execute("create view emea_sales as select * from sales where region = 'EMEA'")
        con.execute("create table other as select 1 as x")
    spec = {"kind": "duckdb", "path": str(path)}
    warehouse.configure(context(tmp_path, {"region": "APAC"}, wh=spec))
    assert set(warehouse.query("select region from sales", connection="wh")["region"]) == {"APAC"}
    assert len(warehouse.query("select * from emea_sales", connection="wh")) == 0
    assert len(warehouse.query("select * from other", connection="wh")) == 1
    # Cooperative: the file's own name reaches its tables; and it stays read-only.
    assert len(warehouse.query("select * from wh.main.sales", connection="wh")) == 10
    with pytest.raises(duckdb.Error, match="read-only"):
        warehouse.query("create table wh.y as select 1", connection="wh")


def test_a_scoped_run_refuses_sqlalchemy_urls_that_are_not_a_filter_role(
    lake: Path, tmp_path: Path
) -> None:
    sqlite = {"kind": "sqlalchemy", "url": f"sqlite:///{tmp_path / 'x.db'}"}
    pg = {"kind": "sqlalchemy", "url": "postgresql+psycopg://reports@127.0.0.1:1/sales"}
    warehouse.configure(context(lake, {"region": "EMEA"}, lite=sqlite, pg=pg))
    for name in ("lite", "pg"):
        with pytest.raises(ConfigError, match="cannot apply this run's row filter"):
            warehouse.query("select 1", connection=name)
    warehouse.configure(context(lake, None, lite=sqlite))  # unscoped: fine
    assert warehouse.query("select 1 as one", connection="lite")["one"].tolist() == [1]


def test_a_withheld_connection_says_why(lake: Path) -> None:
    withheld = {"kind": "sqlalchemy", "withheld": "recipient-scoped run: no admin_url"}
    warehouse.configure(context(lake, {"region": "EMEA"}, pg=withheld))
    with pytest.raises(ConfigError, match=r"'pg' is withheld from this run: .*no admin_url"):
        warehouse.query("select 1", connection="pg")
    assert len(warehouse.usage()) == 1  # recorded like any failed query


@pytest.mark.parametrize(
    ("row_filter", "message"),
    [
        pytest.param(["region"], "row_filter must be an object", id="a_list"),
        pytest.param({"re gion": "EMEA"}, "named like a column", id="bad_name"),
        pytest.param({"region": 1.5}, "whole number", id="a_float"),
        pytest.param({"region": ""}, "1-256 printable", id="empty"),
        pytest.param({"region": "a\nb"}, "printable", id="newline"),
        pytest.param({f"a{i}": 1 for i in range(9)}, "more than 8", id="too_many"),
    ],
)
def test_malformed_row_filters_are_refused(lake: Path, row_filter: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        warehouse.configure(context(lake, row_filter))


def test_an_admin_url_never_parses_in_a_kernel(lake: Path) -> None:
    leaked = {"kind": "sqlalchemy", "url": "sqlite://", "admin_url": "postgresql://root@db/x"}
    with pytest.raises(ConfigError, match="admin_url must never reach a kernel"):
        warehouse.configure(context(lake, None, pg=leaked))


def test_scoped_connections_strips_secrets_and_withholds_what_it_cannot_scope(
    tmp_path: Path,
) -> None:
    configured: dict[str, dict[str, Any]] = {
        "default": {"kind": "parquet", "path": str(tmp_path)},
        "file": {"kind": "duckdb", "path": str(tmp_path / "x.duckdb")},
        "lite": {"kind": "sqlalchemy", "url": "sqlite:///x.db"},
        "pg": {
            "kind": "sqlalchemy",
            "url": "postgresql+psycopg://reports@db/sales",
            "admin_url": "postgresql+psycopg://admin:secret@db/sales",
            "row_filter": {"reader_role": "sales_reader"},
        },
        "pg_plain": {"kind": "sqlalchemy", "url": "postgresql+psycopg://reports@db/sales"},
    }
    unscoped = rls.scoped_connections(configured, None)
    assert unscoped["pg"] == {"kind": "sqlalchemy", "url": "postgresql+psycopg://reports@db/sales"}
    assert "secret" not in repr(unscoped)
    assert rls.scoped_connections(configured, {}) == unscoped
    # Scoped, without a warehouse to make roles in: only the PostgreSQL one with an
    # admin URL is scoped (and needs the warehouse); the others are kept or withheld.
    del configured["pg"]
    scoped = rls.scoped_connections(configured, {"region": "EMEA"})
    assert scoped["default"] == configured["default"]
    assert scoped["file"] == configured["file"]
    assert scoped["lite"] == {
        "kind": "sqlalchemy",
        "withheld": "recipient-scoped run: row filters are enforced on PostgreSQL connections only",
    }
    assert scoped["pg_plain"]["withheld"].endswith(
        "no admin_url to make the row filter's PostgreSQL role with"
    )
    assert "url" not in scoped["pg_plain"]
    warehouse.configure({"connections": scoped, "row_filter": {"region": "EMEA"}})  # parses


def test_scoped_connections_refuses_a_malformed_setup() -> None:
    bad: dict[str, dict[str, Any]] = {
        "pg": {"kind": "sqlalchemy", "url": "postgresql://a@b/c", "row_filter": {"x": 1}}
    }
    with pytest.raises(rls.RowFilterSetupError, match="at most reader_role"):
        rls.scoped_connections(bad, None)
    worse: dict[str, dict[str, Any]] = {
        "pg": {
            "kind": "sqlalchemy",
            "url": "postgresql://a@b/c",
            "row_filter": {"reader_role": "x; drop"},
        }
    }
    with pytest.raises(rls.RowFilterSetupError, match="must be a role name"):
        rls.scoped_connections(worse, {"region": "EMEA"})
