"""Runs that know their period: the context and resolved bindings stored on each run
row by the materializer, backfill and manual runs; bad bindings refused at publish."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.cli import main
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.versions import publish
from nbcast.scheduler import control
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run
from tests.notebooks import make_notebook

PREVIOUS_BUSINESS_DAY = {"$period": "slot", "steps": [{"business_days": -1, "calendar": "DE"}]}
DAILY = {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin", "overlap": "allow"}


def _publish(db: Database, tmp_path: Path, at: datetime, **block: Any) -> None:
    path = make_notebook(
        tmp_path / "daily.ipynb",
        parameters='report_date = "2026-06-15"  # day\nregion = "EMEA"\ntop_n = 5\n',
        nbcast={"name": "daily", **block},
    )
    publish(db, path, caller=Caller(tenant="default", user="t"), now=at)


def _runs(db: Database) -> list[Run]:
    with db.session() as session:
        return list(session.scalars(sa.select(Run).order_by(Run.fire_at, Run.id)))


def test_scheduled_runs_carry_their_period_and_resolved_parameters(
    db: Database, tmp_path: Path
) -> None:
    start = datetime(2026, 10, 29, 12, tzinfo=UTC)
    _publish(db, tmp_path, start, schedule=DAILY, parameters={"report_date": PREVIOUS_BUSINESS_DAY})
    clock = FixedClock(start)
    materializer = Materializer(db, clock)
    for _ in range(4):  # one tick a day, on time: Fri 30 Oct and Mon 2 Nov fire
        clock.advance(timedelta(days=1))
        materializer.tick()
    runs = [r for r in _runs(db) if r.state == "QUEUED"]
    assert [(r.slot_key, r.parameters["report_date"]) for r in runs] == [
        ("2026-10-30T07:00", "2026-10-29"),
        ("2026-11-02T07:00", "2026-10-30"),
    ]
    monday = runs[1]
    assert monday.parameters == {"report_date": "2026-10-30"}
    assert monday.context == {
        "kind": "scheduled",
        "slot_key": "2026-11-02T07:00",
        "timezone": "Europe/Berlin",
        "nominal": "2026-11-02T07:00:00+01:00",
        "fire_at": "2026-11-02T06:00:00Z",
        "interval_start": "2026-10-30T07:00:00+01:00",
        "interval_end": "2026-11-02T07:00:00+01:00",
    }


def test_a_backfill_of_a_week_reports_five_different_days(db: Database, tmp_path: Path) -> None:
    published = datetime(2026, 10, 12, 12, tzinfo=UTC)
    _publish(
        db, tmp_path, published, schedule=DAILY, parameters={"report_date": PREVIOUS_BUSINESS_DAY}
    )
    clock = FixedClock(published + timedelta(hours=1))
    Materializer(db, clock).tick()
    result = control.backfill(
        db,
        clock,
        Caller(tenant="default", user="t"),
        "daily",
        datetime(2026, 10, 5, tzinfo=UTC),
        datetime(2026, 10, 10, tzinfo=UTC),
    )
    assert result.inserted == 5
    backfilled = [r for r in _runs(db) if r.kind == "backfill"]
    assert [r.parameters["report_date"] for r in backfilled] == [
        "2026-10-02",  # Monday 5 Oct reports Friday 2 Oct
        "2026-10-05",
        "2026-10-06",
        "2026-10-07",
        "2026-10-08",
    ]
    assert {r.context["kind"] for r in backfilled} == {"backfill"}


def test_a_manual_run_takes_the_period_of_the_instant_it_is_for(
    db: Database, tmp_path: Path
) -> None:
    clock = FixedClock(datetime(2026, 11, 3, 9, tzinfo=UTC))
    _publish(
        db, tmp_path, clock.now(), schedule=DAILY, parameters={"report_date": PREVIOUS_BUSINESS_DAY}
    )
    at = datetime(2026, 11, 2, 9, 30, tzinfo=UTC)  # Monday 10:30 in Berlin
    run_id = control.run_now(db, clock, Caller(tenant="default", user="t"), "daily", {}, at=at)
    run = next(r for r in _runs(db) if r.id == run_id)
    assert run.parameters["report_date"] == "2026-10-30"  # the business day before Monday
    assert run.context["kind"] == "manual"
    assert run.context["slot_key"] is None
    assert run.context["nominal"] == "2026-11-02T10:30:00+01:00"
    # The interval of the slot whose interval holds the instant: Mon 07:00 .. Tue 07:00.
    assert run.context["interval_start"] == "2026-11-02T07:00:00+01:00"
    assert run.context["interval_end"] == "2026-11-03T07:00:00+01:00"
    # A -p binding overrides the block's, resolved the same way.
    other = control.run_now(
        db,
        clock,
        Caller(tenant="default", user="t"),
        "daily",
        {"report_date": {"$period": "slot", "steps": [{"months": -1}], "format": "%Y-%m"}},
        at=at,
    )
    assert next(r for r in _runs(db) if r.id == other).parameters["report_date"] == "2026-10"


BAD_BINDINGS: dict[str, tuple[Any, str]] = {
    "unknown_unit": (
        {"report_date": {"$period": "slot", "steps": [{"fortnights": -1}]}},
        "report_date.steps[0]: unknown unit 'fortnights'",
    ),
    "unknown_calendar": (
        {"report_date": {"$period": "slot", "steps": [{"business_days": -1, "calendar": "XX"}]}},
        "report_date.steps[0].calendar",
    ),
    "unknown_base": ({"report_date": {"$period": "yesterday"}}, "report_date.$period"),
    "bad_directive": ({"report_date": {"$period": "slot", "format": "%Q"}}, "report_date.format"),
    "int_parameter": ({"top_n": {"$period": "slot"}}, "top_n: a binding gives a string"),
    "too_far": (
        {"report_date": {"$period": "slot", "steps": [{"days": 99_999}]}},
        "report_date.steps[0].days",
    ),
    "code_is_not_a_format": (
        {"report_date": {"$period": "slot", "format": "{__import__('os')}"}},
        "report_date.format",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_BINDINGS))
def test_bad_bindings_are_refused_at_publish_naming_the_field(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    parameters, message = BAD_BINDINGS[case]
    path = make_notebook(
        tmp_path / "bad.ipynb",
        parameters='report_date = "2026-06-15"\ntop_n = 5\n',
        nbcast={"schedule": DAILY, "parameters": parameters},
    )
    assert main(["db", "upgrade"]) == 0
    capsys.readouterr()
    assert main(["publish", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: parameters.")
    assert message in err
    db = Database.open(use_db)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(ReportDefinition)) == 0
    db.dispose()


def test_preview_shows_each_slots_parameters(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(
        tmp_path / "daily.ipynb",
        parameters='report_date = "2026-06-15"\n',
        nbcast={
            "name": "daily",
            "schedule": DAILY,
            "parameters": {"report_date": PREVIOUS_BUSINESS_DAY},
        },
    )
    assert main(["publish", str(path)]) == 0
    capsys.readouterr()
    code = main(
        [
            "schedule",
            "preview",
            "--definition",
            "daily",
            "--from",
            "2026-10-30T00:00Z",
            "--to",
            "2026-11-03T00:00Z",
            "--json",
        ]
    )
    assert code == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["slot_key"], r["parameters"]["report_date"]) for r in rows] == [
        ("2026-10-30T07:00", "2026-10-29"),
        ("2026-11-02T07:00", "2026-10-30"),
    ]
    assert rows[1]["interval_start"] == "2026-10-30T07:00:00+01:00"
    # The --cron form keeps exactly its keys.
    assert (
        main(
            [
                "schedule",
                "preview",
                "--cron",
                "0 7 * * *",
                "--from",
                "2026-10-30T00:00Z",
                "--to",
                "2026-10-31T00:00Z",
                "--json",
            ]
        )
        == 0
    )
    (row,) = json.loads(capsys.readouterr().out)
    assert sorted(row) == ["fire_at", "local", "reason", "slot_key", "status"]
