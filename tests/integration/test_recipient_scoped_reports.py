"""Recipient-scoped reports end to end: three recipients with different regions
(``parameters: {"region": …}`` and ``row_filter: {"region": …}`` on their
subscriptions) of one report over the example lake. One slot becomes three runs; the
worker runs each in a real kernel, whose ``warehouse.query`` sees only its region's
rows of the lake (the notebook's SQL does not filter by region at all); the delivery
worker mails each recipient (a real SMTP server on 127.0.0.1) a PDF whose text, read
back with pypdf, holds their region's figures and none of the others'. An unscoped
subscriber of the same report gets every region.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import duckdb
import pytest
from pypdf import PdfReader

from nbcast.cli import main
from nbcast.testing.smtp import smtp_server
from tests.notebooks import make_notebook
from tests.test_warehouse_rls import Warehouse, wh  # noqa: F401 - the warehouse fixture

pytestmark = pytest.mark.slow

REGIONS = {
    "EMEA": "emea-lead@example.com",
    "APAC": "apac-lead@example.com",
    "AMER": "amer@example.com",
}
DAY = "2026-10-30"
BODY = f'''
from IPython.display import Markdown, display
from nbcast import warehouse

# No WHERE on region: what this run may see is the warehouse's business.
by_region = warehouse.query("""
    SELECT o.region, r.region_name, count(*) AS orders, round(sum(o.revenue), 2) AS revenue
    FROM orders AS o JOIN regions AS r ON r.region = o.region
    WHERE CAST(o.order_ts AS DATE) = DATE '{DAY}'
    GROUP BY o.region, r.region_name
    ORDER BY o.region
""")
display(Markdown(f"# Sales on {DAY} for {{region}}"))
for row in by_region.itertuples():
    print(f"{{row.region}} ({{row.region_name}}): {{row.orders}} orders, USD {{row.revenue:,.2f}}")
'''


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


def _figures(lake: Path) -> dict[str, tuple[str, str]]:
    """Each region's name and revenue line as the report prints it, read from the lake."""
    with duckdb.connect() as con:
        rows = con.execute(
            f"SELECT o.region, r.region_name, count(*), round(sum(o.revenue), 2) "
            f"FROM '{lake}/orders.parquet' o JOIN '{lake}/regions.parquet' r USING (region) "
            f"WHERE CAST(o.order_ts AS DATE) = DATE '{DAY}' GROUP BY 1, 2"
        ).fetchall()
    return {
        region: (name, f"{orders} orders, USD {revenue:,.2f}")
        for region, name, orders, revenue in rows
    }


def _pdf_text(mail: Any) -> str:
    [pdf] = [p for p in mail.iter_attachments() if p.get_content_type() == "application/pdf"]
    reader = PdfReader(io.BytesIO(pdf.get_content()))
    return " ".join(" ".join((page.extract_text() or "").split()) for page in reader.pages)


