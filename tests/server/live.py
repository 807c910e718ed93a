"""A real jupyter-server with nbcast's extension, in a process of its own, for tests.

``LiveServer`` starts ``nbcast serve`` (or ``jupyter server`` / ``jupyter lab`` with
``command=``) on a free loopback port with its own ``NBCAST_HOME``, the server token
``TOKEN``, and nbcast's :class:`~nbcast.server_extension.identity.TokenIdentityProvider`
configured with one token per user in ``users`` (``{"alice": "acme"}`` maps user
alice to tenant acme). :meth:`LiveServer.client` is an httpx client that
authenticates as that user (``None``: the server's own token).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import httpx

from nbcast.testing.http import free_port

__all__ = ["TOKEN", "LiveServer", "user_token"]

TOKEN = "server-token-for-tests"
BIN = Path(sys.executable).parent


def user_token(user: str) -> str:
    """The test token of ``user``."""
    return f"token-of-{user}"


class LiveServer:
    """One server process (module docstring)."""

    def __init__(
        self,
        folder: Path,
        *,
        users: Mapping[str, str] | None = None,
        admins: tuple[str, ...] = (),
        env: Mapping[str, str] | None = None,
        embedded_services: bool = False,
        command: str = "serve",
        extra: tuple[str, ...] = (),
        ready_status: int = 200,
    ) -> None:
        self.folder = folder
        self.home = folder / "nbcast-home"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.users = dict(users or {})
        self.log_path = folder / "server.log"
        config = folder / "jupyter_server_config.json"
        config.write_text(
            json.dumps(
                {
                    "ServerApp": {
                        "identity_provider_class": (
                            "nbcast.server_extension.identity.TokenIdentityProvider"
                        ),
                    },
                    "TokenIdentityProvider": {
                        "user_tokens": {user_token(u): u for u in self.users},
                    },
                    "NbcastApp": {
                        "tenant_map": self.users,
                        "admin_users": list(admins),
                        "embedded_services": embedded_services,
                    },
                }
            )
        )
        inherited = {k: v for k, v in os.environ.items() if k != "NBCAST_DATABASE_URL"}
        self.env = {
            **inherited,
            "NBCAST_HOME": str(self.home),
            "JUPYTER_TOKEN": TOKEN,
            "JUPYTER_CONFIG_DIR": str(folder / "jupyter-config"),
            "JUPYTER_RUNTIME_DIR": str(folder / "jupyter-runtime"),
            "NBCAST_BASE_URL": self.url,
            **(env or {}),
        }
        args = [
            f"--config={config}",
            f"--ServerApp.root_dir={folder}",
            *(["--ServerApp.allow_root=True"] if os.geteuid() == 0 else []),
            *extra,
        ]
        if command == "serve":
            self.argv = [str(BIN / "nbcast"), "serve", "--port", str(self.port), *args]
        else:
            where = [
                f"--ServerApp.port={self.port}",
                "--ServerApp.ip=127.0.0.1",
                "--ServerApp.port_retries=0",
                "--ServerApp.open_browser=False",
            ]
            self.argv = [str(BIN / "jupyter"), command, *where, *args]
        self.ready_status = ready_status
        """The status the OpenAPI document answers the server's token once the server
        listens (403 under an authorizer that refuses nbcast)."""
        self.process: subprocess.Popen[bytes] | None = None

    def start(self, timeout: float = 60.0) -> LiveServer:
        """Start it and wait until its API answers (:attr:`ready_status`)."""
        self.home.mkdir(parents=True, exist_ok=True, mode=0o700)
        log = self.log_path.open("ab")
        self.process = subprocess.Popen(
            self.argv, env=self.env, stdout=log, stderr=subprocess.STDOUT, cwd=self.folder
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"the server exited ({self.process.returncode}):\n{self.log()}")
            try:
                answer = httpx.get(
                    f"{self.url}/nbcast/api/v1/openapi.json",
                    headers={"Authorization": f"token {TOKEN}"},
                    timeout=2.0,
                )
                if answer.status_code == self.ready_status:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"the server did not answer within {timeout} s:\n{self.log()}")

    def log(self) -> str:
        """What the server wrote so far."""
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def client(self, user: str | None = None, **options: Any) -> httpx.Client:
        """An httpx client for ``user`` (None: the server token)."""
        token = TOKEN if user is None else user_token(user)
        return httpx.Client(
            base_url=self.url,
            headers={"Authorization": f"token {token}"},
            timeout=options.pop("timeout", 30.0),
            **options,
        )

    def stop(self) -> None:
        """SIGTERM, then SIGKILL after 15 s."""
        if self.process is None or self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait(timeout=15)

    def __enter__(self) -> LiveServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
