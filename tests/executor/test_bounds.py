"""Numbers from outside — quotas, attempt numbers, lease and backoff settings, usage
figures — are bounded in the execution plane (:mod:`nbcast.executor.bounds`)."""

from __future__ import annotations

import math
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock, SystemClock
from nbcast.db import Database
from nbcast.errors import ConfigError
from nbcast.executor import bounds
from nbcast.executor.attempt import AttemptJob
from nbcast.executor.engines.base import Resources
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.models import WarehouseUsage
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run, RunState
from nbcast.tenancy.models import Tenant
from tests.executor.test_queue import T0, setup_tenant, states
from tests.executor.test_worker import define, make_worker, run_state

HUGE_ATTEMPT = 2000  # 2 ** 1999 cannot become a float


def at_attempt(db: Database, run_id: int, attempt: int) -> None:
    with db.session() as session:
        session.execute(sa.update(Run).where(Run.id == run_id).values(attempt=attempt))


def test_a_failure_at_a_huge_attempt_number_is_retried(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    with db.session() as session:
        _store_quota(session, max_attempts=10_000)  # stored before quotas were bounded
    at_attempt(db, run_id, HUGE_ATTEMPT - 1)
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w", backoff_base=30.0, backoff_cap=600.0)
    [lease] = queue.claim()
    assert lease.attempt == HUGE_ATTEMPT
    queue.start(lease)
    assert queue.fail(lease, {"ename": "ValueError"}) is RunState.QUEUED
    run = run_state(db, run_id)
    assert (run.state, run.reason) == ("QUEUED", "retry")
    assert run.not_before <= clock.now() + timedelta(seconds=600)


def test_the_reaper_is_not_stopped_by_a_huge_attempt_number(db: Database, tmp_path: Path) -> None:
    """Today's failure mode: the reaper's whole batch rolls back, every pass."""
    huge, normal = setup_tenant(db, tmp_path, "default", 2)
    with db.session() as session:
        _store_quota(session, max_attempts=10_000)
    at_attempt(db, huge, HUGE_ATTEMPT - 1)
    clock = FixedClock(T0 + timedelta(seconds=1))
    dead = RunQueue(db, clock, owner="dead", lease_seconds=10)
    assert {lease.run_id for lease in dead.claim(2)} == {huge, normal}
    clock.advance(60)  # both leases expire
    assert RunQueue(db, clock, owner="reaper").reap() == 2
    assert states(db) == {huge: ("QUEUED", HUGE_ATTEMPT), normal: ("QUEUED", 1)}


def test_usage_figures_are_clamped_to_what_the_columns_hold(db: Database, tmp_path: Path) -> None:
    """The usage file is written inside the notebook's kernel: its figures are outside
    numbers. 10**30 rows used to be refused by the database (PostgreSQL: bigint out of
    range; SQLite: int too large), the success with them."""
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    queue = RunQueue(db, FixedClock(T0 + timedelta(seconds=1)), owner="w")
    [lease] = queue.claim()
    queue.start(lease)
    usage: list[dict[str, Any]] = [
        {"connection": "default", "rows": 10**30, "bytes": -5, "seconds": math.nan},
        {"connection": "default", "rows": 3, "bytes": math.inf, "seconds": 1e300},
    ]
    queue.succeed(lease, artifact_sha256=None, duration_s=1.0, usage=usage)
    assert states(db)[run_id] == ("SUCCEEDED", 1)
    with db.session() as session:
        rows = session.execute(
            sa.select(WarehouseUsage.rows, WarehouseUsage.bytes, WarehouseUsage.seconds).order_by(
                WarehouseUsage.id
            )
        ).all()
    assert [tuple(r) for r in rows] == [
        (bounds.MAX_COUNTER, 0, 0.0),
        (3, bounds.MAX_COUNTER, float(bounds.MAX_RUN_TIMEOUT_S)),
    ]


@pytest.mark.parametrize(
    ("quota", "expected"),
    [(3600, 3600.0), (0, 1.0), (-5, 1.0), (2_000_000_000, 604_800.0), (math.nan, 604_800.0)],
    ids=["hour", "zero", "negative", "decades", "nan"],
)
def test_run_timeout_is_bounded(quota: float, expected: float) -> None:
    assert bounds.run_timeout(quota) == expected


class RecordingEngine(LocalEngine):
    """The local engine, keeping the jobs it was given."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        self.jobs: list[AttemptJob] = []

    def submit(self, job: AttemptJob, resources: Resources) -> None:
        self.jobs.append(job)
        super().submit(job, resources)


def test_an_absurd_quota_timeout_gives_the_bounded_one(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "square", "print(n * n)")
    with db.session() as session:
        _store_quota(session, run_timeout_s=2_000_000_000)  # 63 years
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "square", {})
    with RecordingEngine(capacity=1, pool_size=0) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    assert [job.timeout_s for job in engine.jobs] == [float(bounds.MAX_RUN_TIMEOUT_S)]
    assert run_state(db, run_id).state == "SUCCEEDED"


@pytest.mark.parametrize(
    "options",
    [
        {"lease_seconds": math.nan},
        {"lease_seconds": 0},
        {"lease_seconds": -1},
        {"backoff_base": -1.0},
        {"backoff_base": math.nan},
        {"backoff_cap": math.nan},
    ],
    ids=["lease_nan", "lease_zero", "lease_negative", "base_negative", "base_nan", "cap_nan"],
)
def test_a_nonsense_setting_is_refused_when_the_worker_starts(
    options: dict[str, Any], db: Database
) -> None:
    with pytest.raises(ConfigError):
        RunQueue(db, FixedClock(T0), owner="w", **options)


def test_huge_settings_are_clamped(db: Database, tmp_path: Path) -> None:
    """A lease of 1e300 s used to overflow ``timedelta`` when the worker started."""
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    queue = RunQueue(
        db,
        FixedClock(T0 + timedelta(seconds=1)),
        owner="w",
        lease_seconds=1e300,
        backoff_base=math.inf,
        backoff_cap=1e300,
    )
    assert queue.lease == timedelta(seconds=bounds.MAX_LEASE_S)
    [lease] = queue.claim()
    assert lease.expires_at == T0 + timedelta(seconds=1 + bounds.MAX_LEASE_S)
    queue.start(lease)
    assert queue.fail(lease, {}) is RunState.QUEUED
    assert run_state(db, run_id).not_before <= T0 + timedelta(seconds=1 + bounds.MAX_BACKOFF_S)


def _store_quota(session: Any, **values: Any) -> None:
    """Write quota values straight into the tenant row: ``set_quota`` bounds them now,
    but a row written by an older nbcast (or by hand) may hold anything."""
    session.execute(sa.update(Tenant).where(Tenant.name == "default").values(**values))