def test_three_recipients_each_receive_only_their_regions_figures(
    use_db: str,
    tmp_path: Path,
    example_lake: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    subscriptions: list[dict[str, Any]] = [
        {
            "channel": "email",
            "to": to,
            "formats": ["pdf"],
            "parameters": {"region": region},
            "row_filter": {"region": region},
        }
        for region, to in REGIONS.items()
    ]
    subscriptions.append({"channel": "email", "to": "board@example.com", "formats": ["pdf"]})
    notebook = make_notebook(
        tmp_path / "regional.ipynb",
        parameters='region = "ALL"\n',
        body=BODY,
        nbcast={
            "name": "regional-sales",
            "schedule": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
            "outputs": ["pdf"],
            "subscriptions": subscriptions,
        },
    )
    monkeypatch.setenv("NBCAST_LAKE", str(example_lake))
    monkeypatch.setenv("NBCAST_CLOCK", "fixed:2026-10-31T05:00:00Z")  # before Saturday's slot
    _cli(capsys, "publish", str(notebook))
    _cli(capsys, "scheduler", "tick", "--now", "2026-10-31T06:01:00Z")  # 07:01 in Berlin
    monkeypatch.delenv("NBCAST_CLOCK")
    runs = json.loads(_cli(capsys, "runs", "list", "--json"))
    assert len(runs) == 4
    assert {r["slot_key"] for r in runs} == {"2026-10-31T07:00"}  # one slot, four audiences
    assert sorted(r["parameters"].get("region", "ALL") for r in runs) == sorted([*REGIONS, "ALL"])

    _cli(capsys, "worker", "--exit-when-idle", "--concurrency", "2")
    runs = json.loads(_cli(capsys, "runs", "list", "--json"))
    assert {r["state"] for r in runs} == {"SUCCEEDED"}, runs

    with smtp_server() as server:
        monkeypatch.setenv("NBCAST_SMTP_URL", f"smtp://{server.host}:{server.port}")
        monkeypatch.setenv("NBCAST_BASE_URL", "https://reports.example.com")
        out = _cli(capsys, "delivery-worker", "--exit-when-idle", "--poll", "0.1")
        assert "4 sent" in out, out
        mails = {m.rcpt_tos: m.mail for m in server.messages}
    assert set(mails) == {(to,) for to in [*REGIONS.values(), "board@example.com"]}

    figures = _figures(example_lake)
    assert set(REGIONS) <= set(figures)
    for region, to in REGIONS.items():
        text = _pdf_text(mails[(to,)])
        assert f"Sales on {DAY} for {region}" in text, text[:400]
        name, line = figures[region]
        assert f"{region} ({name}): {line}" in text, text[:800]
        for other, (other_name, other_line) in figures.items():
            if other != region:
                assert other_line not in text, f"{to} got {other}'s figures"
                assert other_name not in text, f"{to} got {other}'s name"
    board = _pdf_text(mails[("board@example.com",)])
    assert "for ALL" in board
    for region, (name, line) in figures.items():
        assert f"{region} ({name}): {line}" in board


# --- PostgreSQL through the worker: the kernel cannot undo its row filter ---------------

HOSTILE_CELL = r"""
import json, os
import psycopg
import sqlalchemy as sa
from nbcast import warehouse

found = {}
text = open(os.environ["NBCAST_RUN_CONTEXT"]).read()
found["context_names_admin"] = "admin" in text
url = sa.engine.make_url(json.loads(text)["connections"]["pg"]["url"])
dsn = url.set(drivername="postgresql").render_as_string(hide_password=False)
count = "SELECT region, count(*) FROM sales.orders GROUP BY region ORDER BY region"
rows = warehouse.query(count, connection="pg").to_dict("records")
found["query"] = {r["region"]: int(r["count"]) for r in rows}
with psycopg.connect(dsn, autocommit=True) as con, con.cursor() as cur:
    cur.execute("RESET ALL")
    cur.execute("SET ROLE NONE")
    cur.execute("SET nbcast.region = 'APAC'")
    cur.execute(count)
    found["after_resets"] = dict(cur.fetchall())
with psycopg.connect(dsn) as second, second.cursor() as cur:
    cur.execute(count)
    found["second_connection"] = dict(cur.fetchall())
print("FOUND " + json.dumps(found, sort_keys=True))
"""


def _found(store: Path, sha: str) -> dict[str, Any]:
    import nbformat

    from nbcast.artifacts import LocalArtifactStore

    executed = nbformat.reads(LocalArtifactStore(store).get(sha).decode(), as_version=4)
    for cell in executed.cells:
        for output in cell.get("outputs", []):
            for line in str(output.get("text", "")).splitlines():
                if line.startswith("FOUND "):
                    result: dict[str, Any] = json.loads(line[6:])
                    return result
    raise AssertionError("the report printed no FOUND line")


def test_a_scoped_kernel_on_postgresql_sees_only_its_rows(
    use_db: str,
    tmp_path: Path,
    wh: Warehouse,  # noqa: F811 - the fixture imported above
    nbcast_home: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import sqlalchemy as sa

    from nbcast.db import Database
    from nbcast.tenancy.models import Tenant

    notebook = make_notebook(
        tmp_path / "hostile.ipynb",
        parameters='region = "ALL"\n',
        body=HOSTILE_CELL,
        nbcast={
            "name": "hostile",
            "outputs": ["html"],
            "subscriptions": [
                {
                    "channel": "link",
                    "to": "emea@example.com",
                    "parameters": {"region": "EMEA"},
                    "row_filter": {"region": "EMEA"},
                },
                {"channel": "link", "to": "everyone@example.com"},
            ],
        },
    )
    _cli(capsys, "publish", str(notebook))
    db = Database.open(use_db)
    with db.session() as session:
        session.execute(
            sa.update(Tenant)
            .where(Tenant.name == "default")
            .values(warehouse={"connections": wh.configured()})
        )
    db.dispose()
    runs = json.loads(_cli(capsys, "run", "hostile", "--json"))["ids"]
    assert len(runs) == 2
    _cli(capsys, "worker", "--exit-when-idle")
    shown = {r["id"]: r for r in json.loads(_cli(capsys, "runs", "list", "--json"))}
    assert {shown[i]["state"] for i in runs} == {"SUCCEEDED"}, shown
    seen = {
        shown[i]["parameters"].get("region", "ALL"): _found(
            nbcast_home / "artifacts", shown[i]["artifact_sha256"]
        )
        for i in runs
    }
    assert seen["EMEA"] == {
        "context_names_admin": False,
        "query": {"EMEA": 10},
        "after_resets": {"EMEA": 10},
        "second_connection": {"EMEA": 10},
    }
    everything = {"AMER": 10, "APAC": 10, "EMEA": 10}
    assert seen["ALL"] == {
        "context_names_admin": False,
        "query": everything,
        "after_resets": everything,
        "second_connection": everything,
    }
