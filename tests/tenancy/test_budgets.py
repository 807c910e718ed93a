"""Cost attribution and daily budgets with real kernels on both back ends: an attempt
records the CPU seconds and peak memory its kernel used and adds them, with the bytes
its queries read, to its tenant's day; a query that would cross the day's warehouse
budget fails with QueryLimitExceeded (limit ``budget``); a tenant whose budget is spent
waits, reason ``budget``, while another tenant's runs go on (a run whose query was cut
off waits too, to try again with the next day's budget)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.models import RunAttempt
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.budgets import usage_day
from nbcast.tenancy.models import Tenant, TenantUsageDay
from nbcast.tenancy.tenants import ensure_tenant, set_quota
from tests.members import grant
from tests.notebooks import make_notebook
from tests.workers import work_until_idle

# About half a second of CPU in the kernel and a ~40 MB list, then a query over the lake.
BUSY = """
import time
began = time.process_time()
while time.process_time() - began < 0.5:
    sum(i * i for i in range(10_000))
ballast = [0] * 5_000_000
"""
QUERY = """
from nbcast import warehouse
frame = warehouse.query("select region, store_id, revenue from orders limit 20000")
print("ROWS", len(frame))
"""


def _define(db: Database, tmp_path: Path, tenant: str, name: str, body: str) -> None:
    path = make_notebook(tmp_path / tenant / f"{name}.ipynb", body=body, nbcast={"name": name})
    publish(db, path, caller=Caller(tenant=tenant, user="t"))


def _work(db: Database, tmp_path: Path, lake: Path) -> None:
    work_until_idle(
        db,
        artifacts=tmp_path / "artifacts",
        work_dir=tmp_path / "runs",
        name="budget-worker",
        capacity=2,
        pool_size=0,
        backoff_base=0.0,
        lake=str(lake),
    )


def _run(db: Database, run_id: int) -> tuple[Run, list[RunAttempt]]:
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        found = session.scalars(sa.select(RunAttempt).where(RunAttempt.run_id == run_id)).all()
        return run, list(found)


def _usage(db: Database, tenant: str) -> TenantUsageDay | None:
    with db.session() as session:
        owner = session.scalar(sa.select(Tenant).where(Tenant.name == tenant))
        assert owner is not None
        return session.get(TenantUsageDay, (owner.id, usage_day(SystemClock().now())))


@pytest.mark.timeout(240)
def test_an_attempt_records_what_its_kernel_used_and_adds_it_to_the_tenants_day(
    db: Database, tmp_path: Path, example_lake: Path
) -> None:
    _define(db, tmp_path, "default", "busy", BUSY + QUERY)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "busy", {})
    _work(db, tmp_path, example_lake)
    run, (attempt,) = _run(db, run_id)
    assert run.state == "SUCCEEDED", run.error
    assert attempt.cpu_s is not None
    assert attempt.cpu_s >= 0.5
    assert attempt.duration_s is not None
    assert attempt.cpu_s <= attempt.duration_s * 2 + 1
    assert attempt.peak_mem_mb is not None
    assert attempt.peak_mem_mb >= 40
    day = _usage(db, "default")
    assert day is not None
    assert day.attempts == 1
    assert day.cpu_s == pytest.approx(attempt.cpu_s)
    assert day.warehouse_bytes > 0  # the query's bytes count towards the day


@pytest.mark.timeout(300)
def test_a_query_past_the_days_budget_fails_and_the_tenant_then_waits_alone(
    db: Database, tmp_path: Path, example_lake: Path
) -> None:
    with db.session() as session:
        ensure_tenant(session, "acme")
        ensure_tenant(session, "globex")
        set_quota(session, "acme", budget_warehouse_bytes_per_day=50_000)
    grant(db, "acme", "t")
    grant(db, "globex", "t")
    _define(db, tmp_path, "acme", "scan", QUERY)
    _define(db, tmp_path, "globex", "scan", QUERY)
    first = run_now(db, SystemClock(), Caller(tenant="acme", user="t"), "scan", {})
    other = run_now(db, SystemClock(), Caller(tenant="globex", user="t"), "scan", {})
    _work(db, tmp_path, example_lake)

    # The attempt fails on the query; the run waits for tomorrow's budget to try again.
    run, (attempt,) = _run(db, first)
    assert (run.state, run.reason) == ("QUEUED", "budget")
    assert attempt.outcome == "FAILED"
    assert attempt.error is not None
    assert attempt.error["ename"] == "BudgetExhausted"  # a QueryLimitExceeded, retried
    assert "daily warehouse budget" in attempt.error["evalue"]
    assert _run(db, other)[0].state == "SUCCEEDED"  # the other tenant has no budget
    spent = _usage(db, "acme")
    assert spent is not None
    assert spent.warehouse_bytes > 50_000

    later = run_now(db, SystemClock(), Caller(tenant="acme", user="t"), "scan", {})
    again = run_now(db, SystemClock(), Caller(tenant="globex", user="t"), "scan", {})
    _work(db, tmp_path, example_lake)
    waiting, none = _run(db, later)
    assert (waiting.state, waiting.reason, none) == ("QUEUED", "budget", [])
    done = _run(db, again)[0]
    assert done.state == "SUCCEEDED"
    assert done.artifact_sha256 is not None
    executed = json.loads(LocalArtifactStore(tmp_path / "artifacts").get(done.artifact_sha256))
    printed = "".join(
        "".join(o.get("text", "")) for c in executed["cells"] for o in c.get("outputs", [])
    )
    assert "ROWS 20000" in printed
