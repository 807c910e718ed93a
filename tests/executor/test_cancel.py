"""One way to cancel: ``cancel_run`` writes a request row, and the worker honours it
(SQLite and PostgreSQL)."""

from __future__ import annotations

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
from nbcast.executor.control import cancel_run
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import CancelRequest, Run
from tests.members import grant
from tests.notebooks import make_notebook

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
ANA = Caller(tenant="default", user="ana")


@pytest.fixture(autouse=True)
def authors(db: Database) -> None:
    """t publishes and runs, ana and bo cancel, tester (NBCAST_USER) on the CLI."""
    for author in ("t", "ana", "bo", "tester"):
        grant(db, "default", author)


def queued(db: Database, tmp_path: Path, tenant: str = "default", count: int = 1) -> list[int]:
    path = make_notebook(tmp_path / tenant / "report.ipynb", nbcast={"name": "report"})
    publish(db, path, caller=Caller(tenant=tenant, user="t"), now=T0)
    return [
        run_now(db, FixedClock(T0), Caller(tenant=tenant, user="t"), "report", {})
        for _ in range(count)
    ]


def state(db: Database, run_id: int) -> tuple[str, str | None]:
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.state, run.reason


def requests(db: Database) -> list[tuple[int, str, str]]:
    with db.session() as session:
        rows = session.execute(
            sa.select(CancelRequest.run_id, CancelRequest.requested_by, CancelRequest.reason)
        ).all()
    return [tuple(r) for r in rows]


def test_cancelling_a_queued_run_is_a_request_the_worker_honours(
    db: Database, tmp_path: Path
) -> None:
    first, second = queued(db, tmp_path, count=2)
    clock = FixedClock(T0 + timedelta(seconds=1))
    result = cancel_run(db, clock, ANA, first)
    assert (result.run_id, result.state, result.already_requested) == (first, "QUEUED", False)
    assert (result.requested_by, result.requested_at) == ("ana", clock.now())
    assert state(db, first) == ("QUEUED", None)  # nobody but the worker changes a run
    assert requests(db) == [(first, "ana", "cancel")]
    queue = RunQueue(db, clock, owner="w")
    assert [lease.run_id for lease in queue.claim(5)] == [second]  # never claimed
    assert queue.cancel_queued() == 1
    assert state(db, first) == ("CANCELLED", "cancelled")
    assert queue.cancel_queued() == 0


def test_a_second_request_writes_nothing(db: Database, tmp_path: Path) -> None:
    [run_id] = queued(db, tmp_path)
    cancel_run(db, FixedClock(T0), ANA, run_id)
    again = cancel_run(
        db, FixedClock(T0 + timedelta(minutes=1)), Caller(tenant="default", user="bo"), run_id
    )
    assert (again.already_requested, again.requested_by, again.requested_at) == (True, "ana", T0)
    assert requests(db) == [(run_id, "ana", "cancel")]


def test_a_running_run_is_told_at_its_heartbeat(db: Database, tmp_path: Path) -> None:
    [run_id] = queued(db, tmp_path)
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w")
    [lease] = queue.start_many(queue.claim(1))
    assert queue.heartbeat(lease) is False
    assert cancel_run(db, clock, ANA, run_id).state == "RUNNING"
    assert queue.heartbeat(lease) is True
    assert queue.cancel_queued() == 0  # running: its worker stops it
    assert state(db, run_id) == ("RUNNING", None)


def test_finished_and_foreign_runs_are_refused(db: Database, tmp_path: Path) -> None:
    grant(db, "other", "t")
    [mine] = queued(db, tmp_path)
    [theirs] = queued(db, tmp_path, tenant="other")
    clock = FixedClock(T0 + timedelta(seconds=1))
    with pytest.raises(NotFoundError, match=f"no run {theirs} in tenant 'default'"):
        cancel_run(db, clock, ANA, theirs)
    for missing in (0, -1, 2**70, 10**6):
        with pytest.raises(NotFoundError, match="no run"):
            cancel_run(db, clock, ANA, missing)
    queue = RunQueue(db, clock, owner="w")
    [lease] = [lease for lease in queue.claim(5) if lease.run_id == mine]
    queue.start(lease)
    queue.succeed(lease, artifact_sha256=None, duration_s=0.1)
    with pytest.raises(ConflictError, match=f"run {mine} has already finished: it is SUCCEEDED"):
        cancel_run(db, clock, ANA, mine)
    assert requests(db) == []


def test_nbcast_cancel_says_what_happens_next(
    db: Database, use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    [run_id] = queued(db, tmp_path)
    assert main(["cancel", str(run_id)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"run {run_id} (QUEUED): cancel requested; ")
    assert "the next step of a worker (nbcast worker) ends it CANCELLED" in out
    assert main(["cancel", str(run_id), "--json"]) == 0
    shown = capsys.readouterr().out
    assert '"already_requested": true' in shown
    assert '"requested_by": "tester"' in shown
    assert main(["runs", "show", str(run_id)]) == 0
    assert "cancel      requested by tester at" in capsys.readouterr().out
    assert main(["cancel", "999999"]) == 2
    assert capsys.readouterr().err == "error: no run 999999 in tenant 'default'\n"
