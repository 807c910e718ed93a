"""One poison definition never stops the scheduler: its failure is recorded on it,
retried with backoff, and every other definition gets its slots on time.

The poison definitions here could not be published today (publish refuses a
``start`` outside 1800..8999), so each test plants one the way a definition
published by an older nbcast, or edited in the database, would look.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.cli import main
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.versions import publish
from nbcast.scheduler.materializer import Materializer, failure_backoff
from nbcast.scheduler.models import Run, ScheduleState
from tests.members import grant
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 7, 0, 0, tzinfo=UTC)
HOURLY = {"cron": "0 * * * *", "overlap": "allow"}

POISONS: dict[str, dict[str, Any]] = {
    "start_year_1": {"cron": "0 * * * *", "start": "0001-01-01T00:00"},
    "start_year_9999_new_york": {
        "cron": "0 * * * *",
        "timezone": "America/New_York",
        "start": "9999-12-31T23:00",
    },
    "unparsable_cron": {"cron": "61 * * * *"},
}


def define(db: Database, tmp_path: Path, name: str, schedule: dict[str, Any]) -> None:
    path = make_notebook(tmp_path / f"{name}.ipynb", nbcast={"name": name, "schedule": schedule})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)


def plant(db: Database, name: str, schedule: dict[str, Any]) -> None:
    """Overwrite the stored schedule of ``name``'s latest version (bypassing publish)."""
    with db.session() as session:
        version = _version(session, name)
        version.spec = {**version.spec, "schedule": schedule}


def _version(session: Session, name: str) -> DefinitionVersion:
    version = session.scalar(
        sa.select(DefinitionVersion)
        .join(ReportDefinition, ReportDefinition.id == DefinitionVersion.definition_id)
        .where(ReportDefinition.name == name)
        .order_by(DefinitionVersion.version.desc())
    )
    assert version is not None
    return version


def slots_of(db: Database, name: str) -> list[str]:
    with db.session() as session:
        return list(
            session.scalars(
                sa.select(Run.slot_key)
                .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
                .where(ReportDefinition.name == name)
                .order_by(Run.fire_at)
            )
        )


def state_of(db: Database, name: str) -> ScheduleState:
    with db.session() as session:
        state = session.scalar(
            sa.select(ScheduleState)
            .join(ReportDefinition, ReportDefinition.id == ScheduleState.definition_id)
            .where(ReportDefinition.name == name)
        )
        assert state is not None
        return state


@pytest.mark.parametrize("poison", sorted(POISONS))
def test_a_poison_definition_fails_alone_and_is_retried_with_backoff(
    db: Database, tmp_path: Path, poison: str
) -> None:
    define(db, tmp_path, "healthy", HOURLY)
    define(db, tmp_path, "poison", {"cron": "30 * * * *"})
    plant(db, "poison", POISONS[poison])
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    for _ in range(6):
        clock.advance(timedelta(hours=1))
        materializer.tick()
    assert slots_of(db, "healthy") == [f"2026-03-07T0{h}:00" for h in range(1, 7)]
    assert slots_of(db, "poison") == []
    state = state_of(db, "poison")
    assert state.error
    assert state.failures >= 2
    assert state.failed_at is not None
    assert state.next_fire_at == state.failed_at + failure_backoff(state.failures)
    assert state.watermark <= T0 + timedelta(seconds=1)  # it never moved


def test_backoff_doubles_and_is_capped() -> None:
    assert [failure_backoff(n).total_seconds() for n in (1, 2, 3, 4)] == [30, 60, 120, 240]
    assert failure_backoff(10**9) == timedelta(hours=1)


def test_the_failure_is_visible_and_a_fixed_version_resumes_from_the_watermark(
    use_db: str, db: Database, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grant(db, "default", "t")  # define's author
    grant(db, "default", "tester", "viewer")  # NBCAST_USER, reading on the CLI
    define(db, tmp_path, "healthy", HOURLY)
    define(db, tmp_path, "poison", {"cron": "30 * * * *", "overlap": "allow"})
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    clock.advance(timedelta(hours=1))
    materializer.tick()  # 00:30 is materialized while the schedule is healthy
    assert slots_of(db, "poison") == ["2026-03-07T00:30"]
    plant(db, "poison", POISONS["start_year_9999_new_york"])
    # A new version makes the sync recompile it; the planted one is what it finds.
    with db.session() as session:
        definition = session.scalar(
            sa.select(ReportDefinition).where(ReportDefinition.name == "poison")
        )
        assert definition is not None
        version = _version(session, "poison")
        session.add(
            DefinitionVersion(
                tenant_id=version.tenant_id,
                definition_id=definition.id,
                version=2,
                sha256="0" * 64,
                notebook_json=version.notebook_json,
                parameter_schema=version.parameter_schema,
                spec=version.spec,
                author_id=version.author_id,
                message="planted",
                created_at=T0,
            )
        )
        definition.latest_version = 2
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        materializer.tick()
    assert main(["definitions", "show", "poison", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["schedule_error"]
    assert shown["failures"] >= 1
    assert main(["definitions", "list"]) == 0
    assert "FAILING" in capsys.readouterr().out
    # The author publishes a fixed version: the error clears and the slots since the
    # watermark are materialized (the misfire policy decides the late ones).
    path = make_notebook(
        tmp_path / "poison.ipynb",
        nbcast={"name": "poison", "schedule": {"cron": "30 * * * *", "overlap": "allow"}},
        body="print('fixed')",
    )
    publish(db, path, caller=Caller(tenant="default", user="t"), now=clock.now())
    materializer.tick()
    state = state_of(db, "poison")
    assert state.error is None
    assert state.failures == 0
    assert slots_of(db, "poison")[0] == "2026-03-07T00:30"
    assert slots_of(db, "poison")[-1] == "2026-03-07T03:30"
    assert len(slots_of(db, "healthy")) == 4


class _BrokenWrites(Materializer):
    """A materializer whose database refuses the rows of one definition (as a
    database would refuse a value it cannot store)."""

    poison_id = -1

    def _insert(self, session: Session, rows: list[dict[str, Any]]) -> int:
        if any(row["definition_id"] == self.poison_id for row in rows):
            raise sa.exc.DataError("INSERT", {}, Exception("refused by the database"))
        return super()._insert(session, rows)


def test_a_definition_whose_rows_cannot_be_written_fails_alone(
    db: Database, tmp_path: Path
) -> None:
    for name in ("a-healthy", "b-poison", "c-healthy"):
        define(db, tmp_path, name, HOURLY)
    with db.session() as session:
        poison_id = session.scalar(
            sa.select(ReportDefinition.id).where(ReportDefinition.name == "b-poison")
        )
    clock = FixedClock(T0)
    materializer = _BrokenWrites(db, clock)
    materializer.poison_id = int(poison_id or 0)
    for _ in range(3):
        clock.advance(timedelta(hours=1))
        result = materializer.tick()
        assert result.failed <= 1
    expected = [f"2026-03-07T0{h}:00" for h in range(1, 4)]
    assert slots_of(db, "a-healthy") == expected
    assert slots_of(db, "c-healthy") == expected
    assert slots_of(db, "b-poison") == []
    assert "refused by the database" in (state_of(db, "b-poison").error or "")
