"""Worker crashes: SIGKILL a worker mid-run, repeatedly, on the local and Ray engines.

Each time, the run's lease expires, the reaper returns it to the queue and the next
worker leases it with a new attempt number. At the end the run has exactly one
SUCCEEDED attempt, every earlier attempt is LOST, and a late completion from a dead
attempt is refused by fencing.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import LeaseLostError
from nbcast.executor.leases import Lease
from nbcast.executor.models import RunAttempt
from nbcast.executor.queue import RunQueue
from nbcast.executor.quotas import Quota
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.tenants import get_tenant, set_quota
from tests.notebooks import make_notebook

pytestmark = [pytest.mark.postgres, pytest.mark.slow]
KILLS = 3


def _worker(
    env: dict[str, str], engine: str, name: str, log: Path, ray_address: str | None
) -> subprocess.Popen[bytes]:
    argv = [
        sys.executable,
        "-m",
        "nbcast",
        "worker",
        "--engine",
        engine,
        "--concurrency",
        "1",
        "--lease-seconds",
        "2",
        "--name",
        name,
        "--exit-when-idle",
        "--retry-backoff",
        "0",
    ]
    if ray_address:
        argv += ["--ray-address", ray_address]
    return subprocess.Popen(argv, env=env, stdout=log.open("ab"), stderr=subprocess.STDOUT)


def _state(db: Database, run_id: int) -> tuple[str, int]:
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        return run.state, run.attempt


def _wait(predicate: object, timeout: float) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if predicate():  # type: ignore[operator]
            return
        time.sleep(0.1)
    raise AssertionError("timed out waiting")


@pytest.mark.parametrize("engine", ["local", "ray"])
def test_sigkilled_workers_leave_exactly_one_success(
    engine: str, pg_url: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    from tests.conftest import _reset_postgres

    ray_address = request.getfixturevalue("ray_cluster") if engine == "ray" else None
    db = Database.open(pg_url)
    _reset_postgres(db)
    with db.session() as session:
        set_quota(session, "default", max_attempts=KILLS + 2)
        get_tenant(session, "default").sandbox_network = "none"  # Ray without a token
    path = make_notebook(
        tmp_path / "slow.ipynb",
        parameters="seconds = 3\n",
        body="import time\ntime.sleep(seconds)\nprint('done')",
        nbcast={"name": "slow"},
    )
    publish(db, path, caller=Caller(tenant="default", user="t"))
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "slow", {})
    env = {
        **os.environ,
        "NBCAST_DATABASE_URL": pg_url,
        "NBCAST_HOME": str(tmp_path / "home"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    log = tmp_path / "workers.log"
    for kill in range(KILLS):
        proc = _worker(env, engine, f"doomed-{kill}", log, ray_address)
        _wait(lambda k=kill: _state(db, run_id) == ("RUNNING", k + 1), 120)
        time.sleep(1.0)  # mid-run
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert _state(db, run_id) == ("RUNNING", kill + 1)
    survivor = _worker(env, engine, "survivor", log, ray_address)
    try:
        survivor.wait(timeout=180)
    finally:
        if survivor.poll() is None:
            survivor.kill()
    assert survivor.returncode == 0, log.read_text()[-3000:]
    assert _state(db, run_id) == ("SUCCEEDED", KILLS + 1)
    with db.session() as session:
        outcomes = session.execute(
            sa.select(RunAttempt.attempt, RunAttempt.outcome, RunAttempt.worker)
            .where(RunAttempt.run_id == run_id)
            .order_by(RunAttempt.attempt)
        ).all()
    assert [o for _, o, _ in outcomes] == ["LOST"] * KILLS + ["SUCCEEDED"]
    assert [w for _, _, w in outcomes] == [f"doomed-{i}" for i in range(KILLS)] + ["survivor"]

    # A late completion from the first (dead) attempt is refused.
    dead = Lease(
        run_id=run_id,
        attempt=1,
        owner="doomed-0",
        expires_at=datetime.now(UTC),
        tenant_id=1,
        tenant="default",
        definition_id=1,
        definition="slow",
        version=1,
        slot_key=None,
        kind="manual",
        fire_at=datetime.now(UTC),
        parameters={},
        notebook_json="{}",
        quota=Quota(
            max_concurrent_runs=4,
            cpus_per_run=1,
            memory_mb_per_run=512,
            run_timeout_s=60,
            max_attempts=5,
        ),
    )
    with pytest.raises(LeaseLostError):
        RunQueue(db, SystemClock(), owner="doomed-0").succeed(
            dead, artifact_sha256=None, duration_s=1.0
        )
    assert _state(db, run_id) == ("SUCCEEDED", KILLS + 1)
    db.dispose()
