"""Recipient-scoped data on a real PostgreSQL: row-level security keyed on the session
user (:mod:`nbcast.warehouse.rls`).

A scratch warehouse database gets an admin role (owner of the database and its tables,
``CREATEROLE``, not a superuser), the tenant's own reporting role and a table of orders
over three regions. A run's warehouse context is made as the worker makes it
(:func:`~nbcast.warehouse.rls.scoped_connections`), written to a file, and a separate
Python process reads it as a notebook would — through ``warehouse.query`` and, being
hostile, with the URL it finds there: the base table directly, ``RESET ALL``, ``SET ROLE
NONE``, ``SET ROLE`` to the reader role, custom settings, ``row_security = off``, a second
connection, the mapping table, ``COPY``, the planner's statistics. It still sees only its
region's rows; an unscoped run sees them all.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import subprocess
import sys
import threading
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.warehouse import rls
from tests.conftest import REPO, scratch_pg_database

pytestmark = pytest.mark.postgres

REGIONS = ("EMEA", "APAC", "AMER")


@dataclass(frozen=True)
class Warehouse:
    """The scratch warehouse: URLs and role names."""

    superuser_url: str
    admin_url: str
    reports_url: str
    reader: str
    admin: str
    reports: str

    def configured(self, **setup: Any) -> dict[str, dict[str, Any]]:
        """The tenant's ``warehouse.connections`` as an admin would write them."""
        return {
            "pg": {
                "kind": "sqlalchemy",
                "url": self.reports_url,
                "admin_url": self.admin_url,
                "row_filter": {"reader_role": self.reader, **setup},
            }
        }


def _with_user(url: str, user: str, password: str | None = None) -> str:
    made = sa.engine.make_url(url).set(username=user, password=password)
    return made.render_as_string(hide_password=False)


def _with_database(url: str, database: str) -> str:
    return sa.engine.make_url(url).set(database=database).render_as_string(hide_password=False)


def _execute(url: str, *statements: str) -> None:
    engine = sa.create_engine(url, isolation_level="AUTOCOMMIT")
    try:
        with engine.connect() as conn:
            for statement in statements:
                conn.execute(sa.text(statement))
    finally:
        engine.dispose()


def _scalar(url: str, sql: str) -> Any:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return conn.execute(sa.text(sql)).scalar()
    finally:
        engine.dispose()


@pytest.fixture(scope="module")
def wh() -> Iterator[Warehouse]:
    tag = uuid.uuid4().hex[:8]
    admin, reports, reader = f"wh_admin_{tag}", f"wh_reports_{tag}", f"wh_reader_{tag}"
    made: list[str] = []  # roles outlive their database: dropped at the end, whatever happens
    server = ""
    try:
        with scratch_pg_database("nbcast_rls") as url:
            server = _with_database(url, "postgres")
            try:
                yield _build(url, tag, admin, reports, reader, made)
            finally:
                with contextlib.suppress(sa.exc.DBAPIError):
                    made += _roles_of(url)
                rls.close()
    finally:
        for role in [*made, reader]:
            if server:
                _execute(server, f'DROP ROLE IF EXISTS "{role}"')


def _build(url: str, tag: str, admin: str, reports: str, reader: str, made: list[str]) -> Warehouse:
    database = sa.engine.make_url(url).database
    made += [reports, admin]
    _execute(
        url,
        f"CREATE ROLE {admin} LOGIN CREATEROLE PASSWORD 'admin-{tag}'",
        f"CREATE ROLE {reports} LOGIN PASSWORD 'reports-{tag}'",
        f'ALTER DATABASE "{database}" OWNER TO {admin}',
        # Deterministic password hashes, so a test can tell which password a role has.
        f"ALTER ROLE {admin} SET password_encryption = 'md5'",
    )
    admin_url = _with_user(url, admin, f"admin-{tag}")
    _execute(
        admin_url,
        "CREATE SCHEMA sales",
        "CREATE TABLE sales.orders (id integer PRIMARY KEY, region text, amount integer)",
        "INSERT INTO sales.orders SELECT i, (ARRAY['EMEA','APAC','AMER'])[1 + i % 3], i "
        "FROM generate_series(0, 29) i",
        "CREATE TABLE sales.stores (store integer, region_id integer, open boolean)",
        "INSERT INTO sales.stores SELECT i, i % 4, i % 2 = 0 FROM generate_series(0, 15) i",
        "CREATE TABLE sales.fx (currency text, rate numeric)",  # nothing per recipient
        "INSERT INTO sales.fx VALUES ('EUR', 1.1), ('JPY', 0.007)",
        "ANALYZE sales.orders",  # statistics exist, so hiding them is tested
        f"GRANT USAGE ON SCHEMA sales TO {reports}",
        f"GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA sales TO {reports}",
    )
    rls.protect_table(admin_url, "sales.orders", "region", reader_role=reader)
    rls.protect_table(admin_url, "sales.stores", "region_id", "region", reader_role=reader)
    _execute(admin_url, f"GRANT SELECT ON sales.fx TO {reader}")
    return Warehouse(
        superuser_url=url,
        admin_url=admin_url,
        reports_url=_with_user(url, reports, f"reports-{tag}"),
        reader=reader,
        admin=admin,
        reports=reports,
    )


