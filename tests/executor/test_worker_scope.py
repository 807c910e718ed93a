"""Which tenants a worker serves (issue 20, items 1 and 3): a dedicated worker
(``--tenant``) claims only its tenants' runs, on both back ends; a machine that cannot
sandbox makes the worker say so in one line and serve only its operator's tenants;
``--sandbox off`` is said in the log and in the worker's heartbeat."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.worker_scope import worker_scope
from nbcast.heartbeats import ServiceHeartbeat
from nbcast.sandbox.policy import SandboxSetting
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import ensure_tenant
from tests.executor.test_worker import make_worker, run_state
from tests.notebooks import make_notebook

BIN = Path(sys.executable).parent


def queue_one(db: Database, tmp_path: Path, tenant: str) -> int:
    with db.session() as session:
        ensure_tenant(session, tenant)
    path = make_notebook(tmp_path / tenant / "r.ipynb", body="print(region)", nbcast={"name": "r"})
    publish(db, path, caller=Caller(tenant=tenant, user="t"))
    return run_now(db, SystemClock(), Caller(tenant=tenant, user="t"), "r", {})


def test_a_dedicated_worker_claims_only_its_tenants_runs(db: Database, tmp_path: Path) -> None:
    runs = {tenant: queue_one(db, tmp_path, tenant) for tenant in ("acme", "globex", "initech")}
    scope = worker_scope(
        db,
        setting=SandboxSetting.on,
        user="t",
        tenants=["acme", "initech"],
        work_dir=str(tmp_path / "runs"),
        artifacts=str(tmp_path / "artifacts"),
        home=str(tmp_path / "home"),
    )
    assert scope.sandbox is not None
    with LocalEngine(capacity=2, pool_size=1) as engine:
        worker = make_worker(db, tmp_path, engine, sandbox=scope.sandbox, tenants=scope.tenants)
        stats = worker.run(exit_when_idle=True)  # ends although globex's run is due
    states = {tenant: run_state(db, run).state for tenant, run in runs.items()}
    assert states == {"acme": "SUCCEEDED", "globex": "QUEUED", "initech": "SUCCEEDED"}
    assert stats.claimed == 2


def cli(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(BIN / "nbcast"), *argv], env=env, capture_output=True, text=True, timeout=300
    )


@pytest.fixture
def home_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NBCAST_DATABASE_URL"}
    env.update(NBCAST_HOME=str(tmp_path / "home"), NBCAST_USER="ops")
    return env


def publish_and_run(env: dict[str, str], tmp_path: Path, tenant: str) -> None:
    notebook = make_notebook(
        tmp_path / f"{tenant}.ipynb", body="print(region)", nbcast={"name": "r"}
    )
    for argv in (["publish", str(notebook)], ["run", "r"]):
        done = cli({**env, "NBCAST_TENANT": tenant}, *argv)
        assert done.returncode == 0, done.stderr


def states(home: Path) -> dict[str, str]:
    engine = sa.create_engine(f"sqlite:///{home / 'nbcast.db'}")
    with engine.connect() as conn:
        rows = conn.execute(
            sa.text("SELECT t.name, r.state FROM runs r JOIN tenants t ON t.id = r.tenant_id")
        ).all()
    engine.dispose()
    return {name: state for name, state in rows}


def test_a_worker_that_cannot_sandbox_serves_only_its_operators_tenants(
    home_env: dict[str, str], tmp_path: Path
) -> None:
    publish_and_run(home_env, tmp_path, "default")  # ops acts first: the default's admin
    cli(home_env, "tenants", "create", "acme", "--admin", "ada")
    publish_and_run({**home_env, "NBCAST_USER": "ada"}, tmp_path, "acme")
    broken = {**home_env, "NBCAST_BWRAP": "/nonexistent/bwrap"}
    done = cli(broken, "worker", "--exit-when-idle")
    assert done.returncode == 0, done.stderr
    notice = [line for line in done.stderr.splitlines() if line.startswith("nbcast worker:")]
    assert notice == [
        "nbcast worker: cannot sandbox reports here (NBCAST_BWRAP=/nonexistent/bwrap is not "
        "an executable): running only the tenants 'ops' administers; --sandbox off runs every "
        "tenant unsandboxed"
    ]
    assert states(Path(home_env["NBCAST_HOME"])) == {"default": "SUCCEEDED", "acme": "QUEUED"}
    refused = cli({**broken, "NBCAST_USER": "nobody-here"}, "worker", "--exit-when-idle")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: this machine cannot sandbox reports")
    assert len(refused.stderr.strip().splitlines()) == 1


def test_sandbox_off_is_said_in_the_log_and_the_heartbeat(
    home_env: dict[str, str], tmp_path: Path
) -> None:
    publish_and_run(home_env, tmp_path, "default")
    done = cli(home_env, "worker", "--exit-when-idle", "--sandbox", "off")
    assert done.returncode == 0, done.stderr
    assert "the sandbox is OFF" in done.stderr
    db = Database.open(f"sqlite:///{Path(home_env['NBCAST_HOME']) / 'nbcast.db'}")
    with db.session() as session:
        beat = session.scalars(
            sa.select(ServiceHeartbeat).where(ServiceHeartbeat.kind == "worker")
        ).one()
        assert beat.detail is not None
        assert beat.detail["sandbox"] == "off"
    db.dispose()


def test_a_tenant_that_does_not_exist_is_one_error_line(home_env: dict[str, str]) -> None:
    done = cli(home_env, "worker", "--tenant", "nosuch", "--exit-when-idle")
    assert done.returncode == 2
    assert done.stderr.strip().splitlines()[-1] == "error: --tenant: no tenant 'nosuch'"
    assert "Traceback" not in done.stderr
