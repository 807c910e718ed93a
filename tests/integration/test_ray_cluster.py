"""The Ray engine on a real two-node Ray cluster on this machine."""

from __future__ import annotations

import json
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
from nbcast.executor.models import RunAttempt
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.tenants import get_tenant, set_quota
from tests.notebooks import make_notebook

pytestmark = [pytest.mark.postgres, pytest.mark.ray, pytest.mark.slow]


def test_runs_run_on_both_nodes(ray_cluster: str, pg_url: str, tmp_path: Path) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    with db.session() as session:
        set_quota(session, "default", max_concurrent_runs=2, cpus_per_run=1, memory_mb_per_run=256)
        # The test cluster asks for no token: a sandboxed report on the host's network
        # could submit jobs to it, so such a tenant is refused (nbcast.executor.engines.ray).
        get_tenant(session, "default").sandbox_network = "none"
    path = make_notebook(
        tmp_path / "nap.ipynb",
        parameters="seconds = 4\n",
        body="import time, socket\ntime.sleep(seconds)",
        nbcast={"name": "nap"},
    )
    publish(db, path, caller=Caller(tenant="default", user="t"))
    ids = [
        run_now(db, SystemClock(), Caller(tenant="default", user="t"), "nap", {}) for _ in range(4)
    ]
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


def test_ray_tasks_run_on_kernels_forked_from_a_zygote(ray_cluster: str, tmp_path: Path) -> None:
    """Inside Ray workers a run's kernel is forked by the worker's zygote (the default)."""
    import nbformat
    import ray

    from nbcast.artifacts import open_store
    from nbcast.executor.attempt import AttemptJob
    from nbcast.executor.engines.ray import _run_in_ray
    from nbcast.scheduler.models import RunState

    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "language": "python", "display_name": "Py"}
    nb.cells = [
        nbformat.v4.new_code_cell("n = 0", metadata={"tags": ["parameters"]}),
        nbformat.v4.new_code_cell(
            "import os\nparent = open(f'/proc/{os.getppid()}/cmdline').read()\n"
            "print(n, 'nbcast.executor.kernels.zygote_server' in parent)"
        ),
    ]
    jobs = [
        AttemptJob(
            run_id=i,
            attempt=1,
            tenant="default",
            definition="forked",
            label=f"forked-{i}",
            notebook_json=nbformat.writes(nb),
            parameters={"n": i},
            timeout_s=60,
            work_dir=str(tmp_path / "runs"),
            artifacts=str(tmp_path / "artifacts"),
        )
        for i in range(4)
    ]
    ray.init(address=ray_cluster, namespace="nbcast-test-forked", log_to_driver=False)
    try:
        task = ray.remote(max_retries=0)(_run_in_ray)
        outcomes = ray.get([task.remote(job) for job in jobs], timeout=240)
    finally:
        ray.shutdown()
    store = open_store(str(tmp_path / "artifacts"))
    for i, outcome in enumerate(outcomes):
        assert outcome.state is RunState.SUCCEEDED, outcome.error
        assert outcome.artifact_sha256 is not None
        executed = json.loads(store.get(outcome.artifact_sha256))
        assert "".join(executed["cells"][-1]["outputs"][0]["text"]) == f"{i} True\n"