def _roles_of(url: str) -> list[str]:
    engine = sa.create_engine(url)
    try:
        with engine.connect() as conn:
            return list(
                conn.exec_driver_sql("SELECT role_name FROM nbcast_rls.row_filters").scalars()
            )
    finally:
        engine.dispose()


HOSTILE = r"""
import json, os, sys
from nbcast import warehouse
import psycopg
import sqlalchemy as sa

found = {}
context = json.load(open(os.environ["NBCAST_RUN_CONTEXT"]))
url = sa.engine.make_url(context["connections"]["pg"]["url"])
dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
count = "SELECT region, count(*) FROM sales.orders GROUP BY region ORDER BY region"

def seen(cur):
    cur.execute(count)
    return dict(cur.fetchall())

found["query"] = warehouse.query(count, connection="pg").to_dict("records")
try:
    found["stores"] = warehouse.query(
        "SELECT DISTINCT region_id FROM sales.stores ORDER BY 1", connection="pg"
    )["region_id"].tolist()
except Exception as exc:
    found["stores"] = type(exc).__name__
found["fx"] = len(warehouse.query("SELECT * FROM sales.fx", connection="pg"))
with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
    cur.execute("SELECT session_user, current_user")
    found["who"] = list(cur.fetchone())
    found["direct"] = seen(cur)
    cur.execute("RESET ALL"); found["reset_all"] = seen(cur)
    cur.execute("SET ROLE NONE"); found["set_role_none"] = seen(cur)
    try:
        cur.execute(f"SET ROLE {sys.argv[1]}"); found["set_role_reader"] = seen(cur)
        cur.execute("RESET ROLE")
    except psycopg.Error as exc:
        found["set_role_reader"] = type(exc).__name__
    cur.execute("SET nbcast.region = 'APAC'"); cur.execute("SET nbcast.anything = 'x'")
    found["custom_settings"] = seen(cur)
    cur.execute("SELECT count(*) FROM sales.orders WHERE region <> %s", [sys.argv[2]])
    found["other_regions"] = cur.fetchone()[0]
    with cur.copy("COPY sales.orders TO STDOUT") as copy:
        found["copy_rows"] = sum(bytes(block).count(b"\n") for block in copy)
    cur.execute("SELECT count(*) FROM pg_stats WHERE schemaname = 'sales' AND tablename = 'orders'")
    found["stats_rows"] = cur.fetchone()[0]
    for name, sql in [
        ("row_security_off", "SET row_security = off; SELECT count(*) FROM sales.orders"),
        ("mapping_table", "SELECT * FROM nbcast_rls.row_filters"),
        ("session_authorization", f"SET SESSION AUTHORIZATION {sys.argv[3]}"),
        ("disable_rls", "ALTER TABLE sales.orders DISABLE ROW LEVEL SECURITY"),
        ("drop_policy", "DROP POLICY nbcast_rf_region ON sales.orders"),
        ("become_superuser", "ALTER ROLE CURRENT_USER SUPERUSER"),
        ("bypass_rls", "ALTER ROLE CURRENT_USER BYPASSRLS"),
        ("write", "INSERT INTO sales.orders VALUES (1000, 'APAC', 1)"),
    ]:
        try:
            cur.execute(sql)
            found[name] = "allowed: " + str(cur.fetchall() if cur.description else "")
        except psycopg.Error as exc:
            found[name] = type(exc).__name__
with psycopg.connect(dsn) as second, second.cursor() as cur:
    found["second_connection"] = seen(cur)
print(json.dumps(found))
"""


