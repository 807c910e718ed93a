"""``nbcast oversight`` as a process: the oversight layer's own service signs the audit
heads (into the database and ``NBCAST_AUDIT_EXPORT``), beats like every service and
stops on SIGTERM; the scheduler no longer does that work."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import sqlalchemy as sa

from tests.notebooks import make_notebook


def _count(home: Path, sql: str) -> int:
    engine = sa.create_engine(f"sqlite:///{home / 'nbcast.db'}")
    try:
        with engine.connect() as conn:
            return int(conn.execute(sa.text(sql)).scalar() or 0)
    finally:
        engine.dispose()


def _nbcast(env: dict[str, str], *argv: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nbcast", *argv],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def test_the_oversight_service_checkpoints_the_audit_log_and_the_scheduler_does_not(
    tmp_path: Path,
) -> None:
    home = tmp_path / "home"
    export = tmp_path / "elsewhere" / "checkpoints.jsonl"
    export.parent.mkdir()
    env = {k: v for k, v in os.environ.items() if k not in ("NBCAST_DATABASE_URL", "NBCAST_TENANT")}
    env.update(NBCAST_HOME=str(home), NBCAST_AUDIT_EXPORT=str(export))
    env["NBCAST_HEARTBEAT_SECONDS"] = "0.2"
    subprocess.run(
        [sys.executable, "-m", "nbcast", "publish", str(make_notebook(tmp_path / "a.ipynb"))],
        env=env,
        check=True,
        capture_output=True,
    )
    assert _count(home, "SELECT count(*) FROM audit_log") >= 1

    scheduler = _nbcast(env, "scheduler", "run", "--max-sleep", "0.2")
    try:
        deadline = time.monotonic() + 60
        while _count(home, "SELECT count(*) FROM service_heartbeats WHERE iterations > 2") < 1:
            assert scheduler.poll() is None, scheduler.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "the scheduler never beat"
            time.sleep(0.1)
    finally:
        scheduler.send_signal(signal.SIGTERM)
        assert scheduler.wait(60) == 0
    assert _count(home, "SELECT count(*) FROM audit_checkpoints") == 0
    assert not export.exists()

    service = _nbcast(env, "oversight", "--name", "o-1", "--interval", "0.2")
    try:
        deadline = time.monotonic() + 60
        while _count(home, "SELECT count(*) FROM audit_checkpoints") < 1:
            assert service.poll() is None, service.communicate()[1][-2000:]
            assert time.monotonic() < deadline, "no checkpoint was made"
            time.sleep(0.1)
    finally:
        service.send_signal(signal.SIGTERM)
        _, errors = service.communicate(timeout=60)
    assert service.returncode == 0, errors[-2000:]
    [line] = export.read_text().splitlines()
    assert json.loads(line)["tenant"] == "default"
    state = "SELECT state FROM service_heartbeats WHERE kind = 'oversight' AND name = 'o-1'"
    engine = sa.create_engine(f"sqlite:///{home / 'nbcast.db'}")
    with engine.connect() as conn:
        assert conn.execute(sa.text(state)).scalar() == "stopped"
    engine.dispose()
