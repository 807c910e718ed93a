"""The run queue on SQLite and PostgreSQL: claims, quotas, fair share, fencing,
retries, the reaper, cancels and budgets."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import LeaseLostError
from nbcast.executor.leases import Success
from nbcast.executor.models import OutboxRow, RunAttempt, WarehouseUsage
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import CancelRequest, Run, RunState
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)


def setup_tenant(
    db: Database,
    tmp_path: Path,
    tenant: str,
    runs: int,
    *,
    max_concurrent: int = 4,
    definition: str | None = None,
) -> list[int]:
    with db.session() as session:
        row = ensure_tenant(session, tenant)
        row.max_concurrent_runs = max_concurrent
    name = definition or f"{tenant}-report"
    path = make_notebook(tmp_path / tenant / f"{name}.ipynb", nbcast={"name": name})
    publish(db, path, caller=Caller(tenant=tenant, user="t"), now=T0)
    clock = FixedClock(T0)
    return [run_now(db, clock, Caller(tenant=tenant, user="t"), name, {}) for _ in range(runs)]


def states(db: Database) -> dict[int, tuple[str, int]]:
    with db.session() as session:
        return {r.id: (r.state, r.attempt) for r in session.scalars(sa.select(Run))}


def test_claim_leases_with_a_fencing_token(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    queue = RunQueue(db, FixedClock(T0 + timedelta(seconds=1)), owner="w1")
    [lease] = queue.claim(5)
    assert (lease.run_id, lease.attempt, lease.owner) == (run_id, 1, "w1")
    assert lease.label == f"nbcast:default/default-report@manual-{run_id}"
    assert states(db)[run_id] == ("LEASED", 1)
    assert queue.claim(5) == []  # nothing left
    queue.start(lease)
    assert not queue.heartbeat(lease)
    queue.succeed(
        lease,
        artifact_sha256="a" * 64,
        duration_s=1.5,
        usage=[
            {
                "connection": "default",
                "rows": 3,
                "bytes": 100,
                "seconds": 0.1,
                "sql_sha256": "b" * 64,
            }
        ],
    )
    assert states(db)[run_id] == ("SUCCEEDED", 1)
    with db.session() as session:
        attempt = session.scalar(sa.select(RunAttempt))
        assert attempt is not None
        assert (attempt.outcome, attempt.worker, attempt.duration_s) == ("SUCCEEDED", "w1", 1.5)
        assert session.scalar(sa.select(sa.func.sum(WarehouseUsage.bytes))) == 100


def test_a_late_completion_from_a_lost_attempt_is_rejected(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    clock = FixedClock(T0 + timedelta(seconds=1))
    dead = RunQueue(db, clock, owner="dead", lease_seconds=10, backoff_base=0.0)
    [old] = dead.claim()
    dead.start(old)
    clock.advance(30)  # the lease expires
    alive = RunQueue(db, clock, owner="alive", backoff_base=0.0)
    assert alive.reap() == 1
    assert states(db)[run_id] == ("QUEUED", 1)
    [new] = alive.claim()
    assert new.attempt == 2
    with pytest.raises(LeaseLostError):
        dead.succeed(old, artifact_sha256=None, duration_s=1.0)
    with pytest.raises(LeaseLostError):
        dead.heartbeat(old)
    alive.start(new)
    alive.succeed(new, artifact_sha256=None, duration_s=1.0)
    with db.session() as session:
        outcomes = session.execute(
            sa.select(RunAttempt.attempt, RunAttempt.outcome).order_by(RunAttempt.attempt)
        ).all()
    assert [tuple(o) for o in outcomes] == [(1, "LOST"), (2, "SUCCEEDED")]
    assert states(db)[run_id] == ("SUCCEEDED", 2)


def test_batched_start_and_success_fence_each_attempt(db: Database, tmp_path: Path) -> None:
    """A batch where one lease was lost: that one is left out (start) or refused
    (success), and every other attempt in the batch is recorded."""
    run_ids = setup_tenant(db, tmp_path, "default", 3)
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w", lease_seconds=10, backoff_base=0.0)
    leases = queue.claim(3)
    assert sorted(lease.run_id for lease in leases) == run_ids
    thief = RunQueue(db, clock, owner="thief", backoff_base=0.0)
    with db.session() as session:  # the first run's lease expires and is taken over
        session.execute(
            sa.update(Run)
            .where(Run.id == leases[0].run_id)
            .values(lease_expires_at=T0 - timedelta(minutes=1))
        )
    assert thief.reap() == 1
    [stolen] = thief.claim(1)
    assert (stolen.run_id, stolen.attempt) == (leases[0].run_id, 2)
    started = queue.start_many(leases)
    assert [(s.run_id, s.attempt) for s in started] == [(s.run_id, s.attempt) for s in leases[1:]]
    assert all(s.context is not None and s.context["kind"] == s.kind for s in started)
    thief.start(stolen)
    refused = queue.succeed_many(
        [Success(lease=lease, artifact_sha256="c" * 64, duration_s=0.5) for lease in leases]
    )
    assert [s.lease for s in refused] == leases[:1]
    assert {r: states(db)[r] for r in run_ids} == {
        leases[0].run_id: ("RUNNING", 2),
        leases[1].run_id: ("SUCCEEDED", 1),
        leases[2].run_id: ("SUCCEEDED", 1),
    }
    with db.session() as session:
        attempts = {
            (a.run_id, a.attempt): (a.outcome, a.artifact_sha256, a.duration_s)
            for a in session.scalars(sa.select(RunAttempt))
        }
    assert attempts == {
        (leases[0].run_id, 1): ("LOST", None, None),
        (leases[0].run_id, 2): (None, None, None),
        (leases[1].run_id, 1): ("SUCCEEDED", "c" * 64, 0.5),
        (leases[2].run_id, 1): ("SUCCEEDED", "c" * 64, 0.5),
    }
    with db.session() as session:  # handed to the delivery plane in the same transaction
        handed = set(session.scalars(sa.select(OutboxRow.run_id)))
    assert handed == {leases[1].run_id, leases[2].run_id}
    assert queue.start_many([]) == []
    assert queue.succeed_many([]) == []


def test_a_lease_records_when_it_was_granted(db: Database, tmp_path: Path) -> None:
    """The lease's start and expiry follow the queue's clock, on both back ends."""
    setup_tenant(db, tmp_path, "default", 1)
    clock = FixedClock(T0 + timedelta(seconds=5))
    [lease] = RunQueue(db, clock, owner="w", lease_seconds=12).claim()
    assert lease.expires_at == T0 + timedelta(seconds=17)
    with db.session() as session:
        attempt = session.scalar(sa.select(RunAttempt))
        run = session.get(Run, lease.run_id)
    assert attempt is not None
    assert attempt.started_at == T0 + timedelta(seconds=5)
    assert run is not None
    assert run.lease_expires_at == lease.expires_at


def test_concurrency_quota_is_never_exceeded(db: Database, tmp_path: Path) -> None:
    setup_tenant(db, tmp_path, "default", 10, max_concurrent=3)
    queue = RunQueue(db, FixedClock(T0 + timedelta(seconds=1)), owner="w")
    assert len(queue.claim(10)) == 3
    assert queue.claim(10) == []
    assert sum(1 for s, _ in states(db).values() if s == "LEASED") == 3


def test_fair_share_serves_the_small_tenant_first(db: Database, tmp_path: Path) -> None:
    setup_tenant(db, tmp_path, "big", 200, max_concurrent=50)
    [small] = setup_tenant(db, tmp_path, "small", 1, max_concurrent=50)
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w")
    first = queue.claim(10)
    assert small in {lease.run_id for lease in first}
    assert {lease.tenant for lease in first} == {"big", "small"}


def test_failures_retry_with_backoff_then_fail(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    with db.session() as session:
        tenant = session.scalar(sa.select(Tenant).where(Tenant.name == "default"))
        assert tenant is not None
        tenant.max_attempts = 2
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w", backoff_base=60.0)
    error = {"cell_index": 2, "ename": "ValueError", "evalue": "bad", "traceback": []}
    [lease] = queue.claim()
    queue.start(lease)
    assert queue.fail(lease, error) is RunState.QUEUED
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert run.reason == "retry"
        assert T0 < run.not_before <= clock.now() + timedelta(seconds=60)
        assert run.error == error
    clock.advance(61)
    [again] = queue.claim()
    assert again.attempt == 2
    queue.start(again)
    assert queue.fail(again, error) is RunState.FAILED
    assert states(db)[run_id] == ("FAILED", 2)


def test_timeouts_are_not_retried(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    queue = RunQueue(db, FixedClock(T0 + timedelta(seconds=1)), owner="w")
    [lease] = queue.claim()
    queue.start(lease)
    assert (
        queue.fail(lease, {"message": "over 5 s"}, outcome=RunState.TIMED_OUT) is RunState.TIMED_OUT
    )
    assert states(db)[run_id] == ("TIMED_OUT", 1)


def test_the_reaper_fails_runs_out_of_attempts(db: Database, tmp_path: Path) -> None:
    [run_id] = setup_tenant(db, tmp_path, "default", 1)
    with db.session() as session:
        tenant = session.scalar(sa.select(Tenant).where(Tenant.name == "default"))
        assert tenant is not None
        tenant.max_attempts = 1
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w", lease_seconds=5)
    queue.claim()
    clock.advance(10)
    assert queue.reap() == 1
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        assert (run.state, run.reason) == ("FAILED", "lease_expired")


def test_cancel_requests_stop_queued_runs_and_flag_running_ones(
    db: Database, tmp_path: Path
) -> None:
    first, second = setup_tenant(db, tmp_path, "default", 2)
    clock = FixedClock(T0 + timedelta(seconds=1))
    queue = RunQueue(db, clock, owner="w")
    [lease] = queue.claim(1)
    with db.session() as session:
        for run_id in (first, second):
            session.add(
                CancelRequest(
                    tenant_id=1,
                    run_id=run_id,
                    reason="cancel",
                    requested_by="ana",
                    requested_at=clock.now(),
                )
            )
    assert queue.heartbeat(lease) is True  # the running one is told
    assert queue.cancel_queued() == 1
    assert states(db)[second if lease.run_id == first else first][0] == "CANCELLED"


@pytest.mark.parametrize("spent", ["bytes", "cpu"])
def test_a_spent_daily_budget_holds_runs_until_the_next_day(
    db: Database, tmp_path: Path, spent: str
) -> None:
    """Spent bytes or CPU of the UTC day: nothing leased, the due runs wait QUEUED with
    reason budget; the next day they are leased, with the bytes left on the lease."""
    from nbcast.tenancy.models import TenantUsageDay

    setup_tenant(db, tmp_path, "default", 2)
    setup_tenant(db, tmp_path, "other", 1)
    clock = FixedClock(T0 + timedelta(seconds=1))
    with db.session() as session:
        tenant = session.scalar(sa.select(Tenant).where(Tenant.name == "default"))
        assert tenant is not None
        tenant.budget_warehouse_bytes_per_day = 1000
        tenant.budget_cpu_s_per_day = 60.0
        session.add(
            TenantUsageDay(
                tenant_id=tenant.id,
                day=clock.now().date(),
                cpu_s=60.0 if spent == "cpu" else 1.0,
                warehouse_bytes=1000 if spent == "bytes" else 400,
                attempts=3,
            )
        )
    queue = RunQueue(db, clock, owner="w")
    leased = queue.claim(5)
    assert [lease.tenant for lease in leased] == ["other"]  # the other tenant is untouched
    assert queue.last_claim.budget_held == 2
    assert queue.claim(5) == []
    assert queue.last_claim.budget_held == 0  # marked once
    with db.session() as session:
        held = session.execute(
            sa.select(Run.state, Run.reason).where(Run.tenant_id == tenant.id)
        ).all()
    assert [tuple(r) for r in held] == [("QUEUED", "budget"), ("QUEUED", "budget")]
    tomorrow = RunQueue(db, FixedClock(T0 + timedelta(days=1)), owner="w")
    leases = tomorrow.claim(5)
    assert sorted(lease.tenant for lease in leases) == ["default", "default"]
    assert {lease.budget_bytes_left for lease in leases} == {1000}  # a new day's budget
    with db.session() as session:
        reasons = session.scalars(sa.select(Run.reason).where(Run.tenant_id == tenant.id)).all()
    assert reasons == [None, None]


def test_a_lease_carries_the_bytes_left_of_the_day(db: Database, tmp_path: Path) -> None:
    from nbcast.tenancy.models import TenantUsageDay

    setup_tenant(db, tmp_path, "default", 1)
    clock = FixedClock(T0 + timedelta(seconds=1))
    with db.session() as session:
        tenant = session.scalar(sa.select(Tenant).where(Tenant.name == "default"))
        assert tenant is not None
        tenant.budget_warehouse_bytes_per_day = 1000
        session.add(
            TenantUsageDay(
                tenant_id=tenant.id, day=clock.now().date(), cpu_s=0, warehouse_bytes=300
            )
        )
    (lease,) = RunQueue(db, clock, owner="w").claim(5)
    assert lease.budget_bytes_left == 700
    job = lease.job(work_dir=str(tmp_path), artifacts=str(tmp_path / "a"))
    assert job.budget_bytes_left == 700


def test_serial_runs_of_one_definition_run_one_at_a_time(db: Database, tmp_path: Path) -> None:
    setup_tenant(db, tmp_path, "default", 0)
    with db.session() as session:
        template = {
            "tenant_id": 1,
            "definition_id": 1,
            "version_id": 1,
            "version": 1,
            "kind": "scheduled",
            "fire_at": T0,
            "state": "QUEUED",
            "parameters": {},
            "serial": True,
            "not_before": T0,
            "created_at": T0,
        }
        for i in range(3):
            session.add(Run(slot_key=f"2026-06-01T0{i}:00", **template))
    queue = RunQueue(db, FixedClock(T0 + timedelta(seconds=1)), owner="w")
    [lease] = queue.claim(3)
    assert queue.claim(3) == []
    queue.start(lease)
    queue.succeed(lease, artifact_sha256=None, duration_s=0.1)
    assert len(queue.claim(3)) == 1


def test_backoff_grows_and_is_capped() -> None:
    import random

    from nbcast.retry import backoff

    rng = random.Random(1)
    samples = [backoff(n, base=10, cap=100, rng=rng).total_seconds() for n in range(1, 9)]
    assert all(0 <= s <= 100 for s in samples)
    assert max(backoff(1, base=10, cap=100, rng=rng).total_seconds() for _ in range(50)) <= 10