def _notebook_sees(
    wh: Warehouse, tmp_path: Path, row_filter: dict[str, Any] | None, *args: str
) -> dict[str, Any]:
    """Run :data:`HOSTILE` against the context a worker writes for ``row_filter``."""
    context: dict[str, Any] = {
        "run_id": 1,
        "tenant": "acme",
        "connections": rls.scoped_connections(wh.configured(), row_filter),
    }
    if row_filter:
        context["row_filter"] = row_filter
    path = tmp_path / "run-context.json"
    path.write_text(json.dumps(context))
    text = path.read_text()
    assert wh.admin not in text  # the admin URL never reaches it
    assert "admin-" not in text
    if row_filter:
        assert wh.reports not in text  # nor the URL that sees every row
    done = subprocess.run(
        [sys.executable, "-c", HOSTILE, wh.reader, *args, wh.admin],
        env={"NBCAST_RUN_CONTEXT": str(path), "PATH": "/usr/bin:/bin"},
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def test_a_scoped_notebook_sees_only_its_rows_whatever_it_tries(
    wh: Warehouse, tmp_path: Path
) -> None:
    seen = _notebook_sees(wh, tmp_path, {"region": "EMEA"}, "EMEA")
    only = {"EMEA": 10}
    assert seen["query"] == [{"region": "EMEA", "count": 10}]
    assert seen["who"][0].startswith("nbcast_rf_")
    for attempt in (
        "direct",
        "reset_all",
        "set_role_none",
        "set_role_reader",
        "custom_settings",
        "second_connection",
    ):
        assert seen[attempt] == only, attempt
    assert seen["other_regions"] == 0
    assert seen["copy_rows"] == 10
    assert seen["stats_rows"] == 0  # the planner's statistics are hidden too
    assert seen["row_security_off"] == "InsufficientPrivilege"  # refused, not bypassed
    for refused in ("mapping_table", "session_authorization", "disable_rls", "drop_policy"):
        assert seen[refused] == "InsufficientPrivilege", refused
    for refused in ("become_superuser", "bypass_rls", "write"):
        assert seen[refused] == "InsufficientPrivilege", refused
    # Stores are protected on region_id for the attribute region: "EMEA" is no integer,
    # so the query fails (never rows); the table nothing is per recipient in is read.
    assert seen["stores"] == "DataError"
    assert seen["fx"] == 2


def test_each_audience_gets_its_own_role_and_its_own_rows(wh: Warehouse, tmp_path: Path) -> None:
    urls = {}
    for region in REGIONS:
        scoped = rls.scoped_connections(wh.configured(), {"region": region})
        urls[region] = scoped["pg"]["url"]
        got = _scalar(urls[region], "SELECT string_agg(DISTINCT region, ',') FROM sales.orders")
        assert got == region
    assert len(set(urls.values())) == 3
    users = {sa.engine.make_url(u).username for u in urls.values()}
    assert all(u is not None and u.startswith("nbcast_rf_") for u in users)
    # The same filter again: the same role and password, so concurrent runs agree.
    again = rls.scoped_connections(wh.configured(), {"region": "APAC"})["pg"]["url"]
    assert again == urls["APAC"]


def test_integer_attributes_and_tables_a_filter_does_not_name(wh: Warehouse) -> None:
    by_store = rls.scoped_url(wh.admin_url, wh.reports_url, {"region": 2}, reader_role=wh.reader)
    assert (
        _scalar(by_store, "SELECT string_agg(DISTINCT region_id::text, ',') FROM sales.stores")
        == "2"
    )
    # orders are protected on region: the value 2 is a text "2", no such region.
    assert _scalar(by_store, "SELECT count(*) FROM sales.orders") == 0
    # A filter without the table's attribute sees none of its rows (fail closed).
    other = rls.scoped_url(wh.admin_url, wh.reports_url, {"country": "DE"}, reader_role=wh.reader)
    assert _scalar(other, "SELECT count(*) FROM sales.orders") == 0
    assert _scalar(other, "SELECT count(*) FROM sales.stores") == 0
    assert _scalar(other, "SELECT count(*) FROM sales.fx") == 2  # not protected: granted


def test_an_unscoped_run_and_the_owner_see_and_write_as_before(
    wh: Warehouse, tmp_path: Path
) -> None:
    seen = _notebook_sees(wh, tmp_path, None, "EMEA")
    assert seen["who"][0] == wh.reports
    assert seen["set_role_reader"] == "InsufficientPrivilege"  # not a member of the reader
    assert seen["direct"] == {"AMER": 10, "APAC": 10, "EMEA": 10}
    assert seen["stores"] == [0, 1, 2, 3]
    assert seen["other_regions"] == 20
    assert seen["write"].startswith("allowed")  # it may insert; its row 1000 is removed below
    # FORCE ROW LEVEL SECURITY applies to the owner, and nbcast_unscoped lets it write.
    _execute(
        wh.admin_url,
        "INSERT INTO sales.orders VALUES (500, 'EMEA', 5)",
        "UPDATE sales.orders SET amount = amount + 1 WHERE id = 500",
    )
    _execute(wh.reports_url, "INSERT INTO sales.orders VALUES (501, 'APAC', 5)")
    try:
        assert _scalar(wh.admin_url, "SELECT count(*) FROM sales.orders") == 33
    finally:
        _execute(wh.admin_url, "DELETE FROM sales.orders WHERE id >= 500")


def test_a_table_with_its_own_row_security_keeps_its_policies(wh: Warehouse) -> None:
    _execute(
        wh.admin_url,
        "CREATE TABLE sales.notes (id integer, region text)",
        "INSERT INTO sales.notes "
        "SELECT i, (ARRAY['EMEA','APAC'])[1 + i % 2] FROM generate_series(0, 9) i",
        "ALTER TABLE sales.notes ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY small_ids ON sales.notes FOR SELECT TO PUBLIC USING (id < 6)",
        f"GRANT SELECT ON sales.notes TO {wh.reports}",
    )
    done = rls.protect_table(wh.admin_url, "sales.notes", "region", reader_role=wh.reader)
    assert not done.unscoped_policy_added
    assert _scalar(wh.reports_url, "SELECT count(*) FROM sales.notes") == 6  # not widened
    emea = rls.scoped_url(wh.admin_url, wh.reports_url, {"region": "EMEA"}, reader_role=wh.reader)
    assert _scalar(emea, "SELECT string_agg(id::text, ',' ORDER BY id) FROM sales.notes") == "0,2,4"


def test_protecting_again_changes_nothing(wh: Warehouse) -> None:
    again = rls.protect_table(wh.admin_url, "sales.orders", "region", reader_role=wh.reader)
    assert (again.policy, again.unscoped_policy_added) == ("nbcast_rf_region", False)
    policies = _scalar(
        wh.admin_url,
        "SELECT string_agg(policyname || ':' || permissive, ',' ORDER BY policyname) "
        "FROM pg_policies WHERE schemaname = 'sales' AND tablename = 'orders'",
    )
    assert policies == "nbcast_rf_region:RESTRICTIVE,nbcast_unscoped:PERMISSIVE"
    emea = rls.scoped_url(wh.admin_url, wh.reports_url, {"region": "EMEA"}, reader_role=wh.reader)
    assert _scalar(emea, "SELECT count(*) FROM sales.orders") == 10


@pytest.mark.parametrize(
    ("table", "column", "message"),
    [
        pytest.param("sales.missing", "region", "no table sales.missing", id="no_table"),
        pytest.param("sales.orders", "nope", "has no column 'nope'", id="no_column"),
        pytest.param("sales.orders; drop", "region", "must be", id="bad_table"),
        pytest.param("sales.orders", "region)--", "must be a column name", id="bad_column"),
    ],
)
def test_protect_table_refuses_what_is_not_there(
    wh: Warehouse, table: str, column: str, message: str
) -> None:
    with pytest.raises(rls.RowFilterSetupError, match=message):
        rls.protect_table(wh.admin_url, table, column, reader_role=wh.reader)


def test_a_role_a_session_tampered_with_is_repaired_by_the_next_run(wh: Warehouse) -> None:
    url = rls.scoped_url(wh.admin_url, wh.reports_url, {"region": "AMER"}, reader_role=wh.reader)
    made = sa.engine.make_url(url)
    role, secret = str(made.username), str(made.password)
    recorded = "md5" + hashlib.md5((secret + role).encode()).hexdigest()  # the admin hashes md5

    def stored() -> tuple[str, int]:
        return (
            _scalar(
                wh.superuser_url, f"SELECT rolpassword FROM pg_authid WHERE rolname = '{role}'"
            ),
            _scalar(
                wh.superuser_url,
                "SELECT count(*) FROM pg_db_role_setting s JOIN pg_roles r ON r.oid = s.setrole "
                f"WHERE r.rolname = '{role}'",
            ),
        )

    assert stored() == (recorded, 0)
    _execute(
        url,
        "ALTER ROLE CURRENT_USER PASSWORD 'mine-now'",  # a role may change its own password
        "ALTER ROLE CURRENT_USER SET search_path = pg_temp",  # and its own defaults
    )
    assert stored()[0] != recorded
    assert stored()[1] == 1
    assert (
        rls.scoped_url(wh.admin_url, wh.reports_url, {"region": "AMER"}, reader_role=wh.reader)
        == url
    )
    assert stored() == (recorded, 0)
    assert _scalar(url, "SELECT count(*) FROM sales.orders") == 10


def test_concurrent_workers_make_one_role(wh: Warehouse) -> None:
    results: list[str] = []
    errors: list[BaseException] = []

    def scope() -> None:
        try:
            got = rls.scoped_url(
                wh.admin_url, wh.reports_url, {"region": "LATAM"}, reader_role=wh.reader
            )
            results.append(got)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    rls.close()  # every thread sets up and makes the role as a fresh worker would
    threads = [threading.Thread(target=scope) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(set(results)) == 1
    assert _scalar(results[0], "SELECT count(*) FROM sales.orders") == 0


def test_the_cli_protects_a_table_with_the_admin_url_from_the_environment(
    wh: Warehouse, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from nbcast.cli import main

    _execute(
        wh.admin_url,
        "CREATE TABLE sales.targets (region text, target integer)",
        "INSERT INTO sales.targets VALUES ('EMEA', 1), ('APAC', 2)",
    )
    argv = ["warehouse", "protect", "sales.targets", "region", "--reader-role", wh.reader]
    monkeypatch.delenv("NBCAST_WAREHOUSE_ADMIN_URL", raising=False)
    assert main(argv) == 2
    assert "set $NBCAST_WAREHOUSE_ADMIN_URL" in capsys.readouterr().err
    monkeypatch.setenv("NBCAST_WAREHOUSE_ADMIN_URL", wh.admin_url)
    assert main([*argv, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown == {
        "table": "sales.targets",
        "column": "region",
        "attribute": "region",
        "policy": "nbcast_rf_region",
        "unscoped_policy_added": True,
    }
    assert main(["warehouse", "protect", "sales.targets", "nope", "--reader-role", wh.reader]) == 2
    assert "has no column 'nope'" in capsys.readouterr().err
    apac = rls.scoped_url(wh.admin_url, wh.reports_url, {"region": "APAC"}, reader_role=wh.reader)
    assert _scalar(apac, "SELECT string_agg(target::text, ',') FROM sales.targets") == "2"


def test_a_superuser_admin_can_drop_the_roles(wh: Warehouse) -> None:
    """Retiring every role of a warehouse: later runs make theirs again."""
    dedicated = f"rdr2_{uuid.uuid4().hex[:6]}"
    try:
        url = rls.scoped_url(
            wh.superuser_url, wh.reports_url, {"region": "EMEA"}, reader_role=dedicated
        )
        with pytest.raises(sa.exc.ProgrammingError, match="permission denied"):
            _scalar(url, "SELECT count(*) FROM sales.orders")  # that reader holds no grant
        before = set(_roles_of(wh.superuser_url))
        dropped = rls.drop_scoped_roles(wh.superuser_url)
        assert dropped == len(before) >= 2
        assert _roles_of(wh.superuser_url) == []
        with pytest.raises(sa.exc.OperationalError, match="does not exist"):
            _scalar(url, "SELECT 1")
        again = rls.scoped_url(
            wh.admin_url, wh.reports_url, {"region": "EMEA"}, reader_role=wh.reader
        )
        assert _scalar(again, "SELECT count(*) FROM sales.orders") == 10
    finally:
        _execute(wh.superuser_url, f'DROP ROLE IF EXISTS "{dedicated}"')
