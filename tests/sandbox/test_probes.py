"""The hostile author of issue 20, again: with nothing but an API token for tenant
acme and the author role, against ``nbcast serve`` and a worker started as the README
says — both holding real secrets — each probe (:mod:`tests.sandbox.probes`) is
published and run through the API, on the local engine and on Ray. In the sandbox every
probe's cell fails inside the kernel and its run records that failure; no secret
reaches an executed notebook; another tenant's report running meanwhile succeeds; and
nothing of the sandboxes is left running afterwards. A control shows the probes have
teeth: with ``--sandbox off`` the home is listed (and the worker's environment still
cannot be read: the services are undumpable)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nbcast.cli import main
from nbcast.sandbox.policy import DEFAULT_UID_BASE
from tests.notebooks import make_notebook
from tests.sandbox.probes import PARAMETERS, PROBES, Probe
from tests.server.live import LiveServer

pytestmark = pytest.mark.timeout(600)

BIN = Path(sys.executable).parent
SECRETS = {
    "NBCAST_SMTP_URL": "smtp://mailer:smtp-pass-7731@127.0.0.1:1",
    "NBCAST_SLACK_TOKEN": "xoxb-slack-7732",
    "NBCAST_WEBHOOK_SECRET": "whsec-7733",
    "NBCAST_SIGNING_KEYS": "k1:signing-7734",
    "PGPASSWORD": "pg-pass-7735",
}
MEMORY_MB = 512
PROCESSES = 64
VICTIM = "import time\ntime.sleep(3)\nprint('the other tenant is fine')"


class World:
    """A server with tenants acme (admin ada, author mallory) and default (victor)."""

    def __init__(self, folder: Path, monkeypatch: pytest.MonkeyPatch) -> None:
        env = {**SECRETS, "NBCAST_SANDBOX_UID_BASE": str(DEFAULT_UID_BASE)}
        self.server = LiveServer(
            folder, users={"mallory": "acme", "ada": "acme", "victor": "default"}, env=env
        ).start()
        self.folder = folder
        monkeypatch.setenv("NBCAST_HOME", str(self.server.home))
        self.cli(monkeypatch, "tester", "default", "tenants", "create", "acme", "--admin", "ada")
        self.cli(
            monkeypatch,
            "ada",
            "acme",
            "tenants",
            "set-quota",
            "acme",
            "--max-attempts",
            "1",
            "--memory-mb",
            str(MEMORY_MB),
            "--processes",
            str(PROCESSES),
            "--max-concurrent",
            "4",
        )
        # mallory and victor use the server: their identities are jupyter:NAME.
        self.cli(monkeypatch, "ada", "acme", "users", "add", "jupyter:mallory", "--role", "author")
        self.cli(
            monkeypatch, "tester", "default", "users", "add", "jupyter:victor", "--role", "author"
        )
        self.env = {**self.server.env, "NBCAST_USER": "tester"}

    @staticmethod
    def cli(monkeypatch: pytest.MonkeyPatch, user: str, tenant: str, *argv: str) -> None:
        monkeypatch.setenv("NBCAST_USER", user)
        monkeypatch.setenv("NBCAST_TENANT", tenant)
        assert main(list(argv)) == 0, argv

    def api(self, user: str) -> httpx.Client:
        return self.server.client(user)

    def publish(self, user: str, name: str, body: str, parameters: str = PARAMETERS) -> None:
        path = make_notebook(
            self.folder / "notebooks" / f"{name}.ipynb",
            parameters=parameters,
            body=body,
            nbcast={"name": name},
        )
        with self.api(user) as api:
            answer = api.post(
                "/nbcast/api/v1/definitions", json={"notebook": json.loads(path.read_text())}
            )
        assert answer.status_code in (200, 201), answer.text

    def run(self, user: str, name: str, parameters: dict[str, Any]) -> int:
        with self.api(user) as api:
            answer = api.post(
                f"/nbcast/api/v1/definitions/{name}/runs", json={"parameters": parameters}
            )
        assert answer.status_code == 201, answer.text
        run_ids: list[int] = answer.json()["run_ids"]
        return run_ids[0]

    def worker(self, *options: str) -> subprocess.Popen[bytes]:
        log = (self.folder / "worker.log").open("ab")
        return subprocess.Popen(
            [str(BIN / "nbcast"), "worker", "--concurrency", "2", *options],
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )

    def wait(self, user: str, run_ids: list[int], timeout: float = 300) -> dict[int, Any]:
        done: dict[int, Any] = {}
        deadline = time.monotonic() + timeout
        with self.api(user) as api:
            while len(done) < len(run_ids):
                assert time.monotonic() < deadline, f"runs not done: {set(run_ids) - set(done)}"
                for run_id in run_ids:
                    if run_id not in done:
                        run = api.get(f"/nbcast/api/v1/runs/{run_id}").json()
                        if run["state"] in ("SUCCEEDED", "FAILED", "TIMED_OUT", "CANCELLED"):
                            done[run_id] = run
                time.sleep(0.3)
        return done

    def notebook(self, user: str, run_id: int) -> str:
        with self.api(user) as api:
            answer = api.get(f"/nbcast/api/v1/runs/{run_id}/notebook")
        assert answer.status_code == 200, answer.text
        return answer.text

    def close(self) -> None:
        self.server.stop()


def stop(worker: subprocess.Popen[bytes]) -> None:
    worker.send_signal(signal.SIGTERM)
    try:
        worker.wait(60)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.wait()


def targets(world: World, worker: subprocess.Popen[bytes]) -> dict[str, Any]:
    home = world.server.home
    assert world.server.process is not None
    return {
        "worker_pid": worker.pid,
        "server_pid": world.server.process.pid,
        "home": str(home),
        "database": str(home / "nbcast.db"),
        "runs": str(home / "runs"),
        "runtime": str(world.folder / "jupyter-runtime"),
        "memory_mb": MEMORY_MB,
    }


def sandbox_processes() -> list[str]:
    """Processes running as a sandbox's uid (any tenant's)."""
    listing = subprocess.run(
        ["ps", "-eo", "uid=,pid=,args="], capture_output=True, text=True, check=True
    ).stdout
    return [line for line in listing.splitlines() if int(line.split()[0]) >= DEFAULT_UID_BASE]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[World]:
    built = World(tmp_path, monkeypatch)
    try:
        yield built
    finally:
        built.close()


def assert_probes_fail(world: World, worker: subprocess.Popen[bytes]) -> None:
    for item in PROBES:
        world.publish("mallory", item.name, item.code)
    world.publish("victor", "victim", VICTIM, parameters="n = 1\n")
    aimed = targets(world, worker)
    runs: dict[int, Probe] = {}
    for item in PROBES:
        runs[world.run("mallory", item.name, aimed)] = item
        if item.name == "fork_bomb":
            victim = world.run("victor", "victim", {})
    done = world.wait("mallory", list(runs))
    done.update(world.wait("victor", [victim]))
    assert worker.poll() is None, "a probe stopped the worker"
    for run_id, item in runs.items():
        run = done[run_id]
        assert run["state"] == "FAILED", (item.name, run)
        error = run["error"] or {}
        assert error.get("ename") in item.raises, (item.name, error)
        assert item.says in str(error.get("evalue", "")), (item.name, error)
        executed = world.notebook("mallory", run_id)
        for secret in SECRETS.values():
            assert secret not in executed, (item.name, secret)
    assert done[victim]["state"] == "SUCCEEDED", done[victim]
    assert "the other tenant is fine" in world.notebook("victor", victim)
    stop(worker)
    # A Ray worker's warm kernel (a sandbox of the last tenant it served) ends once the
    # worker has had no attempt for NBCAST_RAY_WARM_IDLE_S (3 s in the test cluster).
    deadline = time.monotonic() + 20
    while sandbox_processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert sandbox_processes() == []


def test_every_probe_fails_in_the_sandbox_on_the_local_engine(world: World) -> None:
    worker = world.worker("--engine", "local")
    try:
        assert_probes_fail(world, worker)
    finally:
        stop(worker)


REACH_THE_CLUSTER = """
import socket
socket.create_connection(("127.0.0.1", gcs_port), timeout=5).close()
print("reached Ray's GCS")
"""


@pytest.mark.ray
def test_every_probe_fails_in_the_sandbox_on_ray(
    world: World, ray_cluster: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The test cluster asks for no token (``RAY_AUTH_MODE=disabled``), so a tenant on
    the host's network is refused at submit — its report could hand the cluster a job,
    run outside any sandbox — and with ``network: none`` every probe fails, the cluster's
    GCS unreachable too."""
    gcs_port = int(ray_cluster.rsplit(":", 1)[1])
    world.publish("mallory", "reach_the_cluster", REACH_THE_CLUSTER, parameters="gcs_port = 0\n")
    worker = world.worker("--engine", "ray", "--ray-address", ray_cluster)
    try:
        refused = world.run("mallory", "reach_the_cluster", {"gcs_port": gcs_port})
        run = world.wait("mallory", [refused])[refused]
        assert (run["state"], run["reason"]) == ("FAILED", "submit_refused"), run
        assert "Ray runs without token auth" in run["error"]["evalue"]
        for tenant in ("acme", "default"):
            world.cli(monkeypatch, "tester", "default", "tenants", "set-network", tenant, "none")
        walled = world.run("mallory", "reach_the_cluster", {"gcs_port": gcs_port})
        run = world.wait("mallory", [walled])[walled]
        assert (run["state"], run["error"]["ename"]) == ("FAILED", "ConnectionRefusedError"), run
        assert_probes_fail(world, worker)
    finally:
        stop(worker)


def test_without_the_sandbox_the_probes_reach_the_home(world: World) -> None:
    """The control: with ``--sandbox off`` (a warning in the worker's log) the home
    probe succeeds and lists the database: the probes are not vacuous. (Whether the
    services' environments stay unreadable without a sandbox is
    :mod:`tests.test_credentials`' business: here the worker runs as root, and a root
    kernel reads anything.)"""
    by_name = {item.name: item for item in PROBES}
    world.publish("mallory", "home", by_name["home"].code)
    worker = world.worker("--engine", "local", "--sandbox", "off")
    try:
        home = world.run("mallory", "home", targets(world, worker))
        done = world.wait("mallory", [home])
    finally:
        stop(worker)
    assert done[home]["state"] == "SUCCEEDED"
    assert "nbcast.db" in world.notebook("mallory", home)
    log = (world.folder / "worker.log").read_text()
    assert "the sandbox is OFF" in log
