"""One pass materializes at most ``MAX_SLOTS_PER_PASS`` slots of one definition (issue 9,
finding 7's second guard, after ``max_catchup`` at publish): a definition that is far
behind gets the cap in one pass and the rest in the next passes, each slot exactly once,
while the other definitions of the pass get all their slots at once.

The cap (100,000 in :mod:`nbcast.limits`) is made 5 here, on the materializer's module
where it is read, so a dozen slots stand for a year of one-minute slots.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.versions import publish
from nbcast.scheduler import materializer as materializer_module
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run, ScheduleState
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 7, 0, 0, tzinfo=UTC)
CAP = 5
RUN_ALL = {"policy": "run_all", "grace": "1h", "max_catchup": 1000}


@pytest.fixture(autouse=True)
def small_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    assert materializer_module.MAX_SLOTS_PER_PASS == 100_000  # what the test stands for
    monkeypatch.setattr(materializer_module, "MAX_SLOTS_PER_PASS", CAP)


def define(db: Database, tmp_path: Path, name: str, schedule: dict[str, Any]) -> None:
    path = make_notebook(tmp_path / f"{name}.ipynb", nbcast={"name": name, "schedule": schedule})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)


def rows_of(db: Database, name: str) -> list[tuple[str, str, str | None]]:
    with db.session() as session:
        return [
            (key, state, reason)
            for key, state, reason in session.execute(
                sa.select(Run.slot_key, Run.state, Run.reason)
                .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
                .where(ReportDefinition.name == name)
                .order_by(Run.fire_at)
            ).all()
        ]


def next_fire_of(db: Database, name: str) -> datetime:
    with db.session() as session:
        state = session.scalar(
            sa.select(ScheduleState)
            .join(ReportDefinition, ReportDefinition.id == ScheduleState.definition_id)
            .where(ReportDefinition.name == name)
        )
        assert state is not None
        return state.next_fire_at


def minutes(*values: int) -> list[str]:
    return [f"2026-03-07T00:{m:02d}" for m in values]


def test_a_definition_over_the_cap_gets_the_cap_per_pass_and_the_rest_later(
    db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path, "behind", {"cron": "* * * * *", "overlap": "allow", "misfire": RUN_ALL})
    define(db, tmp_path, "small", {"cron": "*/3 * * * *", "overlap": "allow", "misfire": RUN_ALL})
    define(db, tmp_path, "at_cap", {"cron": "*/2 * * * *", "overlap": "allow", "misfire": RUN_ALL})
    now = T0 + timedelta(minutes=12, seconds=30)  # 12 slots due, 4 and 6 for the others
    # One drain thread: on PostgreSQL a second thread that starts after the first has
    # committed finds "behind" due again and runs a second pass within the same tick.
    materializer = Materializer(db, FixedClock(now), threads=1)

    first = materializer.tick(now)
    assert [key for key, _, _ in rows_of(db, "behind")] == minutes(1, 2, 3, 4, 5)
    assert next_fire_of(db, "behind") <= now  # the rest is due at once
    assert [key for key, _, _ in rows_of(db, "small")] == minutes(3, 6, 9, 12)
    # six slots: the cap, then one more in the next pass
    assert [key for key, _, _ in rows_of(db, "at_cap")] == minutes(2, 4, 6, 8, 10)
    assert next_fire_of(db, "small") > now
    assert first.inserted == 5 + 4 + 5

    second = materializer.tick(now)
    assert [key for key, _, _ in rows_of(db, "behind")] == minutes(*range(1, 11))
    assert [key for key, _, _ in rows_of(db, "at_cap")] == minutes(2, 4, 6, 8, 10, 12)
    assert second.inserted == 5 + 1

    third = materializer.tick(now)
    assert third.inserted == 2
    assert materializer.tick(now).inserted == 0  # caught up: nothing twice
    behind = rows_of(db, "behind")
    assert [key for key, _, _ in behind] == minutes(*range(1, 13))
    assert {(state, reason) for _, state, reason in behind} == {("QUEUED", None)}
    assert [key for key, _, _ in rows_of(db, "small")] == minutes(3, 6, 9, 12)
    assert [next_fire_of(db, name) - T0 for name in ("behind", "small", "at_cap")] == [
        timedelta(minutes=13),
        timedelta(minutes=15),
        timedelta(minutes=14),
    ]


def test_run_latest_over_several_passes_runs_only_the_newest_slot(
    db: Database, tmp_path: Path
) -> None:
    """A capped pass is not the last: none of its missed slots is the newest due one,
    so ``run_latest`` supersedes them all and runs only the slot of the last pass."""
    define(db, tmp_path, "hourly", {"cron": "0 * * * *", "overlap": "allow"})
    now = T0 + timedelta(hours=12, minutes=30)  # 12 missed hourly slots
    # One drain thread: on PostgreSQL a second thread that starts after the first has
    # committed finds "behind" due again and runs a second pass within the same tick.
    materializer = Materializer(db, FixedClock(now), threads=1)
    for _ in range(4):
        materializer.tick(now)
    got = rows_of(db, "hourly")
    assert [key for key, _, _ in got] == [f"2026-03-07T{h:02d}:00" for h in range(1, 13)]
    assert [(state, reason) for _, state, reason in got] == [("MISSED", "superseded")] * 11 + [
        ("QUEUED", None)
    ]
