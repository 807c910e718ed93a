"""The embedded services: a server with ``embedded_services`` runs the scheduler, a
worker and a delivery worker as its children on the embedded SQLite database; they
execute what the CLI queues, a killed one is restarted and the next run succeeds once,
and none outlives the server — whether it stops (SIGTERM) or is killed (SIGKILL)."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeVar

import pytest
import sqlalchemy as sa

from nbcast.db import Database
from nbcast.heartbeats import ServiceHeartbeat
from nbcast.server_extension.services import BACKOFF_MAX, backoff_delay
from tests.notebooks import make_notebook
from tests.server.live import LiveServer

BIN = Path(sys.executable).parent
REPO = Path(__file__).resolve().parents[2]
KINDS = {"scheduler", "worker", "delivery-worker", "oversight"}
T = TypeVar("T")


def wait_for(what: str, probe: Callable[[], T | None], timeout: float = 30.0) -> T:
    """``probe()``'s first truthy answer, polled until ``timeout``."""
    deadline = time.monotonic() + timeout
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.1)


def alive(pid: int) -> bool:
    """Whether process ``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def embedded_server(folder: Path) -> LiveServer:
    return LiveServer(
        folder,
        users={"alice": "acme"},
        embedded_services=True,
        env={"NBCAST_HEARTBEAT_SECONDS": "0.5"},
    )


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server running the embedded services, with one published report."""
    folder = tmp_path_factory.mktemp("embedded")
    with embedded_server(folder) as live:
        notebook = make_notebook(folder / "svc.ipynb", nbcast={"name": "svc-report"})
        nbcast(live, "publish", str(notebook))
        yield live


def nbcast(server: LiveServer, *argv: str) -> Any:
    """Run the nbcast CLI on the server's home; its JSON answer (``--json``)."""
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv, "--json"],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def snapshot(server: LiveServer) -> dict[str, dict[str, Any]]:
    """The supervisor's children by kind, as the server's owner (its operator) sees
    them."""
    with server.client() as client:
        answer = client.get("/nbcast/api/v1/services/embedded")
    assert answer.status_code == 200, answer.text
    body = answer.json()
    assert body["enabled"] is True
    return {child["kind"]: child for child in body["children"]}


def heartbeats(server: LiveServer) -> dict[int, ServiceHeartbeat]:
    """The heartbeat rows by pid, read from the server's database."""
    db = Database.open(f"sqlite:///{server.home / 'nbcast.db'}")
    try:
        with db.session() as session:
            return {row.pid: row for row in session.scalars(sa.select(ServiceHeartbeat))}
    finally:
        db.dispose()


def queue_run(server: LiveServer) -> int:
    """Queue a run of the report through the CLI; its id."""
    queued = nbcast(server, "run", "svc-report")
    assert queued["state"] == "QUEUED"
    return int(queued["id"])


def run_to_the_end(server: LiveServer, run_id: int | None = None) -> dict[str, Any]:
    """The run (a new one when None) once it has ended."""
    run_id = queue_run(server) if run_id is None else run_id

    def ended() -> dict[str, Any] | None:
        run: dict[str, Any] = nbcast(server, "runs", "show", str(run_id))
        return run if run["state"] not in ("QUEUED", "LEASED", "RUNNING") else None

    return wait_for(f"run {run_id} to end", ended, timeout=40)


def test_backoff_doubles_from_one_second_and_is_bounded() -> None:
    assert [backoff_delay(n) for n in range(1, 6)] == [1.0, 2.0, 4.0, 8.0, 16.0]
    assert backoff_delay(7) == BACKOFF_MAX
    assert backoff_delay(10_000) == BACKOFF_MAX


def test_a_server_without_embedded_services_says_so(tmp_path: Path) -> None:
    with LiveServer(tmp_path, users={"alice": "acme"}) as live, live.client() as client:
        body = client.get("/nbcast/api/v1/services/embedded").json()
    assert body == {"enabled": False, "stopping": False, "children": []}


def test_the_four_services_run_as_children_and_beat(server: LiveServer) -> None:
    def all_alive() -> dict[str, Any] | None:
        with server.client() as client:
            body: dict[str, Any] = client.get("/nbcast/api/v1/health").json()
        return body if body["alive"] == dict.fromkeys(KINDS, 1) else None

    health = wait_for("a heartbeat of each service", all_alive)
    children = snapshot(server)
    assert set(children) == KINDS
    for kind, child in children.items():
        assert child["state"] == "running"
        assert child["restarts"] == 0
        assert child["last_exit_code"] is None
        assert alive(child["pid"])
        # The heartbeat row alive for this kind is the child's own.
        rows = [s for s in health["services"] if s["kind"] == kind and s["alive"]]
        assert [r["pid"] for r in rows] == [child["pid"]]
    assert "[nbcast scheduler " in server.log()  # the children's output, in the server's log
    with server.client() as client:  # and the overview page shows each child
        page = client.get("/nbcast/").text
    for kind, child in children.items():
        assert re.search(rf"<tr><td>{kind}</td><td class=\"num\">{child['pid']}</td>", page)


