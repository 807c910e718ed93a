"""The cost report on both back ends, over a history made by the real planes
(:mod:`tests.oversight.history`): its figures are those of the raw rows per
definition and UTC day (NULL CPU and memory counted as 0), it reads the same after
retention deleted the runs, and ``nbcast cost report`` prints it, as JSON too, with a
deterministic stacked daily chart; bad input and strangers get one error line and
nothing is written."""

from __future__ import annotations

import struct
from collections import defaultdict
from dataclasses import asdict
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import format_instant
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.models import Delivery, Rendition
from nbcast.errors import AccessDeniedError
from nbcast.executor.models import RunAttempt, WarehouseUsage
from nbcast.oversight.cost import CostReport, cost_report, plot_report
from nbcast.oversight.retention import run_retention, set_retention
from nbcast.scheduler.models import Run
from nbcast.tenancy.models import Operator
from tests.command import act_as
from tests.members import grant
from tests.oversight.history import START, History, make_history, store_files, table_counts

FIRST, LAST = START.date(), START.date() + timedelta(days=30)
VIEWER = Caller(tenant="default", user="val")


def _report(db: Database, caller: Caller = VIEWER) -> CostReport:
    with db.session() as session:
        return cost_report(session, caller, FIRST, LAST)


def _by_key(report: CostReport) -> dict[tuple[str, str], dict[str, Any]]:
    return {(r.definition, r.day.isoformat()): asdict(r.figures) for r in report.rows}


def _raw(db: Database) -> dict[tuple[str, str], dict[str, Any]]:
    """The figures added up in Python from the raw rows, as the report defines them."""
    with db.session() as session:
        runs = session.execute(
            sa.select(Run.id, ReportDefinition.name, Run.fire_at, Run.state).join(
                ReportDefinition, ReportDefinition.id == Run.definition_id
            )
        ).all()
        attempts = session.execute(
            sa.select(
                RunAttempt.run_id, RunAttempt.cpu_s, RunAttempt.duration_s, RunAttempt.peak_mem_mb
            )
        ).all()
        usage = session.execute(
            sa.select(
                WarehouseUsage.run_id,
                WarehouseUsage.rows,
                WarehouseUsage.bytes,
                WarehouseUsage.seconds,
            )
        ).all()
        renders = session.execute(sa.select(Rendition.run_id, Rendition.seconds)).all()
        sent = session.execute(sa.select(Delivery.run_id).where(Delivery.state == "SENT")).all()
    key_of: dict[int, tuple[str, str]] = {}
    out: dict[tuple[str, str], dict[str, Any]] = defaultdict(
        lambda: (
            dict.fromkeys(
                ["runs", "attempts", "warehouse_rows", "warehouse_bytes", "deliveries"], 0
            )
            | dict.fromkeys(["cpu_s", "wall_s", "peak_mem_mb", "warehouse_s", "render_s"], 0.0)
        )
    )
    for run_id, name, fire_at, state in runs:
        key_of[run_id] = (name, fire_at.astimezone(UTC).date().isoformat())
        out[key_of[run_id]]["runs"] += state not in ("SKIPPED", "MISSED")
    for run_id, cpu, duration, peak in attempts:
        row = out[key_of[run_id]]
        row["attempts"] += 1
        row["cpu_s"] += cpu or 0.0
        row["wall_s"] += duration or 0.0
        row["peak_mem_mb"] = max(row["peak_mem_mb"], peak or 0.0)
    for run_id, rows, size, seconds in usage:
        row = out[key_of[run_id]]
        row["warehouse_rows"] += rows
        row["warehouse_bytes"] += size
        row["warehouse_s"] += seconds
    for run_id, render_s in renders:
        out[key_of[run_id]]["render_s"] += render_s or 0.0
    for (run_id,) in sent:
        out[key_of[run_id]]["deliveries"] += 1
    return dict(out)


@pytest.fixture
def history(db: Database, nbcast_home: Path) -> History:
    made = make_history(db, nbcast_home, days=6, html=False)
    grant(db, "default", "val", "viewer")
    return made


def test_the_report_adds_up_the_raw_rows_per_definition_and_day(
    history: History, db: Database
) -> None:
    with db.engine.connect() as conn:
        nulls = conn.execute(sa.text("SELECT count(*) FROM run_attempts WHERE cpu_s IS NULL"))
        assert nulls.scalar_one() > 0, "some attempts have no CPU figure: they count as 0"
    report = _report(db)
    expected = _raw(db)
    assert _by_key(report).keys() == expected.keys()
    for key, figures in expected.items():
        assert _by_key(report)[key] == pytest.approx(figures), key
    assert [(r.definition, r.day) for r in report.rows] == sorted(
        (r.definition, r.day) for r in report.rows
    )
    total = report.total()
    assert total.runs == sum(f["runs"] for f in expected.values())
    assert total.deliveries > 0
    assert total.warehouse_rows > 0
    assert total.peak_mem_mb == max(f["peak_mem_mb"] for f in expected.values())
    assert report.totals().keys() == {"sales", "ops"}


def test_the_report_reads_the_same_after_retention(history: History, db: Database) -> None:
    before = _report(db)
    history.clock.advance(timedelta(days=200))  # every link dead, every run old
    set_retention(
        db, history.clock, Caller(tenant="default", user="t"), artifacts_days=1, rows_days=1
    )
    result = run_retention(db, history.clock, history.plane.store, "default")
    with db.engine.connect() as conn:
        assert conn.execute(sa.text("SELECT count(*) FROM runs")).scalar_one() == 0
    assert result.runs > 0
    after = _report(db)
    assert _by_key(after).keys() == _by_key(before).keys()
    for key, figures in _by_key(before).items():
        assert _by_key(after)[key] == pytest.approx(figures), key
    assert asdict(after.total()) == pytest.approx(asdict(before.total()))


