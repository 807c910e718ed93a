"""The bundled example reports and their lake."""

from __future__ import annotations

import ast
import hashlib
import json
import subprocess
import sys
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import duckdb
import pytest

from nbcast.definitions.parameters import schema_to_json
from nbcast.definitions.spec import OutputFormat
from nbcast.definitions.versions import prepare
from nbcast.output import check_table_name
from nbcast.output.tables import read_tables
from nbcast.scheduler.preview import preview_definition

EXAMPLES = Path(__file__).resolve().parents[1] / "notebooks" / "examples"
NOTEBOOKS = sorted(EXAMPLES.glob("*.ipynb"))
GENERATOR = EXAMPLES / "lake" / "generate.py"


def _code_cells(path: Path) -> list[str]:
    cells = json.loads(path.read_text())["cells"]
    return ["".join(cell["source"]) for cell in cells if cell["cell_type"] == "code"]


def _preview(stem: str, first: str, last: str) -> dict[str, dict[str, Any]]:
    """The example's slots from ``first`` to ``last`` (UTC days), as ``nbcast schedule
    preview --definition`` shows them once published: slot key -> row."""
    path = EXAMPLES / f"{stem}.ipynb"
    prepared = prepare(path)
    rows = preview_definition(
        prepared.block,
        schema_to_json(prepared.schema),
        range_from=datetime.fromisoformat(first).replace(tzinfo=UTC),
        range_to=datetime.fromisoformat(last).replace(tzinfo=UTC),
    )
    return {row["slot_key"]: row for row in rows}