def test_the_embedded_worker_executes_a_run_queued_through_the_cli(server: LiveServer) -> None:
    run = run_to_the_end(server)
    assert run["state"] == "SUCCEEDED"
    assert [a["worker"].rsplit(":", 1)[1] for a in run["attempts"]] == [
        str(snapshot(server)["worker"]["pid"])
    ]


def _freeze_outside_a_write(pid: int, database: Path) -> None:
    """SIGSTOP ``pid`` (frozen: it cannot claim what is queued next) at a moment it
    holds no SQLite write lock: frozen inside a write transaction it would lock every
    other writer out (the CLI's queueing too) until it is killed. A frozen worker is let
    go and stopped again until a write of our own gets through at once."""
    for _ in range(100):
        os.kill(pid, signal.SIGSTOP)
        probe = sqlite3.connect(database, timeout=0.2)
        try:
            probe.execute("BEGIN IMMEDIATE")
            probe.rollback()
            return
        except sqlite3.OperationalError:  # it holds the write lock: let it finish
            os.kill(pid, signal.SIGCONT)
            time.sleep(0.05)
        finally:
            probe.close()
    pytest.fail("the worker always held the database's write lock")


def test_a_worker_killed_while_a_run_is_queued_is_restarted_and_the_run_succeeds_once(
    server: LiveServer,
) -> None:
    before = snapshot(server)["worker"]
    _freeze_outside_a_write(before["pid"], server.home / "nbcast.db")
    run_id = queue_run(server)
    assert nbcast(server, "runs", "show", str(run_id))["state"] == "QUEUED"
    os.kill(before["pid"], signal.SIGKILL)
    run = run_to_the_end(server, run_id)

    after = snapshot(server)["worker"]
    assert after["restarts"] == before["restarts"] + 1
    assert after["pid"] != before["pid"]
    assert after["state"] == "running"
    assert after["last_exit_code"] == -signal.SIGKILL
    assert not alive(before["pid"])
    assert run["state"] == "SUCCEEDED"
    assert len(run["attempts"]) == 1
    assert run["attempts"][0]["worker"].endswith(f":{after['pid']}")
    assert "restarting in 1 s" in server.log()


def test_stopping_the_server_stops_every_child_gracefully(server: LiveServer) -> None:
    pids = [child["pid"] for child in snapshot(server).values()]
    assert server.process is not None
    server.stop()
    assert server.process.returncode == 0
    assert [pid for pid in pids if alive(pid)] == []
    # SIGTERM, not SIGKILL: each service wrote its last heartbeat as it stopped.
    rows = heartbeats(server)
    assert {rows[pid].kind: rows[pid].state for pid in pids} == dict.fromkeys(KINDS, "stopped")


def test_killing_the_server_takes_its_children_with_it(tmp_path: Path) -> None:
    live = embedded_server(tmp_path).start()
    try:

        def running() -> dict[str, dict[str, Any]] | None:
            children = snapshot(live)
            return children if all(c["state"] == "running" for c in children.values()) else None

        children = wait_for("four running children", running)
        pids = [child["pid"] for child in children.values()]
        assert live.process is not None
        live.process.kill()  # no stop hook runs: the children learn it from Linux
        live.process.wait(timeout=10)
        wait_for("the children to exit", lambda: not any(alive(pid) for pid in pids))
    finally:
        live.stop()


@pytest.mark.parametrize(
    "unit",
    sorted(p.name for p in (REPO / "deploy" / "systemd").glob("*.service")),
)
def test_the_systemd_units_run_commands_nbcast_has(unit: str) -> None:
    text = (REPO / "deploy" / "systemd" / unit).read_text()
    commands = [
        line.split("=", 1)[1].split()
        for line in text.splitlines()
        if line.startswith(("ExecStart=", "ExecStartPre="))
    ]
    assert commands
    for argv in commands:
        assert argv[0] == "/opt/nbcast/venv/bin/nbcast"
        args = [a.replace("%H", "host").replace("%i", "1") for a in argv[1:]]
        # Unknown options and commands fail before --help answers.
        done = subprocess.run(
            [str(BIN / "nbcast"), *args, "--help"], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 0, (unit, args, done.stderr)
        assert "Usage: nbcast" in done.stdout
    if "worker" in unit or "scheduler" in unit:
        assert "KillMode=mixed" in text  # SIGTERM to the service alone: its graceful stop
