"""Concurrency quotas under contention: several claimer processes on PostgreSQL.

Four processes claim from a mixed backlog of three tenants as fast as they can,
hold each lease briefly and complete it. A fifth connection samples the number of
live runs per tenant the whole time (each sample is one consistent snapshot), and
the attempts table is swept afterwards: no tenant ever exceeds its quota. The small
tenant's single run is leased in the first claim round.
"""

from __future__ import annotations

import multiprocessing
import random
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.models import RunAttempt
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

QUOTAS = {"big": 3, "medium": 2, "small": 1}
BACKLOG = {"big": 150, "medium": 60, "small": 1}


def _claimer(url: str, name: str, seed: int) -> None:
    db = Database.open(url, upgrade=False)
    queue = RunQueue(db, SystemClock(), owner=name)
    rng = random.Random(seed)
    idle = 0
    while idle < 20:
        leases = queue.claim(2)
        if not leases:
            idle += 1
            time.sleep(0.01)
            continue
        idle = 0
        for lease in leases:
            queue.start(lease)
        time.sleep(rng.uniform(0.002, 0.02))
        for lease in leases:
            queue.succeed(lease, artifact_sha256=None, duration_s=0.01)
    db.dispose()


def _max_overlap(intervals: list[tuple[datetime, datetime]]) -> int:
    events = sorted(
        [(s, 1) for s, _ in intervals] + [(e, -1) for _, e in intervals], key=lambda x: (x[0], x[1])
    )  # ends before starts at the same instant
    current = peak = 0
    for _, delta in events:
        current += delta
        peak = max(peak, current)
    return peak


def test_quotas_hold_with_four_claimers(pg_url: str, tmp_path: Path) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    for tenant, quota in QUOTAS.items():
        with db.session() as session:
            ensure_tenant(session, tenant).max_concurrent_runs = quota
        path = make_notebook(tmp_path / f"{tenant}.ipynb", nbcast={"name": f"{tenant}-r"})
        publish(db, path, caller=Caller(tenant=tenant, user="t"))
        for _ in range(BACKLOG[tenant]):
            run_now(db, SystemClock(), Caller(tenant=tenant, user="t"), f"{tenant}-r", {})

    first_round = RunQueue(db, SystemClock(), owner="probe").claim(4)
    assert "small" in {lease.tenant for lease in first_round}  # fair share: at once
    for lease in first_round:
        RunQueue(db, SystemClock(), owner="probe").succeed(
            lease, artifact_sha256=None, duration_s=0.0
        )

    samples: list[dict[str, int]] = []
    stop = threading.Event()

    def sample() -> None:
        with db.engine.connect() as conn:
            while not stop.is_set():
                rows = conn.execute(
                    sa.text(
                        "SELECT t.name, count(*) FROM runs r JOIN tenants t ON t.id = r.tenant_id "
                        "WHERE r.state IN ('LEASED', 'RUNNING') GROUP BY t.name"
                    )
                ).all()
                conn.commit()
                samples.append(dict(rows))  # type: ignore[arg-type]
                time.sleep(0.002)

    sampler = threading.Thread(target=sample)
    sampler.start()
    context = multiprocessing.get_context("spawn")
    procs = [context.Process(target=_claimer, args=(pg_url, f"claimer-{i}", i)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=300)
    stop.set()
    sampler.join()
    assert all(p.exitcode == 0 for p in procs)

    with db.session() as session:
        assert (
            session.scalar(
                sa.select(sa.func.count()).select_from(Run).where(Run.state != "SUCCEEDED")
            )
            == 0
        )
        attempts = session.execute(
            sa.select(
                Tenant.name, RunAttempt.started_at, RunAttempt.ended_at, RunAttempt.worker
            ).join(Tenant, Tenant.id == RunAttempt.tenant_id)
        ).all()
    assert len(samples) > 50
    for tenant, quota in QUOTAS.items():
        assert max(s.get(tenant, 0) for s in samples) <= quota, tenant
        intervals = [(s, e) for t, s, e, _ in attempts if t == tenant]
        assert _max_overlap(intervals) <= quota, tenant
    assert max(s.get("big", 0) for s in samples) == QUOTAS["big"]  # quotas were reached
    assert len({w for *_, w in attempts}) >= 4  # every claimer worked
    assert all(s.tzinfo == UTC for _, s, _, _ in attempts)
    db.dispose()
