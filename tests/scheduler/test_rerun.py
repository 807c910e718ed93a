"""``rerun``: a finished run (or a skipped or missed slot) again, with its version,
parameters and frozen context; never an active one, never another tenant's."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.cli import main
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import ConflictError, NotFoundError
from nbcast.scheduler.control import rerun_run
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run
from tests.members import grant, grant_url
from tests.notebooks import make_notebook

T0 = datetime(2026, 11, 2, 5, 0, tzinfo=UTC)
ACME = Caller(tenant="default", user="ann")
SPEC = {
    "name": "daily",
    "schedule": {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
    "parameters": {"day": {"$period": "slot", "steps": [{"business_days": -1}]}},
}


@pytest.fixture(autouse=True)
def authors(db_url: str) -> None:
    """t publishes, ann reruns, and so does tester (NBCAST_USER) on the CLI."""
    for author in ("t", "ann", "tester"):
        grant_url(db_url, "default", author)


def _scheduled_run(db: Database, tmp_path: Path, *, state: str = "FAILED") -> Run:
    path = make_notebook(tmp_path / "daily.ipynb", parameters='day = ""\n', nbcast=SPEC)
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    Materializer(db, FixedClock(T0 + timedelta(hours=1, minutes=1)), threads=1).tick()
    with db.session() as session:
        [run] = session.scalars(sa.select(Run)).all()
        run.state = state
        session.flush()
        session.expunge(run)
    return run


def test_a_rerun_repeats_the_run_with_its_version_parameters_and_period(
    db: Database, tmp_path: Path
) -> None:
    original = _scheduled_run(db, tmp_path)
    # A new version since: the rerun still runs the original's.
    path = make_notebook(
        tmp_path / "daily.ipynb", parameters='day = ""\n', body="print(2)", nbcast=SPEC
    )
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0 + timedelta(days=1))
    later = FixedClock(T0 + timedelta(days=3))
    new_id = rerun_run(db, later, ACME, original.id)
    with db.session() as session:
        rerun = session.get(Run, new_id)
        assert rerun is not None
        assert (rerun.kind, rerun.state, rerun.rerun_of) == ("rerun", "QUEUED", original.id)
        assert (rerun.version_id, rerun.version) == (original.version_id, 1)
        assert rerun.parameters == original.parameters == {"day": "2026-10-30"}
        assert rerun.context == original.context
        assert rerun.slot_key is None
        assert rerun.fire_at == later.now()
        assert not rerun.serial
    second = rerun_run(db, later, ACME, original.id)  # each rerun is a run of its own
    assert second != new_id


@pytest.mark.parametrize("state", ["QUEUED", "LEASED", "RUNNING"])
def test_an_active_run_is_not_rerun(db: Database, tmp_path: Path, state: str) -> None:
    original = _scheduled_run(db, tmp_path, state=state)
    with pytest.raises(ConflictError, match=f"run {original.id} is {state}"):
        rerun_run(db, FixedClock(T0), ACME, original.id)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 1


def test_another_tenants_run_is_not_found(db: Database, tmp_path: Path) -> None:
    original = _scheduled_run(db, tmp_path, state="MISSED")
    grant(db, "globex", "g")
    for run_id in (original.id, original.id + 1, 0, -1, 2**70):
        with pytest.raises(NotFoundError):
            rerun_run(db, FixedClock(T0), Caller(tenant="globex", user="g"), run_id)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Run)) == 1


def test_the_cli_reruns_and_lists_it(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    db = Database.open(use_db)
    try:
        original = _scheduled_run(db, tmp_path, state="SUCCEEDED")
    finally:
        db.dispose()
    assert main(["rerun", str(original.id), "--json"]) == 0
    queued = json.loads(capsys.readouterr().out)
    assert queued["rerun_of"] == original.id
    assert main(["runs", "list", "--kind", "rerun", "--json"]) == 0
    [listed] = json.loads(capsys.readouterr().out)
    assert (listed["id"], listed["rerun_of"], listed["kind"]) == (
        queued["id"],
        original.id,
        "rerun",
    )
    assert listed["parameters"] == {"day": "2026-10-30"}
    assert main(["rerun", str(queued["id"])]) == 2  # still queued
    assert "is QUEUED" in capsys.readouterr().err
