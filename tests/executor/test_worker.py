"""The worker with the local engine: real kernels, real papermill, SQLite and PostgreSQL."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.attempt import AttemptReport
from nbcast.executor.control import cancel_run
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.models import RunAttempt
from nbcast.executor.worker import Worker
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.tenants import set_quota
from tests.members import grant
from tests.notebooks import make_notebook


def define(
    db: Database, tmp_path: Path, name: str, body: str, parameters: str = "n = 10\n", **block: Any
) -> None:
    path = make_notebook(
        tmp_path / f"{name}.ipynb",
        parameters=parameters,
        body=body,
        nbcast={"name": name, **block},
    )
    publish(db, path, caller=Caller(tenant="default", user="t"))


def make_worker(db: Database, tmp_path: Path, engine: LocalEngine, **options: Any) -> Worker:
    options.setdefault("lease_seconds", 10.0)
    return Worker(
        db,
        SystemClock(),
        engine,
        name="test-worker",
        artifacts=str(tmp_path / "artifacts"),
        work_dir=str(tmp_path / "runs"),
        backoff_base=0.0,
        **options,
    )


def run_state(db: Database, run_id: int) -> Run:
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run


def attempts(db: Database, run_id: int) -> list[RunAttempt]:
    with db.session() as session:
        return list(
            session.scalars(
                sa.select(RunAttempt)
                .where(RunAttempt.run_id == run_id)
                .order_by(RunAttempt.attempt)
            )
        )


def test_a_run_executes_and_its_notebook_is_stored(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "square", "result = n * n\nprint(result)")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "square", {"n": 7})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        stats = make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.attempt, stats.succeeded) == ("SUCCEEDED", 1, 1)
    assert run.artifact_sha256 is not None
    executed = json.loads(LocalArtifactStore(tmp_path / "artifacts").get(run.artifact_sha256))
    sources = ["".join(c["source"]) for c in executed["cells"]]
    assert any("n = 7" in s for s in sources)  # papermill's injected-parameters cell
    outputs = [o for c in executed["cells"] for o in c.get("outputs", [])]
    assert any("49" in "".join(o.get("text", "")) for o in outputs)
    [attempt] = attempts(db, run_id)
    assert attempt.outcome == "SUCCEEDED"
    assert attempt.duration_s is not None
    assert attempt.duration_s > 0


def test_the_notebooks_own_error_fails_the_run_after_one_attempt(
    db: Database, tmp_path: Path
) -> None:
    """Another attempt would raise it again: no retry, reason ``notebook_error``."""
    define(db, tmp_path, "broken", "x = 1\nraise ValueError('bad data for ' + str(n))")
    with db.session() as session:
        set_quota(session, "default", max_attempts=3)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "broken", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.attempt, run.reason) == ("FAILED", 1, "notebook_error")
    assert run.error is not None
    assert run.error["ename"] == "ValueError"
    assert run.error["evalue"] == "bad data for 10"
    assert run.error["cell_index"] == 1  # parameters cell, then the body (no injection)
    assert [a.outcome for a in attempts(db, run_id)] == ["FAILED"]


def test_an_error_the_definition_retries_on_is_retried_then_recorded(
    db: Database, tmp_path: Path
) -> None:
    define(
        db,
        tmp_path,
        "flaky",
        "raise ConnectionError('the source is down')",
        retry_on=["builtins.ConnectionError", "TimeoutError"],
    )
    with db.session() as session:
        set_quota(session, "default", max_attempts=2)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "flaky", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.attempt, run.reason) == ("FAILED", 2, "max_attempts")
    assert run.error is not None
    assert run.error["ename"] == "ConnectionError"
    assert [a.outcome for a in attempts(db, run_id)] == ["FAILED", "FAILED"]


def test_a_run_over_its_timeout_is_timed_out(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "slow", "import time\ntime.sleep(60)")
    with db.session() as session:
        set_quota(session, "default", run_timeout_s=3)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "slow", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.reason) == ("TIMED_OUT", "timeout")


def test_cancelling_a_running_run(db: Database, tmp_path: Path) -> None:
    grant(db, "default", "t")
    grant(db, "default", "ana")  # another author cancels t's run
    define(db, tmp_path, "slow", "import time\ntime.sleep(60)")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "slow", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        worker = make_worker(db, tmp_path, engine, lease_seconds=1.5)
        while run_state(db, run_id).state != "RUNNING":
            worker.step()
        result = cancel_run(db, SystemClock(), Caller(tenant="default", user="ana"), run_id)
        assert (result.state, result.already_requested) == ("RUNNING", False)
        worker.run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.reason) == ("CANCELLED", "cancelled")
    assert [a.outcome for a in attempts(db, run_id)] == ["CANCELLED"]


def test_a_variable_of_one_run_is_not_visible_to_the_next(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "first", "leaked_secret = 42")
    define(db, tmp_path, "second", "assert 'leaked_secret' not in globals(), 'state leaked'")
    with LocalEngine(capacity=1, pool_size=1) as engine:
        worker = make_worker(db, tmp_path, engine)
        first = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "first", {})
        worker.run(exit_when_idle=True)
        second = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "second", {})
        worker.run(exit_when_idle=True)
    assert run_state(db, first).state == "SUCCEEDED"
    assert run_state(db, second).state == "SUCCEEDED"


def test_an_outcome_survives_a_database_outage(tmp_path: Path) -> None:
    """The database refuses connections just as a run ends: the worker keeps the
    outcome (and the lease), and records it once the database is back."""
    from tests.conftest import PG_ADMIN_URL, scratch_pg_database

    with scratch_pg_database("nbcast_outage") as url:
        db = Database.open(url)
        name = sa.engine.make_url(url).database
        admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")

        def connections(allow: bool) -> None:
            with admin.connect() as conn:
                conn.execute(sa.text(f'ALTER DATABASE "{name}" ALLOW_CONNECTIONS {allow}'))
                if not allow:
                    conn.execute(
                        sa.text(
                            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                            "WHERE datname = :n AND pid <> pg_backend_pid()"
                        ),
                        {"n": name},
                    )

        try:
            define(db, tmp_path, "square", "result = n * n")
            run_id = run_now(
                db, SystemClock(), Caller(tenant="default", user="t"), "square", {"n": 3}
            )
            with LocalEngine(capacity=1, pool_size=0) as engine:
                worker = make_worker(db, tmp_path, engine, lease_seconds=60.0)
                assert worker._claim(1) == 1
                ended: list[tuple[int, int, AttemptReport]] = []
                deadline = time.monotonic() + 120
                while not ended:  # wait for the engine, not recording anything yet
                    assert time.monotonic() < deadline, "the run did not end within 120 s"
                    time.sleep(0.05)
                    ended = engine.poll()
                connections(allow=False)
                worker._record(ended)  # the database is away: nothing is lost
                assert worker.stats.succeeded == 0
                assert worker.busy == 1
                connections(allow=True)
                worker.step()
                assert worker.stats.succeeded == 1
                assert worker.busy == 0
            run = run_state(db, run_id)
            assert (run.state, run.attempt) == ("SUCCEEDED", 1)
            assert [a.outcome for a in attempts(db, run_id)] == ["SUCCEEDED"]
        finally:
            connections(allow=True)
            admin.dispose()
            db.dispose()