@pytest.fixture(scope="module")
def generated_lakes(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Two lakes written by two runs of the generator, into fresh folders."""
    base = tmp_path_factory.mktemp("lakes")
    for out in ("a", "b"):
        subprocess.run([sys.executable, str(GENERATOR), "--out", str(base / out), "-q"], check=True)
    return base / "a", base / "b"


def test_there_are_at_least_three_examples() -> None:
    assert len(NOTEBOOKS) >= 3


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_is_a_valid_definition_with_a_schedule(path: Path) -> None:
    prepared = prepare(path)
    assert prepared.spec.schedule is not None
    assert prepared.spec.subscriptions
    assert prepared.schema, "an example report should be parameterized"
    assert {p.name for p in prepared.schema} >= set(prepared.spec.parameters)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_renders_and_delivers_what_the_demo_shows(path: Path) -> None:
    spec = prepare(path).spec
    # The reports people read render to PDF and XLSX too; the data-quality alert only
    # to HTML and the CSV of its findings (it runs every four hours: rendering a PDF of
    # every clean interval would be work nobody reads).
    expected = {OutputFormat.html, OutputFormat.csv}
    if path.stem != "data_quality":
        expected = {OutputFormat.html, OutputFormat.pdf, OutputFormat.xlsx}
    assert expected <= set(spec.outputs)
    channels = {s.channel for s in spec.subscriptions}
    # `make demo` configures email (a local SMTP mailbox) and links; another channel
    # would make its deliveries FAILED no_channel there.
    assert channels <= {"email", "link"}
    assert "email" in channels
    for subscription in spec.subscriptions:
        assert subscription.formats
        assert set(subscription.formats) <= set(spec.outputs)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_publishes_its_tables_with_valid_names(path: Path) -> None:
    """``output.table(df, "name")`` calls, found in the code cells without running them:
    the spreadsheet and CSV renditions need at least one."""
    names = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        for node in ast.walk(ast.parse("".join(cell["source"]))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "table"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "output"
            ):
                assert len(node.args) == 2
                assert isinstance(node.args[1], ast.Constant)
                names.append(check_table_name(node.args[1].value))
    assert names, "the report publishes no table (nbcast.output.table)"
    assert len({n.casefold() for n in names}) == len(names)


def test_the_data_quality_report_mails_only_when_it_finds_something() -> None:
    spec = prepare(EXAMPLES / "data_quality.ipynb").spec
    assert [s.only_if for s in spec.subscriptions if s.channel == "email"] == ["results"]


def _digests(folder: Path) -> dict[str, str]:
    return {
        p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.parquet"))
    }


def test_the_lake_is_generated_deterministically(generated_lakes: tuple[Path, Path]) -> None:
    a, b = generated_lakes
    first, second = _digests(a), _digests(b)
    assert first == second
    assert {"orders.parquet", "products.parquet", "regions.parquet", "stores.parquet"} <= set(first)
    size = sum((a / name).stat().st_size for name in first)
    assert size < 5 * 1024 * 1024


# -- the period each example covers ------------------------------------------------------

PERIOD_BINDINGS: dict[str, dict[str, Any]] = {
    "daily_sales": {
        "report_date": {"$period": "slot", "steps": [{"business_days": -1, "calendar": "DE"}]}
    },
    "kpi_dashboard": {
        "week_end": {"$period": "slot", "steps": [{"weeks": -1}, {"to": "end_of_week"}]}
    },
    "data_quality": {
        "interval_start": {"$period": "interval_start", "format": "datetime"},
        "interval_end": {"$period": "interval_end", "format": "datetime"},
    },
}


@pytest.mark.parametrize("stem", sorted(PERIOD_BINDINGS))
def test_each_example_binds_its_period_to_the_slot(stem: str) -> None:
    """The bound parameters are declared with a literal ``str`` default, so the notebook
    runs as it is in JupyterLab and under nbval."""
    prepared = prepare(EXAMPLES / f"{stem}.ipynb")
    bindings = PERIOD_BINDINGS[stem]
    assert {k: v for k, v in prepared.spec.parameters.items() if k in bindings} == bindings
    defaults = {p.name: p.default for p in prepared.schema}
    for name in bindings:
        assert isinstance(defaults[name], str), name


@pytest.mark.parametrize(
    ("stem", "slot", "expected"),
    [
        pytest.param(
            "daily_sales", "2026-11-02T07:00", {"report_date": "2026-10-30"}, id="monday_friday"
        ),
        pytest.param(
            "daily_sales", "2026-11-03T07:00", {"report_date": "2026-11-02"}, id="tuesday_monday"
        ),
        pytest.param(
            "daily_sales", "2026-12-28T07:00", {"report_date": "2026-12-24"}, id="after_christmas"
        ),
        pytest.param(
            "daily_sales", "2027-01-04T07:00", {"report_date": "2026-12-31"}, id="after_new_year"
        ),
        pytest.param(
            "kpi_dashboard", "2026-11-02T06:30", {"week_end": "2026-11-01"}, id="weekly_november"
        ),
        pytest.param(
            "kpi_dashboard", "2027-01-04T06:30", {"week_end": "2027-01-03"}, id="weekly_new_year"
        ),
        pytest.param(
            "data_quality",
            "2026-10-31T12:00",
            {
                "interval_start": "2026-10-31T08:00:00-04:00",
                "interval_end": "2026-10-31T12:00:00-04:00",
            },
            id="four_hours",
        ),
        pytest.param(
            "data_quality",
            "2026-11-01T04:00",
            {
                "interval_start": "2026-11-01T00:00:00-04:00",
                "interval_end": "2026-11-01T04:00:00-05:00",
            },
            id="ny_fall_back_five_hours",
        ),
    ],
)
def test_each_example_reports_the_period_its_notebook_describes(
    stem: str, slot: str, expected: dict[str, str]
) -> None:
    day = date.fromisoformat(slot[:10])
    rows = _preview(stem, str(day - timedelta(days=1)), str(day + timedelta(days=2)))
    parameters = rows[slot]["parameters"]
    assert {name: parameters[name] for name in expected} == expected


def test_the_lake_covers_every_day_the_examples_report_over_a_year(
    generated_lakes: tuple[Path, Path],
) -> None:
    """Every slot from 2026-01-01 to 2027-01-08: the daily report's day, each week the
    dashboard shows (and the baseline week before them), the data-quality interval."""
    orders = generated_lakes[0] / "orders.parquet"
    with duckdb.connect() as con:
        days = {
            row[0]
            for row in con.execute(
                "SELECT DISTINCT CAST(order_ts AS DATE) FROM read_parquet(?)", [str(orders)]
            ).fetchall()
        }
    needed: set[date] = set()
    for row in _preview("daily_sales", "2026-01-01", "2027-01-08").values():
        needed.add(date.fromisoformat(row["parameters"]["report_date"]))
    for row in _preview("kpi_dashboard", "2026-01-01", "2027-01-08").values():
        week_end = date.fromisoformat(row["parameters"]["week_end"])
        weeks = row["parameters"]["weeks"]
        needed.update(week_end - timedelta(days=n) for n in range(7 * (weeks + 1)))
    for row in _preview("data_quality", "2026-01-01", "2027-01-08").values():
        start = datetime.fromisoformat(row["parameters"]["interval_start"])
        needed.add(start.astimezone(UTC).date())
    assert len(needed) > 365
    assert sorted(needed - days) == []


# -- the data-quality report's findings are about its own interval ----------------------


def _run_data_quality(
    lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, start: str, end: str
) -> dict[str, Any]:
    import papermill

    monkeypatch.setenv("NBCAST_LAKE", str(lake))
    monkeypatch.delenv("NBCAST_RUN_CONTEXT", raising=False)
    output = tmp_path / f"data_quality-{len(list(tmp_path.iterdir()))}.ipynb"
    papermill.execute_notebook(
        str(EXAMPLES / "data_quality.ipynb"),
        str(output),
        parameters={"interval_start": start, "interval_end": end},
        cwd=str(tmp_path),
        kernel_name="python3",
        progress_bar=False,
    )
    findings = read_tables(json.loads(output.read_text()))["findings"]
    return {
        "checks": sorted(set(findings["check"])),
        "placed_at": list(findings["placed_at"]),
    }


@pytest.mark.parametrize(
    ("start", "end", "checks"),
    [
        pytest.param(
            "2026-10-31T08:00:00-04:00",
            "2026-10-31T12:00:00-04:00",
            ["null_customer_id", "revenue_mismatch"],
            id="faulty_batch_at_15_utc",
        ),
        pytest.param(
            "2026-10-31T12:00:00-04:00", "2026-10-31T16:00:00-04:00", [], id="the_next_is_clean"
        ),
        pytest.param(
            "2026-11-01T00:00:00-04:00",
            "2026-11-01T04:00:00-05:00",
            ["negative_quantity"],
            id="ny_fall_back_five_hours",
        ),
    ],
)
def test_the_data_quality_report_finds_what_its_interval_holds(
    generated_lakes: tuple[Path, Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    start: str,
    end: str,
    checks: list[str],
) -> None:
    found = _run_data_quality(generated_lakes[0], tmp_path, monkeypatch, start, end)
    assert found["checks"] == checks
    low, high = datetime.fromisoformat(start), datetime.fromisoformat(end)
    assert all(low <= placed < high for placed in found["placed_at"])


# -- the bounded warehouse -------------------------------------------------------------


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_each_example_queries_through_the_bounded_warehouse(path: Path) -> None:
    """``nbcast.warehouse.query`` (caps, usage recorded), never a DuckDB of its own."""
    queries = 0
    for source in _code_cells(path):
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, ast.Import | ast.ImportFrom):
                modules = [alias.name for alias in node.names]
                if isinstance(node, ast.ImportFrom):
                    modules.append(node.module or "")
                assert not any(m.split(".")[0] in {"duckdb", "sqlalchemy"} for m in modules)
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "query"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "warehouse"
            ):
                queries += 1
    assert queries, "the report never calls warehouse.query"
