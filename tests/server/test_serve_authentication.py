"""``nbcast serve`` refuses to start a server that would not authenticate requests
(:mod:`nbcast.server_extension.authentication`): every way of switching jupyter-
server's authentication off is one ``error:`` line and exit status 2, before the
server listens; ``--no-auth`` says so explicitly, and then the server starts."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import httpx
import pytest

from nbcast.testing.http import free_port
from tests.server.live import BIN, LiveServer

ROOT_OPTIONS = ["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []

OPEN_CONFIGURATIONS = {
    "empty-identity-token": ["--IdentityProvider.token="],
    "empty-server-token": ["--ServerApp.token="],  # deprecated, still honoured by jupyter
    "empty-token-in-a-config-file": [],  # the config file of the test sets it
    "password-provider-empty-token": [
        "--ServerApp.identity_provider_class=jupyter_server.auth.identity.PasswordIdentityProvider",
        "--PasswordIdentityProvider.token=",
    ],
}


@pytest.mark.parametrize("options", OPEN_CONFIGURATIONS.values(), ids=OPEN_CONFIGURATIONS.keys())
def test_a_server_without_authentication_is_refused(tmp_path: Path, options: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("JUPYTER_TOKEN", "NBCAST_"))}
    env.update(
        NBCAST_HOME=str(tmp_path / "home"),
        JUPYTER_CONFIG_DIR=str(tmp_path / "jupyter-config"),
        JUPYTER_RUNTIME_DIR=str(tmp_path / "jupyter-runtime"),
    )
    if not options:
        config = tmp_path / "jupyter-config"
        config.mkdir()
        (config / "jupyter_server_config.json").write_text(
            json.dumps({"IdentityProvider": {"token": ""}})
        )
    port = free_port()
    done = subprocess.run(
        [str(BIN / "nbcast"), "serve", "--port", str(port), *ROOT_OPTIONS, *options],
        env=env,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2, (done.returncode, done.stderr[-2000:])
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, done.stderr
    assert "would not authenticate" in errors[0]
    assert "--no-auth" in errors[0]
    assert errors[0] == done.stderr.strip().splitlines()[-1]  # the last word
    assert "Traceback" not in done.stderr
    # It never served: nbcast's extension was not loaded, nothing listens, no home.
    assert "nbcast: home" not in done.stderr
    with pytest.raises(httpx.TransportError):
        httpx.get(f"http://127.0.0.1:{port}/nbcast/api/v1/health", timeout=2)


def test_no_auth_is_the_explicit_choice_of_an_open_server(tmp_path: Path) -> None:
    provider = "jupyter_server.auth.identity.PasswordIdentityProvider"
    server = LiveServer(
        tmp_path,
        extra=(
            "--no-auth",
            f"--ServerApp.identity_provider_class={provider}",
            "--IdentityProvider.token=",
        ),
    )
    server.env.pop("JUPYTER_TOKEN")
    with server:
        answer = httpx.get(f"{server.url}/nbcast/api/v1/health", timeout=30)
        assert answer.status_code == 200  # anyone at all: what --no-auth means
    assert "started with --no-auth" in server.log()


def test_a_server_with_a_token_starts_and_authenticates(tmp_path: Path) -> None:
    with LiveServer(tmp_path) as server:
        answer = httpx.get(f"{server.url}/nbcast/api/v1/health", timeout=30)
        assert answer.status_code == 403
    assert "--no-auth" not in server.log()
