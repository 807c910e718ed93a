"""The scheduler's commands are tenant-scoped by the command layer itself: another
tenant's definition is "not found" for pause, resume, backfill and run now, with the
same error as a name nobody has, and nothing is written."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Base, Database
from nbcast.definitions.versions import publish
from nbcast.errors import NotFoundError
from nbcast.scheduler import control
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

T0 = datetime(2026, 11, 2, 5, 0, tzinfo=UTC)
OWNER = Caller(tenant="default", user="ann")
STRANGER = Caller(tenant="globex", user="bob")

COMMANDS: dict[str, Callable[[Database, FixedClock, Caller, str], Any]] = {
    "pause": lambda db, clock, caller, name: control.pause(db, clock, caller, name),
    "resume": lambda db, clock, caller, name: control.resume(db, clock, caller, name),
    "backfill": lambda db, clock, caller, name: control.backfill(
        db, clock, caller, name, date(2026, 10, 26), date(2026, 10, 31)
    ),
    "run_now": lambda db, clock, caller, name: control.run_now(db, clock, caller, name, {}),
}


def _counts(db: Database) -> dict[str, int]:
    with db.session() as session:
        return {
            table.name: session.scalar(sa.select(sa.func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_another_tenants_definition_is_not_found_and_nothing_is_written(
    db: Database, tmp_path: Path, command: str
) -> None:
    path = make_notebook(
        tmp_path / "daily.ipynb",
        parameters="top_n = 3\n",
        nbcast={"name": "daily", "schedule": {"cron": "0 7 * * 1-5", "timezone": "UTC"}},
    )
    publish(db, path, caller=Caller(tenant="default", user="ann"), now=T0)
    with db.session() as session:
        ensure_tenant(session, "globex")
    clock = FixedClock(T0)
    before = _counts(db)
    with pytest.raises(NotFoundError) as foreign:
        COMMANDS[command](db, clock, STRANGER, "daily")
    with pytest.raises(NotFoundError) as missing:
        COMMANDS[command](db, clock, STRANGER, "no-such-report")
    assert _counts(db) == before
    # The same words for "another tenant's" as for "nobody's": an id tells nothing.
    assert str(foreign.value).replace("daily", "X") == str(missing.value).replace(
        "no-such-report", "X"
    )
    # The owner's call of the same command works.
    COMMANDS[command](db, clock, OWNER, "daily")
