"""What a hostile review of the sandbox found, each closed: memory outside ``RLIMIT_DATA``
(shared memory, ``memfd``) bounded without a cgroup; the worker's working directory and
script folder not shown; the worker's other variables kept from kernels; folders the
sandbox must hide made before any sandbox shows their parent; a usage file that would
crash the parser read safely."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbcast.executor.kernels.sandboxed import sandbox_environment
from nbcast.executor.storable import read_usage_file
from nbcast.sandbox.launcher import Sandbox
from nbcast.sandbox.limits import resource_limits
from nbcast.sandbox.policy import SandboxSpec, default_template

UID = 1_500_009_002
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def folder() -> Iterator[Path]:
    root = Path(tempfile.mkdtemp(prefix="nbsb-"))
    made = root / "run"
    made.mkdir(mode=0o700)
    os.chown(made, UID, UID)
    yield made
    subprocess.run(["rm", "-rf", str(root)], check=False)


GROW = """
import mmap, os, sys
kind, megabytes = sys.argv[1], int(sys.argv[2])
chunk = b"x" * (1 << 20)
try:
    if kind == "memfd":
        fd = os.memfd_create("grow")
        for _ in range(megabytes):
            os.write(fd, chunk)
    else:
        area = mmap.mmap(-1, megabytes << 20, flags=mmap.MAP_SHARED)
        for offset in range(0, megabytes << 20, 1 << 20):
            area[offset:offset + 1] = b"x"
    print("grew", megabytes)
except (OSError, MemoryError) as exc:
    print("stopped", type(exc).__name__)
"""


@pytest.mark.parametrize("kind", ["memfd", "shared"])
def test_memory_outside_rlimit_data_is_bounded_without_a_cgroup(folder: Path, kind: str) -> None:
    spec = SandboxSpec(tenant="acme", uid=UID, gid=UID, memory_mb=256)
    sandbox = Sandbox.start(spec, str(folder), mode="privileged")
    try:
        plan = sandbox.plan(limits=resource_limits(spec, mode="privileged", cgroup=False))
        done = subprocess.run(
            [sys.executable, "-I", "-m", "nbcast.sandbox.enter", json.dumps(plan), "--",
             sys.executable, "-c", GROW, kind, "1500"],
            capture_output=True,
            text=True,
            timeout=120,
        )  # fmt: skip
    finally:
        sandbox.kill()
    assert done.stdout.strip().startswith("stopped"), (done.stdout, done.stderr)


def test_the_workers_working_directory_and_script_folder_are_not_shown(tmp_path: Path) -> None:
    script = tmp_path / "scripts" / "driver.py"
    script.parent.mkdir()
    script.write_text(
        f"import sys, json; sys.path.insert(0, {str(REPO)!r})\n"
        "from nbcast.sandbox.view import python_paths\n"
        "print(json.dumps(python_paths()))\n"
    )
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    done = subprocess.run(
        [sys.executable, str(script)], cwd=cwd, capture_output=True, text=True, check=True
    )
    shown = json.loads(done.stdout)
    assert not [p for p in shown if p.startswith(str(tmp_path))], shown
    assert not [p for p in shown if os.path.expanduser("~").startswith(p + "/")]
    assert os.path.realpath(sys.base_prefix) in shown or any(
        os.path.realpath(sys.base_prefix).startswith(p + "/") for p in shown
    )


def test_a_kernel_gets_the_allowed_variables_only(monkeypatch: pytest.MonkeyPatch) -> None:
    spec = SandboxSpec(tenant="acme", uid=UID, gid=UID)
    worker = {
        "PATH": "/usr/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "NBCAST_LAKE": "/data/lake",
        "AWS_SECRET_ACCESS_KEY": "aws-secret",
        "GITHUB_TOKEN": "gh-secret",
        "DATABASE_URL": "postgresql://u:p@h/d",
        "REPORT_REGION": "EMEA",
        "NBCAST_SMTP_URL": "smtp://u:p@h",
    }
    monkeypatch.setenv("NBCAST_SANDBOX_ENV", "REPORT_REGION,NBCAST_SMTP_URL")
    env = sandbox_environment(worker, spec)
    assert {"PATH", "LANG", "LC_ALL", "NBCAST_LAKE", "REPORT_REGION"} <= set(env)
    assert not {"AWS_SECRET_ACCESS_KEY", "GITHUB_TOKEN", "DATABASE_URL", "NBCAST_SMTP_URL"} & set(
        env
    )
    assert (env["HOME"], env["USER"]) == ("/tmp", "nbcast-acme")


def test_the_folders_a_sandbox_hides_exist_before_any_sandbox(tmp_path: Path) -> None:
    home, runs, artifacts = tmp_path / "home", tmp_path / "runs", tmp_path / "store"
    template = default_template(work_dir=str(runs), artifacts=str(artifacts), home=str(home))
    for folder in (home, runs, artifacts):
        assert folder.is_dir()
        assert str(folder) in template.hidden


def test_a_usage_file_that_would_crash_the_parser_is_read_safely(tmp_path: Path) -> None:
    usage = tmp_path / "warehouse-usage.jsonl"
    record = {"connection": "default", "rows": 3, "bytes": 10, "seconds": 0.1}
    usage.write_text("[" * 200_000 + "\n" + "x" * 100_000 + "\n" + json.dumps(record) + "\n")
    assert [item["rows"] for item in read_usage_file(usage)] == [3]
