"""The Ray engine on a real two-node Ray cluster on this machine."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.models import Run, RunAttempt
from nbcast.governance.tenants import set_quota
from nbcast.scheduler.control import run_now
from tests.notebooks import make_notebook

pytestmark = [pytest.mark.postgres, pytest.mark.ray, pytest.mark.slow]


def test_runs_run_on_both_nodes(ray_cluster: str, pg_url: str, tmp_path: Path) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    with db.session() as session:
        set_quota(session, "default", max_concurrent_runs=2, cpus_per_run=1, memory_mb_per_run=256)
    path = make_notebook(
        tmp_path / "nap.ipynb",
        parameters="seconds = 4\n",
        body="import time, socket\ntime.sleep(seconds)",
        nbcast={"name": "nap"},
    )
    publish(db, path, tenant="default", author="t")
    ids = [run_now(db, SystemClock(), "default", "nap", {}) for _ in range(4)]
    env = {
        **os.environ,
        "NBCAST_DATABASE_URL": pg_url,
        "NBCAST_HOME": str(tmp_path / "home"),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "nbcast",
            "worker",
            "--engine",
            "ray",
            "--ray-address",
            ray_cluster,
            "--concurrency",
            "2",
            "--exit-when-idle",
            "--name",
            "ray-worker",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    with db.session() as session:
        states = session.scalars(sa.select(Run.state).where(Run.id.in_(ids))).all()
        hosts = session.scalars(sa.select(RunAttempt.host)).all()
    assert states == ["SUCCEEDED"] * 4
    nodes = {h.split("/", 1)[1] for h in hosts}
    assert len(nodes) == 2, hosts  # one CPU per node, two at once: both nodes ran runs
    assert all(h.split("/", 1)[1].startswith("ray-node-") for h in hosts)
    db.dispose()
