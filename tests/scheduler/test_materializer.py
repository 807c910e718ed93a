"""The materializer on SQLite and PostgreSQL: exactly one row per slot, watermarks,
policies, pause/resume, backfill, manual runs and schedule changes."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import ParameterValueError, ScheduleError
from nbcast.scheduler import control
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import CancelRequest, Run, ScheduleState
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 7, 0, 0, tzinfo=UTC)


def define(
    db: Database,
    tmp_path: Path,
    name: str,
    schedule: dict[str, Any],
    at: datetime = T0,
    **extra: Any,
) -> None:
    path = make_notebook(
        tmp_path / f"{name}.ipynb", nbcast={"name": name, "schedule": schedule, **extra}
    )
    publish(db, path, caller=Caller(tenant="default", user="t"), now=at)


def rows(db: Database, name: str | None = None) -> list[tuple[str | None, str, str | None]]:
    with db.session() as session:
        query = sa.select(Run.slot_key, Run.state, Run.reason).order_by(Run.fire_at, Run.slot_key)
        if name is not None:
            from nbcast.definitions.models import ReportDefinition

            query = query.join(ReportDefinition, ReportDefinition.id == Run.definition_id).where(
                ReportDefinition.name == name
            )
        return [tuple(r) for r in session.execute(query).all()]  # type: ignore[misc]


def test_on_time_ticks_queue_each_slot_once(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "hourly", {"cron": "0 * * * *", "overlap": "allow"})
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    for _ in range(6):
        clock.advance(timedelta(hours=1, minutes=1))
        materializer.tick()
    materializer.tick()  # nothing new
    got = rows(db)
    assert [key for key, _, _ in got] == [f"2026-03-07T0{h}:00" for h in range(1, 7)]
    assert {state for _, state, _ in got} == {"QUEUED"}
    with db.session() as session:
        state = session.scalar(sa.select(ScheduleState))
        assert state is not None
        assert state.watermark == datetime(2026, 3, 7, 6, 0, tzinfo=UTC)
        assert state.next_fire_at == datetime(2026, 3, 7, 7, 0, tzinfo=UTC)


def test_no_slot_before_the_first_publish(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "daily", {"cron": "0 7 * * *"}, at=T0 + timedelta(hours=8))
    Materializer(db, FixedClock(T0 + timedelta(days=2))).tick()
    assert [k for k, _, _ in rows(db)] == ["2026-03-08T07:00"]


def test_overlap_skip_records_why(db: Database, tmp_path: Path) -> None:
    # Nothing executes the runs yet, so the first stays QUEUED and later slots overlap.
    define(db, tmp_path, "hourly", {"cron": "0 * * * *"})
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        materializer.tick()
    assert [(s, r) for _, s, r in rows(db)] == [
        ("QUEUED", None),
        ("SKIPPED", "overlap"),
        ("SKIPPED", "overlap"),
    ]


def test_replace_requests_a_cancel(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "hourly", {"cron": "0 * * * *", "overlap": "replace"})
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    for _ in range(2):
        clock.advance(timedelta(hours=1))
        materializer.tick()
    assert [s for _, s, _ in rows(db)] == ["QUEUED", "QUEUED"]
    with db.session() as session:
        requests = session.execute(sa.select(CancelRequest.run_id, CancelRequest.reason)).all()
        first = session.scalar(sa.select(sa.func.min(Run.id)))
    assert [tuple(r) for r in requests] == [(first, "replaced")]


@pytest.mark.parametrize(
    ("policy", "expected"),
    [
        pytest.param("run_latest", Counter({("MISSED", "superseded"): 5}), id="run_latest"),
        pytest.param(
            "run_all",
            Counter({("QUEUED", None): 3, ("MISSED", "catchup_cap"): 2}),
            id="run_all_cap_3",
        ),
        pytest.param("skip", Counter({("MISSED", "misfire"): 5}), id="skip"),
    ],
)
def test_outage_across_the_new_york_fold(
    db: Database, tmp_path: Path, policy: str, expected: Counter[tuple[str, str | None]]
) -> None:
    # Half-hourly in New York; the scheduler is down from 00:10 EDT to 02:05 EST on the
    # fall-back night. Slots 00:30, 01:00, 01:30, 01:00~2, 01:30~2 fall in the outage
    # (fold=both) and are missed; 02:00 EST is still within grace when it returns, so
    # it is the newest due slot and runs under every policy.
    schedule = {
        "cron": "0,30 * * * *",
        "timezone": "America/New_York",
        "dst": {"fold": "both"},
        "overlap": "buffer_all",
        "misfire": {"policy": policy, "grace": "10m", "max_catchup": 3},
    }
    start = datetime(2026, 11, 1, 4, 10, tzinfo=UTC)  # 00:10 EDT
    define(db, tmp_path, "ny", schedule, at=start)
    clock = FixedClock(datetime(2026, 11, 1, 7, 5, tzinfo=UTC))  # 02:05 EST
    Materializer(db, clock).tick()
    got = rows(db)
    assert [k for k, _, _ in got] == [
        "2026-11-01T00:30",
        "2026-11-01T01:00",
        "2026-11-01T01:30",
        "2026-11-01T01:00~2",
        "2026-11-01T01:30~2",
        "2026-11-01T02:00",
    ]
    assert got[-1][1:] == ("QUEUED", None)  # on time
    assert Counter((s, r) for _, s, r in got[:-1]) == expected
    # The run says how many slots right before it were missed (and keeps its own
    # interval: the missed slots keep theirs, for a backfill to reproduce).
    with db.session() as session:
        contexts = dict(session.execute(sa.select(Run.slot_key, Run.context)).tuples().all())
    missed_last = {"run_latest": 5, "run_all": 2, "skip": 5}[policy]  # run_all: the first 3 run
    assert contexts["2026-11-01T02:00"].get("missed_before", 0) == missed_last
    assert contexts["2026-11-01T02:00"]["interval_start"] == "2026-11-01T01:30:00-05:00"
    assert all("missed_before" not in c for k, c in contexts.items() if k != "2026-11-01T02:00")


def test_a_new_schedule_takes_effect_after_the_watermark(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "report", {"cron": "0 * * * *", "overlap": "allow"})
    clock = FixedClock(T0 + timedelta(hours=2, minutes=5))
    Materializer(db, clock).tick()
    define(db, tmp_path, "report", {"cron": "30 * * * *", "overlap": "allow"}, at=clock.now())
    clock.advance(timedelta(hours=2))
    Materializer(db, clock).tick()
    assert [k for k, _, _ in rows(db)] == [
        "2026-03-07T01:00",
        "2026-03-07T02:00",
        "2026-03-07T02:30",
        "2026-03-07T03:30",
    ]
    with db.session() as session:
        assert session.scalars(sa.select(Run.version).order_by(Run.fire_at)).all() == [1, 1, 2, 2]


def test_pause_and_resume(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "hourly", {"cron": "0 * * * *", "overlap": "allow"})
    clock = FixedClock(T0 + timedelta(hours=1, minutes=1))
    Materializer(db, clock).tick()
    assert control.pause(db, clock, Caller(tenant="default", user="t"), "hourly")
    assert not control.pause(db, clock, Caller(tenant="default", user="t"), "hourly")
    clock.advance(timedelta(hours=3))
    Materializer(db, clock).tick()
    assert len(rows(db)) == 1  # nothing new while paused
    result = control.resume(db, clock, Caller(tenant="default", user="t"), "hourly")
    assert result is not None
    assert result.skipped_paused == 3
    assert control.resume(db, clock, Caller(tenant="default", user="t"), "hourly") is None
    clock.advance(timedelta(hours=1))
    Materializer(db, clock).tick()
    assert [(k[-5:], s, r) for k, s, r in rows(db)] == [
        ("01:00", "QUEUED", None),
        ("02:00", "SKIPPED", "paused"),
        ("03:00", "SKIPPED", "paused"),
        ("04:00", "SKIPPED", "paused"),
        ("05:00", "QUEUED", None),
    ]


def test_backfill(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "daily", {"cron": "0 7 * * *", "overlap": "allow"})
    clock = FixedClock(T0 + timedelta(days=3))
    Materializer(db, clock).tick()
    result = control.backfill(
        db,
        clock,
        Caller(tenant="default", user="t"),
        "daily",
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(2026, 3, 9, tzinfo=UTC),
    )
    assert (result.slots, result.inserted) == (8, 6)  # 03-07 and 03-08 already exist
    with db.session() as session:
        kinds = dict(session.execute(sa.select(Run.slot_key, Run.kind)).tuples().all())
    assert kinds["2026-03-01T07:00"] == "backfill"
    assert kinds["2026-03-08T07:00"] == "scheduled"
    with pytest.raises(ScheduleError, match="after 'daily''s watermark"):
        control.backfill(
            db, clock, Caller(tenant="default", user="t"), "daily", T0, T0 + timedelta(days=30)
        )


def test_manual_runs_validate_parameters_and_write_nothing_when_bad(
    db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path, "daily", {"cron": "0 7 * * *"}, parameters={"region": "APAC"})
    clock = FixedClock(T0)
    run_id = control.run_now(db, clock, Caller(tenant="default", user="t"), "daily", {"top_n": 3})
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert (run.kind, run.slot_key, run.state) == ("manual", None, "QUEUED")
        assert run.parameters == {"region": "APAC", "top_n": 3}
    with pytest.raises(ParameterValueError):
        control.run_now(
            db, clock, Caller(tenant="default", user="t"), "daily", {"x=1\nimport os\ny": 1}
        )
    assert len(rows(db)) == 1


def test_concurrent_materializers_never_duplicate(db: Database, tmp_path: Path) -> None:
    for i in range(20):
        define(
            db,
            tmp_path,
            f"m{i}",
            {
                "cron": "* * * * *",
                "overlap": "allow",
                "misfire": {"policy": "run_all", "max_catchup": 1000},
            },
        )
    clock = FixedClock(T0 + timedelta(hours=2))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            Materializer(db, clock, batch=3).tick()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(1 if db.dialect == "sqlite" else 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.session() as session:
        counts = session.execute(
            sa.select(
                Run.definition_id, sa.func.count(), sa.func.count(sa.distinct(Run.slot_key))
            ).group_by(Run.definition_id)
        ).all()
    assert len(counts) == 20
    assert all(total == distinct == 120 for _, total, distinct in counts)
