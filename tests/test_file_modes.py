"""Everything nbcast, its workers and their kernels write under the home folder is
private to its user: after a publish, a run (its kernel writes the notebook and the
run context) and a delivery worker's renditions, no file or folder in the home is
readable by group or others — whatever the caller's umask was."""

from __future__ import annotations

import contextlib
import json
import os
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from nbcast.access import Caller
from nbcast.artifacts import open_store
from nbcast.clock import SystemClock
from nbcast.config import prepare_home
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.attempt import AttemptJob, AttemptReport
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.worker import Worker, default_work_dir
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run, RunState
from tests.notebooks import make_notebook

NBCAST = [sys.executable, "-m", "nbcast"]


def test_every_file_a_run_leaves_in_the_home_is_private(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {**os.environ, "NBCAST_HOME": str(home)}
    env.pop("NBCAST_DATABASE_URL", None)
    path = make_notebook(
        tmp_path / "r.ipynb",
        body="open('written-by-the-kernel.txt', 'w').write(region)\nprint(region)",
        nbcast={"name": "r", "outputs": ["html", "csv"]},
    )
    previous = os.umask(0o022)  # a usual umask: nbcast must not depend on the caller's
    try:
        for argv in (
            ["publish", str(path)],
            ["run", "r"],
            ["worker", "--exit-when-idle", "--no-warm-kernels"],
            ["delivery-worker", "--exit-when-idle"],
            ["runs", "list"],
        ):
            done = subprocess.run(
                [*NBCAST, *argv], env=env, capture_output=True, text=True, timeout=300
            )
            assert done.returncode == 0, (argv, done.stderr)
    finally:
        os.umask(previous)
    assert "SUCCEEDED" in done.stdout
    seen = list(home.rglob("*"))
    assert any(p.name == "nbcast.db" for p in seen)
    assert any("artifacts" in p.parts and p.is_file() for p in seen)
    exposed = [
        (str(p.relative_to(home)), oct(p.stat().st_mode & 0o777))
        for p in [home, *seen]
        if not p.is_symlink() and p.stat().st_mode & (stat.S_IRWXG | stat.S_IRWXO)
    ]
    assert exposed == []


# -- the run folder while its notebook runs, under a worker's permissive umask ---------

RECORD_MODES = """\
import json, os, stat
from ipykernel.connect import get_connection_file

def mode(path):
    return oct(stat.S_IMODE(os.stat(path).st_mode))

open('written-by-the-report.txt', 'w').write('x')
modes = {name: mode(name) for name in sorted(os.listdir('.'))}
modes['<run folder>'] = mode('.')
modes['<runs folder>'] = mode('..')
modes['<kernel connection file>'] = mode(get_connection_file())
here = os.path.basename(os.getcwd())
modes['<beside it>'] = ' '.join(name for name in sorted(os.listdir('..')) if name != here)
print(json.dumps(modes))
"""
"""A report that records, while it runs, the mode of its working folder, of the folder
above it and of every file in it (and of its kernel's connection file)."""

RUN_FOLDER_FILES = {
    "input.ipynb",
    "output.ipynb",
    "run-context.json",
    "warehouse-usage.jsonl",
    "written-by-the-report.txt",
}


def recorded_modes(executed: dict[str, Any]) -> dict[str, str]:
    """The modes :data:`RECORD_MODES` printed into an executed notebook."""
    [text] = [
        "".join(output["text"])
        for cell in executed["cells"]
        for output in cell.get("outputs", [])
        if output.get("name") == "stdout"
    ]
    modes: dict[str, str] = json.loads(text)
    return modes


SANDBOXED_RUN_FOLDER_FILES = {
    "kernel.json",
    "run-context.json",
    "warehouse-usage.jsonl",
    "written-by-the-report.txt",
}
"""In a sandbox the notebooks stay in the worker's own folder, which the kernel never
sees; its run folder holds what it reads and writes, and its sockets (``k-<n>``)."""


def assert_private(modes: dict[str, str]) -> None:
    assert set(modes) >= RUN_FOLDER_FILES, modes
    folders = {"<run folder>", "<runs folder>"}
    assert {name: modes[name] for name in folders} == dict.fromkeys(folders, "0o700")
    files = {name: mode for name, mode in modes.items() if name not in (*folders, "<beside it>")}
    assert files == dict.fromkeys(files, "0o600")


def assert_private_in_a_sandbox(modes: dict[str, str]) -> None:
    """The run folder and everything in it is the tenant's alone; nothing is beside it."""
    assert set(modes) >= SANDBOXED_RUN_FOLDER_FILES, modes
    assert not set(modes) & {"input.ipynb", "output.ipynb"}
    # jupyter_client sets the sticky bit on the folder of a connection file
    assert int(modes["<run folder>"], 8) & 0o777 == 0o700
    assert modes["<beside it>"] == ""
    sockets = {name for name in modes if name.startswith("k-")}
    assert len(sockets) == 5
    assert {modes[name] for name in sockets} == {"0o700"}  # a socket: 0777 less the umask
    files = set(modes) - sockets - {"<run folder>", "<runs folder>", "<beside it>"}
    assert {name: modes[name] for name in files} == dict.fromkeys(files, "0o600")


@contextlib.contextmanager
def permissive_umask() -> Iterator[None]:
    previous = os.umask(0o022)  # not the nbcast command's 077: the worker's own
    try:
        yield
    finally:
        os.umask(previous)


@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_run_folder_is_private_while_its_notebook_runs(tmp_path: Path, sandbox: str) -> None:
    """The local engine, in a worker that did not set a private umask: the home's
    ``runs/`` it creates, the run folder and its files are private all the same."""
    home = prepare_home(tmp_path / "home")
    db = Database.open(f"sqlite:///{home / 'nbcast.db'}")
    path = make_notebook(tmp_path / "modes.ipynb", body=RECORD_MODES, nbcast={"name": "modes"})
    publish(db, path, caller=Caller(tenant="default", user="t"))
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "modes", {})
    with permissive_umask(), LocalEngine(capacity=1, pool_size=1) as engine:
        worker = Worker(
            db,
            SystemClock(),
            engine,
            name="umask-022",
            artifacts=str(home / "artifacts"),
            work_dir=default_work_dir(home),
            sandbox=sandbox == "on",
        )
        worker.run(exit_when_idle=True)
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        state, sha = run.state, run.artifact_sha256
    db.dispose()
    assert state == "SUCCEEDED"
    assert sha is not None
    modes = recorded_modes(json.loads(open_store(str(home / "artifacts")).get(sha)))
    if sandbox == "on":
        assert_private_in_a_sandbox(modes)
        assert stat.S_IMODE((home / "runs").stat().st_mode) == 0o700  # the notebooks' folder
    else:
        assert_private(modes)


