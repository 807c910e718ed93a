"""The services protect themselves (issue 20, item 2): every secret can come from a
``0600`` file instead of the environment, and the long-running services are undumpable,
so a process of the same user cannot read their environment.

Undumpable is shown as root can show it: among root processes *without capabilities*
(``setpriv --bounding-set -all``: what a plain user is), one reads another's
``/proc/<pid>/environ`` like any process of the same user — unless that one is
undumpable, which then takes ``CAP_SYS_PTRACE``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbcast.credentials import credential
from nbcast.delivery.settings import load_delivery_settings
from nbcast.errors import ConfigError
from tests.server.live import LiveServer

BIN = Path(sys.executable).parent
MARKER = "NBCAST_SMTP_URL=smtp://u:credential-marker-9123@127.0.0.1:1"


def secret_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "secret"
    path.write_text(text)
    path.chmod(mode)
    return path


def test_a_secret_comes_from_its_file(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "smtp://u:p@mail:25\n")
    env = {"NBCAST_SMTP_URL_FILE": str(path)}
    assert credential("NBCAST_SMTP_URL", env) == "smtp://u:p@mail:25"
    assert load_delivery_settings(env).smtp_url == "smtp://u:p@mail:25"
    assert credential("NBCAST_SMTP_URL", {"NBCAST_SMTP_URL": "smtp://x"}) == "smtp://x"
    assert credential("NBCAST_SMTP_URL", {}) is None


@pytest.mark.parametrize("mode", [0o644, 0o640, 0o604, 0o660])
def test_a_secret_file_others_may_read_is_refused(tmp_path: Path, mode: int) -> None:
    path = secret_file(tmp_path, "xoxb-secret", mode)
    with pytest.raises(
        ConfigError, match=r"NBCAST_SLACK_TOKEN_FILE: .* readable by others"
    ) as caught:
        credential("NBCAST_SLACK_TOKEN", {"NBCAST_SLACK_TOKEN_FILE": str(path)})
    assert "xoxb-secret" not in str(caught.value)


def test_both_forms_of_one_secret_are_refused(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "a")
    env = {"NBCAST_SIGNING_KEYS": "k1:x", "NBCAST_SIGNING_KEYS_FILE": str(path)}
    with pytest.raises(ConfigError, match="both set"):
        credential("NBCAST_SIGNING_KEYS", env)


def test_a_link_a_fifo_a_missing_file_and_another_users_file_are_refused(tmp_path: Path) -> None:
    target = secret_file(tmp_path, "k1:secret")
    link = tmp_path / "link"
    link.symlink_to(target)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo, 0o600)
    theirs = tmp_path / "theirs"
    theirs.write_text("k1:theirs")
    theirs.chmod(0o600)
    os.chown(theirs, 65534, 65534)
    for path, why in (
        (link, "cannot open"),
        (fifo, "not a regular file"),
        (tmp_path / "missing", "cannot open"),
        (theirs, "belongs to another user"),
    ):
        with pytest.raises(ConfigError, match=why):
            credential("NBCAST_SIGNING_KEYS", {"NBCAST_SIGNING_KEYS_FILE": str(path)})


def test_a_huge_secret_file_is_refused(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "x" * (64 * 1024 + 1))
    with pytest.raises(ConfigError, match="larger than 64 KiB"):
        credential("NBCAST_WEBHOOK_SECRET", {"NBCAST_WEBHOOK_SECRET_FILE": str(path)})


def test_the_cli_says_one_line_for_a_bad_secret_file(tmp_path: Path) -> None:
    path = secret_file(tmp_path, "sqlite:///x.db", 0o644)
    env = {**os.environ, "NBCAST_DATABASE_URL_FILE": str(path), "NBCAST_HOME": str(tmp_path)}
    env.pop("NBCAST_DATABASE_URL", None)
    done = subprocess.run(
        [str(BIN / "nbcast"), "runs", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 2
    assert done.stderr.startswith("error: NBCAST_DATABASE_URL_FILE:")
    assert len(done.stderr.strip().splitlines()) == 1
    assert "Traceback" not in done.stderr


def test_the_database_url_comes_from_its_file(tmp_path: Path) -> None:
    home = tmp_path / "home"
    path = secret_file(tmp_path, f"sqlite:///{tmp_path / 'from-file.db'}\n")
    env = {**os.environ, "NBCAST_DATABASE_URL_FILE": str(path), "NBCAST_HOME": str(home)}
    env.pop("NBCAST_DATABASE_URL", None)
    done = subprocess.run(
        [str(BIN / "nbcast"), "runs", "list"], env=env, capture_output=True, text=True, timeout=60
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "from-file.db").exists()
    assert not (home / "nbcast.db").exists()


# -- undumpable services ---------------------------------------------------------------


WITHOUT_CAPABILITIES = ["setpriv", "--bounding-set=-all", "--inh-caps=-all", "--no-new-privs"]


def read_environ_without_capabilities(pid: int) -> subprocess.CompletedProcess[str]:
    """``cat /proc/PID/environ`` as root with no capability at all."""
    return subprocess.run(
        [*WITHOUT_CAPABILITIES, "cat", f"/proc/{pid}/environ"],
        capture_output=True,
        text=True,
        timeout=30,
    )


@pytest.fixture
def service_env(tmp_path: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "NBCAST_DATABASE_URL"}
    name, value = MARKER.split("=", 1)
    return {**env, "NBCAST_HOME": str(tmp_path / "home"), name: value}


def wait_for_heartbeat(process: subprocess.Popen[bytes], home: Path) -> None:
    import sqlalchemy as sa

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, "the service exited"
        if (home / "nbcast.db").exists():
            engine = sa.create_engine(f"sqlite:///{home / 'nbcast.db'}")
            try:
                with engine.connect() as conn:
                    if conn.execute(sa.text("SELECT count(*) FROM service_heartbeats")).scalar():
                        return
            except sa.exc.OperationalError:
                pass
            finally:
                engine.dispose()
        time.sleep(0.2)
    raise AssertionError("no heartbeat")


@pytest.fixture
def control(service_env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    """A plain Python process with the same secret: dumpable, as any process. It says
    when it runs: until setpriv has dropped its capabilities and executed Python, the
    process is root with every capability, which a reader without any may not read."""
    process = subprocess.Popen(
        [
            *WITHOUT_CAPABILITIES,
            sys.executable,
            "-c",
            "import sys, time; print('ready', flush=True); time.sleep(120)",
        ],
        env=service_env,
        stdout=subprocess.PIPE,
    )
    assert process.stdout is not None
    assert process.stdout.readline() == b"ready\n"
    yield process
    process.kill()
    process.wait()


@pytest.mark.parametrize(
    "argv",
    [
        ["scheduler", "run"],
        ["worker", "--sandbox", "off", "--no-warm-kernels"],
        ["delivery-worker"],
    ],
    ids=["scheduler", "worker", "delivery-worker"],
)
def test_a_service_keeps_its_environment_from_its_own_user(
    argv: list[str], service_env: dict[str, str], control: subprocess.Popen[bytes]
) -> None:
    assert MARKER.split("=", 1)[1] in read_environ_without_capabilities(control.pid).stdout
    service = subprocess.Popen(
        [*WITHOUT_CAPABILITIES, str(BIN / "nbcast"), *argv],
        env=service_env,
        stdout=subprocess.DEVNULL,
    )
    try:
        wait_for_heartbeat(service, Path(service_env["NBCAST_HOME"]))
        read = read_environ_without_capabilities(service.pid)
        assert read.returncode != 0
        assert "Permission denied" in read.stderr
        assert "credential-marker" not in read.stdout
    finally:
        service.terminate()
        service.wait(60)


def test_the_server_keeps_its_token_from_its_own_user(tmp_path: Path) -> None:
    name, value = MARKER.split("=", 1)
    server = LiveServer(tmp_path, env={name: value})
    server.argv = [*WITHOUT_CAPABILITIES, *server.argv]
    with server:
        assert server.process is not None
        read = read_environ_without_capabilities(server.process.pid)
    assert read.returncode != 0
    assert "Permission denied" in read.stderr
    assert "JUPYTER_TOKEN" not in read.stdout
