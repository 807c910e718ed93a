"""``nbcast run NAME -p name=<binding> [--at INSTANT]`` end to end: what the run row
stores (literal parameters, the frozen context) and what ``runs show`` and ``runs list
--json`` say of it, and bad bindings that exit 2 with one ``error:`` line naming the
field and write nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.db import Base, Database, import_models
from nbcast.scheduler.models import Run
from tests.command import run
from tests.notebooks import make_notebook

NOW = "2026-11-02T09:00:00Z"


def binding(**fields: Any) -> str:
    return json.dumps({"$period": "slot", **fields})


@pytest.fixture
def published(
    use_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    """Two definitions: a Berlin weekday report and a New York one that keeps both
    passes of a fold."""
    monkeypatch.setenv("NBCAST_CLOCK", f"fixed:{NOW}")
    schedules = {
        "daily": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
        "ny": {"cron": "30 1 * * *", "timezone": "America/New_York", "dst": {"fold": "both"}},
    }
    for name, schedule in schedules.items():
        path = make_notebook(
            tmp_path / f"{name}.ipynb",
            parameters='report_date = None\nlabel = "x"\ntop_n = 5\n',
            body="pass",
            nbcast={"name": name, "schedule": schedule},
        )
        assert run(capsys, "publish", str(path))[0] == 0
    return use_db


def _row(url: str, run_id: int) -> Run:
    db = Database.open(url)
    try:
        with db.session() as session:
            row = session.get(Run, run_id)
            assert row is not None
            session.expunge(row)
            return row
    finally:
        db.dispose()


def _counts(url: str) -> dict[str, int]:
    """Rows in every table."""
    import_models()
    db = Database.open(url)
    try:
        with db.engine.connect() as conn:
            return {
                t.name: conn.execute(sa.select(sa.func.count()).select_from(t)).scalar_one()
                for t in Base.metadata.sorted_tables
            }
    finally:
        db.dispose()


def test_run_with_a_bound_parameter_at_an_instant(
    published: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(
        capsys,
        "run",
        "daily",
        "-p",
        "report_date=" + binding(steps=[{"business_days": -1}]),
        "-p",
        "label=" + binding(steps=[{"months": -1}], format="%Y-%m"),
        "--at",
        "2026-11-02T10:30:00+01:00",
        "--json",
    )
    assert (code, err) == (0, "")
    queued = json.loads(out)
    assert (queued["definition"], queued["kind"], queued["state"]) == ("daily", "manual", "QUEUED")
    row = _row(published, queued["id"])
    # Monday 2 November 10:30 Berlin: the business day before is Friday 30 October, the
    # month before is October; the interval is that of the slot holding the instant.
    assert row.parameters == {"report_date": "2026-10-30", "label": "2026-10"}
    assert row.context == {
        "kind": "manual",
        "slot_key": None,
        "timezone": "Europe/Berlin",
        "nominal": "2026-11-02T10:30:00+01:00",
        "fire_at": NOW,
        "interval_start": "2026-11-02T07:00:00+01:00",
        "interval_end": "2026-11-03T07:00:00+01:00",
    }
    # runs show and runs list --json: the stored context, every key, and its tenant.
    code, out, _ = run(capsys, "runs", "show", str(queued["id"]), "--json")
    shown = json.loads(out)
    assert shown["parameters"] == row.parameters
    assert shown["context"] == {**row.context, "tenant": "default"}
    code, out, _ = run(capsys, "runs", "list", "--json")
    [listed] = json.loads(out)
    assert listed["parameters"] == row.parameters
    assert listed["context"] == {**row.context, "tenant": "default"}
    code, out, _ = run(capsys, "runs", "show", str(queued["id"]))
    assert "  nominal     2026-11-02T10:30:00+01:00 (CET, Europe/Berlin)" in out.splitlines()


def test_run_at_an_instant_in_a_fold(published: str, capsys: pytest.CaptureFixture[str]) -> None:
    # 06:45Z on 1 November is 01:45 EST, the second pass: an hour earlier is 01:45 EDT.
    code, out, _ = run(
        capsys,
        "run",
        "ny",
        "-p",
        "report_date=" + binding(steps=[{"hours": -1}], format="datetime"),
        "-p",
        "label=" + json.dumps({"$period": "interval_start", "format": "%H:%M %Z"}),
        "--at",
        "2026-11-01T06:45:00Z",
        "--json",
    )
    assert code == 0
    row = _row(published, json.loads(out)["id"])
    assert row.parameters == {
        "report_date": "2026-11-01T01:45:00-04:00",
        "label": "01:30 EST",
    }
    assert row.context is not None
    assert row.context["nominal"] == "2026-11-01T01:45:00-05:00"
    # The slot holding it is 2 November's; its interval starts at the second pass.
    assert (row.context["interval_start"], row.context["interval_end"]) == (
        "2026-11-01T01:30:00-05:00",
        "2026-11-02T01:30:00-05:00",
    )
    code, out, _ = run(capsys, "runs", "show", str(row.id))
    lines = out.splitlines()
    assert "  nominal     2026-11-01T01:45:00-05:00 (EST, America/New_York)" in lines
    assert (
        "  period      [2026-11-01T01:30:00-05:00, 2026-11-02T01:30:00-05:00) America/New_York"
        in lines
    )


def test_run_without_parameters_at_an_instant(
    published: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, _ = run(capsys, "run", "daily", "--at", "2026-10-31T12:00:00Z", "--json")
    assert code == 0
    row = _row(published, json.loads(out)["id"])
    assert row.parameters == {}  # the notebook's own defaults apply
    assert row.context is not None
    # Saturday: the slot holding it is Monday's, its interval from Friday's slot.
    assert (row.context["nominal"], row.context["interval_start"]) == (
        "2026-10-31T13:00:00+01:00",
        "2026-10-30T07:00:00+01:00",
    )


BAD = {
    "unknown-unit": (
        "report_date=" + binding(steps=[{"fortnights": 1}]),
        "report_date.steps[0]: unknown unit 'fortnights'",
    ),
    "unknown-calendar": (
        "report_date=" + binding(steps=[{"business_days": -1, "calendar": "XX"}]),
        "report_date.steps[0].calendar: 'XX'",
    ),
    "calendar-on-days": (
        "report_date=" + binding(steps=[{"days": -1, "calendar": "DE"}]),
        "report_date.steps[0].calendar: only business_days",
    ),
    "unknown-snap": (
        "report_date=" + binding(steps=[{"to": "start_of_year"}]),
        "report_date.steps[0].to: 'start_of_year'",
    ),
    "unknown-base": (
        "report_date=" + json.dumps({"$period": "yesterday"}),
        "report_date.$period: 'yesterday'",
    ),
    "bad-directive": ("report_date=" + binding(format="%Q"), "report_date.format: '%Q'"),
    "code-as-format": ("report_date=" + binding(format="__import__('os')"), "report_date.format"),
    "shift-out-of-bounds": (
        "report_date=" + binding(steps=[{"days": 10_001}]),
        "report_date.steps[0].days: must be between",
    ),
    "too-many-steps": ("report_date=" + binding(steps=[{"days": 1}] * 17), "report_date.steps"),
    "unknown-key": ("label=" + binding(code="1"), "label: unknown key 'code'"),
    "bound-int-parameter": ("top_n=" + binding(), "top_n: a binding gives a string"),
    "undeclared-name": ("nope=" + binding(), "'nope' is not declared"),
    "past-year-9999": (
        "report_date=" + binding(steps=[{"months": 10_000}] * 16),
        "report_date: its steps move outside the years 1 to 9999",
    ),
}


@pytest.mark.parametrize("case", list(BAD.values()), ids=list(BAD))
def test_a_bad_binding_exits_2_with_one_line_and_writes_nothing(
    published: str, capsys: pytest.CaptureFixture[str], case: tuple[str, str]
) -> None:
    assignment, message = case
    before = _counts(published)
    code, out, err = run(capsys, "run", "daily", "-p", assignment, "--at", "2026-11-02T09:00:00Z")
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    assert message in err
    assert _counts(published) == before
