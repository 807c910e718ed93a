"""One run's trouble stays with that run: a job the engine refuses at submit, an
outcome the database refuses to record. The local engine runs real kernels; the
subclasses below only make the engine (the pluggable boundary) refuse or garble one
run's attempt, as a third-party or a misconfigured engine may."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.attempt import AttemptJob, AttemptReport
from nbcast.executor.engines.base import Resources
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.models import WarehouseUsage
from nbcast.executor.worker import MAX_RECORD_TRIES
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import ensure_tenant, set_quota
from tests.executor.test_worker import attempts, make_worker, run_state
from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(180)


class RefusingEngine(LocalEngine):
    """The local engine, raising at ``submit`` for chosen runs (one error per attempt)."""

    def __init__(self, refuse: dict[int, list[Exception]], **options: Any) -> None:
        super().__init__(**options)
        self.refuse = refuse

    def submit(self, job: AttemptJob, resources: Resources) -> None:
        errors = self.refuse.get(job.run_id)
        if errors:
            raise errors.pop(0)
        super().submit(job, resources)


class GarblingEngine(LocalEngine):
    """The local engine, reporting its first ``hold`` outcomes in one poll, with chosen
    runs' outcomes garbled."""

    def __init__(
        self,
        garble: dict[int, Callable[[AttemptReport], AttemptReport]],
        hold: int,
        **options: Any,
    ) -> None:
        super().__init__(**options)
        self.garble = garble
        self.hold = hold
        self.held: list[tuple[int, int, AttemptReport]] = []

    def poll(self) -> list[tuple[int, int, AttemptReport]]:
        for run_id, attempt, outcome in super().poll():
            change = self.garble.get(run_id)
            self.held.append((run_id, attempt, change(outcome) if change else outcome))
        if len(self.held) < self.hold:
            return []
        self.hold = 0
        ended, self.held = self.held, []
        return ended


def define(db: Database, tmp_path: Path, tenant: str, name: str, body: str) -> None:
    with db.session() as session:
        ensure_tenant(session, tenant)
    path = make_notebook(
        tmp_path / tenant / f"{name}.ipynb", parameters="n = 10\n", body=body, nbcast={"name": name}
    )
    publish(db, path, caller=Caller(tenant=tenant, user="t"))


def test_a_job_the_engine_refuses_fails_alone(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "poisoned", "doomed", "print(n)")
    define(db, tmp_path, "default", "fine", "print(n)")
    doomed = run_now(db, SystemClock(), Caller(tenant="poisoned", user="t"), "doomed", {})
    fine = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "fine", {})
    # What Ray says of a quota it cannot schedule: the same job is refused every time.
    refusal = ValueError("Resource quantities must be finite, got num_cpus=inf")
    refuse: dict[int, list[Exception]] = {doomed: [refusal, refusal, refusal]}
    with RefusingEngine(refuse, capacity=2, pool_size=1) as engine:
        worker = make_worker(db, tmp_path, engine)
        assert worker.step() == 2  # both in one claim
        stats = worker.run(exit_when_idle=True)
    run = run_state(db, doomed)
    assert (run.state, run.reason, run.attempt) == ("FAILED", "submit_refused", 1)
    assert run.error is not None
    assert (run.error["ename"], run.error["stage"], run.error["retryable"]) == (
        "ValueError",
        "submit",
        False,
    )
    assert [a.outcome for a in attempts(db, doomed)] == ["FAILED"]
    assert run_state(db, fine).state == "SUCCEEDED"
    assert (stats.claimed, stats.succeeded, stats.failed) == (2, 1, 1)


def test_a_submit_that_fails_for_a_passing_reason_is_retried(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "default", "flaky", "print(n)")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "flaky", {})
    refuse: dict[int, list[Exception]] = {run_id: [ConnectionError("Ray GCS unreachable")]}
    with RefusingEngine(refuse, capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.attempt) == ("SUCCEEDED", 2)
    first, second = attempts(db, run_id)
    assert (first.outcome, second.outcome) == ("FAILED", "SUCCEEDED")
    assert first.error is not None
    assert (first.error["ename"], first.error["stage"]) == ("ConnectionError", "submit")


def test_an_outcome_the_database_refuses_does_not_hold_back_the_others(
    db: Database, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    define(db, tmp_path, "default", "fine", "print(n)")
    define(db, tmp_path, "poisoned", "costly", "print(n)")
    define(db, tmp_path, "poisoned", "broken", "raise ValueError('bad data')")
    with db.session() as session:
        set_quota(session, "poisoned", max_attempts=1)
    fine = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "fine", {})
    costly = run_now(db, SystemClock(), Caller(tenant="poisoned", user="t"), "costly", {})
    broken = run_now(db, SystemClock(), Caller(tenant="poisoned", user="t"), "broken", {})

    def nonsense_usage(outcome: AttemptReport) -> AttemptReport:
        return dataclasses.replace(outcome, usage=[{"connection": "default", "rows": "many"}])

    def unstorable_failure(outcome: AttemptReport) -> AttemptReport:
        # A set is not JSON and a NUL not storable: the worker makes them storable
        # itself (nbcast.executor.storable); the figures it cannot fix.
        error = {**(outcome.error or {}), "seen": {1, 2}, "evalue": "bad\x00data"}
        return nonsense_usage(dataclasses.replace(outcome, error=error))

    garble: dict[int, Callable[[AttemptReport], AttemptReport]] = {
        costly: nonsense_usage,
        broken: unstorable_failure,
    }
    with GarblingEngine(garble, hold=3, capacity=3, pool_size=1) as engine:
        worker = make_worker(db, tmp_path, engine)
        assert worker.step() == 3
        stats = worker.run(exit_when_idle=True)
    assert (run_state(db, fine).state, run_state(db, fine).attempt) == ("SUCCEEDED", 1)
    # Refused MAX_RECORD_TRIES times, then recorded bare: without the figures ...
    assert (run_state(db, costly).state, run_state(db, costly).attempt) == ("SUCCEEDED", 1)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(WarehouseUsage)) == 0
    # ... or with the error as plain text.
    run = run_state(db, broken)
    assert (run.state, run.reason, run.attempt) == ("FAILED", "notebook_error", 1)
    assert run.error is not None
    assert run.error["ename"] == "ValueError"
    assert run.error["evalue"] == "bad\\0data"
    assert "unrecordable" in run.error
    assert (stats.succeeded, stats.failed, stats.rejected) == (2, 1, 0)
    refused = [r.getMessage() for r in caplog.records if "database refused" in r.getMessage()]
    assert sum(f"run {costly} attempt 1 (" in m for m in refused) == MAX_RECORD_TRIES
    assert sum(f"run {broken} attempt 1 (" in m for m in refused) == MAX_RECORD_TRIES