def test_only_members_read_a_tenant_report(history: History, db: Database) -> None:
    with pytest.raises(AccessDeniedError):
        _report(db, Caller(tenant="default", user="stranger"))
    grant(db, "globex", "val", "viewer")
    with db.session() as session:
        empty = cost_report(session, Caller(tenant="globex", user="val"), FIRST, LAST)
    assert empty.rows == []
    assert empty.total().runs == 0


def _chunks(png: bytes) -> list[bytes]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    found, at = [], 8
    while at < len(png):
        (length,) = struct.unpack(">I", png[at : at + 4])
        found.append(png[at + 4 : at + 8])
        at += 12 + length
    return found


@pytest.mark.slow
def test_the_plot_is_deterministic(history: History, db: Database, tmp_path: Path) -> None:
    report = _report(db)
    first = plot_report(report, tmp_path / "a.png").read_bytes()
    second = plot_report(_report(db), tmp_path / "b.png").read_bytes()
    assert first == second
    chunks = _chunks(first)
    assert b"tIME" not in chunks
    assert b"Matplotlib" not in first
    assert chunks[-1] == b"IEND"
    empty = CostReport(tenant="default", start=FIRST, end=FIRST, rows=[])
    assert _chunks(plot_report(empty, tmp_path / "empty.png").read_bytes())[-1] == b"IEND"


# -- the command line -------------------------------------------------------------------


def test_cli_cost_report_json_table_and_plot(
    history: History,
    db: Database,
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    monkeypatch.setenv("NBCAST_CLOCK", f"fixed:{format_instant(history.clock.now())}")
    period = ["--from", FIRST.isoformat(), "--to", LAST.isoformat()]
    code, out, err = act_as(capsys, monkeypatch, "val", "cost", "report", *period, "--json")
    assert (code, err) == (0, "")
    printed = json.loads(out)
    assert printed["rows"] == _report(db).to_json()["rows"]
    assert "count as 0" in printed["note"]
    plot = tmp_path / "cost.png"
    code, out, err = act_as(
        capsys, monkeypatch, "val", "cost", "report", *period, "--plot", str(plot)
    )
    assert (code, err) == (0, "")
    assert "sales" in out
    assert "ops" in out
    assert "count as 0" in out
    assert plot.read_bytes() == plot_report(_report(db), tmp_path / "again.png").read_bytes()
    # --tenant picks the tenant: a viewer of globex sees globex's runs only.
    grant(db, "globex", "gil", "viewer")
    grant(db, "globex", "t", "admin")
    history.plane.publish("kpi", [], tenant="globex")
    history.plane.succeed("kpi", tenant="globex")
    monkeypatch.setenv("NBCAST_CLOCK", f"fixed:{format_instant(history.clock.now())}")
    end = ["--from", FIRST.isoformat(), "--to", (history.clock.now().date()).isoformat()]
    code, out, err = act_as(
        capsys, monkeypatch, "gil", "--tenant", "globex", "cost", "report", *end, "--json"
    )
    assert (code, err) == (0, "")
    rows = json.loads(out)["rows"]
    assert [(r["definition"], r["runs"], r["attempts"]) for r in rows] == [("kpi", 1, 1)]


@pytest.mark.parametrize(
    ("user", "argv"),
    [
        pytest.param("val", ["--from", "2026-10-01"], id="no_to"),
        pytest.param("val", ["--from", "2026-13-01", "--to", "2026-12-01"], id="no_such_month"),
        pytest.param("val", ["--from", "yesterday", "--to", "2026-12-01"], id="not_a_date"),
        pytest.param("val", ["--from", "2026-12-02", "--to", "2026-12-01"], id="backwards"),
        pytest.param("val", ["--from", "2000-01-01", "--to", "2026-12-01"], id="too_long"),
        pytest.param(
            "val",
            ["--from", "2024-01-01", "--to", "2026-12-01", "--plot", "PLOT.png"],
            id="plot_too_long",
        ),
        pytest.param(
            "val",
            ["--from", "2026-10-01", "--to", "2026-10-09", "--plot", "PLOT.txt"],
            id="not_png",
        ),
        pytest.param(
            "val",
            ["--from", "2026-10-01", "--to", "2026-10-09", "--plot", "no/such/dir/c.png"],
            id="no_folder",
        ),
        pytest.param(
            "stranger",
            ["--from", "2026-10-01", "--to", "2026-10-09", "--plot", "PLOT.png"],
            id="stranger",
        ),
    ],
)
def test_cli_cost_report_refuses_bad_input_writing_nothing(
    db: Database,
    use_db: str,
    nbcast_home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    user: str,
    argv: list[str],
) -> None:
    monkeypatch.chdir(tmp_path)
    grant(db, "default", "t", "admin")
    grant(db, "default", "val", "viewer")
    with db.session() as session:  # an operator: nobody is made one by acting
        session.add(Operator(name="t", granted_at=START, granted_by="test"))
    tables, files = table_counts(db), store_files(nbcast_home)
    code, out, err = act_as(capsys, monkeypatch, user, "cost", "report", *argv)
    assert code == 2
    assert out == ""
    lines = err.strip().splitlines()
    assert len(lines) == 1
    assert lines[0].startswith("error: ")
    assert table_counts(db) == tables
    assert store_files(nbcast_home) == files
    assert not list(tmp_path.glob("PLOT*"))