@pytest.mark.ray
@pytest.mark.slow
def test_a_run_folder_is_private_in_a_ray_worker(ray_cluster: str, tmp_path: Path) -> None:
    """An attempt in a Ray worker of an outside ``ray start``, whose umask is raylet's:
    here ``022``, set in the task before the attempt starts."""
    import ray

    from nbcast.executor.engines.ray import _run_in_ray

    home = prepare_home(tmp_path / "home")
    notebook = make_notebook(tmp_path / "modes.ipynb", body=RECORD_MODES).read_text()
    job = AttemptJob(
        run_id=1,
        attempt=1,
        tenant="default",
        definition="modes",
        label="modes",
        notebook_json=notebook,
        parameters={},
        timeout_s=120,
        work_dir=default_work_dir(home),
        artifacts=str(home / "artifacts"),
    )

    def under_permissive_umask(job: AttemptJob) -> AttemptReport:
        os.umask(0o022)
        return _run_in_ray(job)

    ray.init(address=ray_cluster, namespace="nbcast-test-modes", log_to_driver=False)
    try:
        task = ray.remote(max_retries=0)(under_permissive_umask)
        outcome = ray.get(task.remote(job), timeout=240)
    finally:
        ray.shutdown()
    assert outcome.state is RunState.SUCCEEDED, outcome.error
    assert outcome.artifact_sha256 is not None
    stored = open_store(str(home / "artifacts")).get(outcome.artifact_sha256)
    assert_private(recorded_modes(json.loads(stored)))
