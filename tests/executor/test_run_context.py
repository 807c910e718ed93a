"""``nbcast.context()`` inside a real kernel: the run's frozen period reaches the
notebook, its parameters bound from the same slot, and the executed notebook records
it (``metadata.nbcast_run``)."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.scheduler.control import run_now
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run
from tests.notebooks import make_notebook
from tests.workers import work_until_idle

# The notebook prints what it sees, one JSON line: the context and its bound date.
BODY = (
    "import json, nbcast\n"
    "ctx = nbcast.context()\n"
    "print(json.dumps({**ctx.to_json(), 'report_date': str(report_date)}))\n"
)


def _define(db: Database, tmp_path: Path) -> None:
    spec = {
        "name": "berlin-daily",
        "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
        "parameters": {
            "report_date": {"$period": "slot", "steps": [{"business_days": -1, "calendar": "DE"}]}
        },
    }
    path = make_notebook(
        tmp_path / "berlin.ipynb", parameters="report_date = None\n", body=BODY, nbcast=spec
    )
    publish(
        db,
        path,
        caller=Caller(tenant="default", user="t"),
        now=datetime(2026, 10, 26, 5, tzinfo=UTC),
    )


def _execute(db: Database, tmp_path: Path) -> None:
    work_until_idle(
        db,
        artifacts=tmp_path / "artifacts",
        work_dir=tmp_path / "runs",
        name="ctx-worker",
        backoff_base=0.0,
    )


def _seen(tmp_path: Path, run: Run) -> tuple[dict[str, Any], dict[str, Any]]:
    """What the notebook printed, and what its executed copy's metadata records."""
    assert run.artifact_sha256 is not None
    executed = json.loads(LocalArtifactStore(tmp_path / "artifacts").get(run.artifact_sha256))
    printed = [
        "".join(o.get("text", ""))
        for c in executed["cells"]
        for o in c.get("outputs", [])
        if o.get("name") == "stdout"
    ]
    [line] = [text for text in printed if text.startswith("{")]
    return json.loads(line), executed["metadata"]["nbcast_run"]


def test_a_scheduled_run_sees_its_slot_and_period(db: Database, tmp_path: Path) -> None:
    _define(db, tmp_path)
    # Monday 26 October 2026, 07:00 in Berlin (CET since the 25th: 06:00Z).
    Materializer(db, FixedClock(datetime(2026, 10, 26, 6, 1, tzinfo=UTC)), threads=1).tick()
    with db.session() as session:
        [queued] = session.query(Run).filter(Run.kind == "scheduled").all()
        run_id = queued.id
    _execute(db, tmp_path)
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert run.state == "SUCCEEDED"
        session.expunge(run)
    seen, recorded = _seen(tmp_path, run)
    assert seen["kind"] == "scheduled"
    assert seen["slot_key"] == run.slot_key == "2026-10-26T07:00"
    assert seen["timezone"] == "Europe/Berlin"
    assert seen["nominal"] == "2026-10-26T07:00:00+01:00"
    assert seen["fire_at"] == "2026-10-26T06:00:00Z"
    # The previous weekday slot: Friday 23 October, 07:00 CEST (before the fall-back).
    assert seen["interval_start"] == "2026-10-23T07:00:00+02:00"
    assert seen["interval_end"] == "2026-10-26T07:00:00+01:00"
    # The bound parameter comes from the same slot: the business day before Monday.
    assert seen["report_date"] == "2026-10-23"
    assert (seen["definition"], seen["run_id"], seen["attempt"]) == ("berlin-daily", run.id, 1)
    assert seen["missed_before"] == 0  # none missed before it (stored only when some were)
    assert seen["test"] is False  # a test run (nbcast run --test) sees True
    assert recorded == {
        k: v for k, v in seen.items() if k not in ("report_date", "missed_before", "test")
    }
    assert run.context is not None
    assert {k: run.context[k] for k in ("interval_start", "interval_end", "slot_key")} == {
        k: seen[k] for k in ("interval_start", "interval_end", "slot_key")
    }


def test_a_manual_run_sees_the_period_it_was_asked_for(db: Database, tmp_path: Path) -> None:
    _define(db, tmp_path)
    clock = FixedClock(datetime(2026, 11, 3, 9, 30, tzinfo=UTC))
    run_id = run_now(db, clock, Caller(tenant="default", user="t"), "berlin-daily", {})
    _execute(db, tmp_path)
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert run.state == "SUCCEEDED"
        session.expunge(run)
    seen, recorded = _seen(tmp_path, run)
    assert seen["kind"] == "manual"
    # Asked for on Tuesday 3 November 10:30 Berlin: its nominal time is that instant,
    # its interval that of the slot holding it (Tuesday 07:00 to Wednesday 07:00), and
    # the business day before it is Monday.
    assert seen["nominal"] == "2026-11-03T10:30:00+01:00"
    assert seen["report_date"] == "2026-11-02"
    assert (seen["interval_start"], seen["interval_end"]) == (
        "2026-11-03T07:00:00+01:00",
        "2026-11-04T07:00:00+01:00",
    )
    assert recorded["run_id"] == run_id


def test_the_kernels_context_says_how_many_slots_before_it_were_missed() -> None:
    from nbcast.run_context import RunContext

    stored = {
        "kind": "scheduled",
        "slot_key": "2026-11-01T02:00",
        "timezone": "America/New_York",
        "nominal": "2026-11-01T02:00:00-05:00",
        "fire_at": "2026-11-01T07:00:00Z",
        "interval_start": "2026-11-01T01:30:00-05:00",
        "interval_end": "2026-11-01T02:00:00-05:00",
    }
    assert RunContext.from_json(stored).missed_before == 0
    assert RunContext.from_json({**stored, "missed_before": 5}).missed_before == 5
    for odd in (-1, True, "5", 2.5, None):
        assert RunContext.from_json({**stored, "missed_before": odd}).missed_before == 0
