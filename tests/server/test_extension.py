"""The extension loads on ``nbcast serve`` and ``jupyter server``; its routes are all in
the OpenAPI document and every one of them is behind jupyter-server's authorization."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from nbcast.config import load_settings
from nbcast.server_extension.routes import check_registry, registered, tornado_handlers
from tests.members import grant_url
from tests.server.live import TOKEN, LiveServer

BIN = Path(sys.executable).parent


def test_the_registry_has_no_undocumented_or_missing_methods() -> None:
    routes = registered()
    assert check_registry(routes) == []
    assert {r.path for r in routes if r.documented} >= {
        "/nbcast/api/v1/health",
        "/nbcast/api/v1/openapi.json",
    }


def test_each_route_is_the_first_match_for_its_own_urls() -> None:
    """Tornado takes the first pattern that matches: a generic route
    (``/nbcast/runs/{run_id}/{action}``) must not shadow a specific one
    (``…/notebook.html``), whatever order the handler modules load in."""
    routes = registered()
    for order in (routes, list(reversed(routes))):
        table = tornado_handlers(order)
        for r in routes:
            url = re.sub(r"\{\w+\}", "1", r.path)
            first = next(handler for pattern, handler in table if re.fullmatch(pattern, url))
            assert first is r.handler, (url, first.__name__, r.handler.__name__)


def test_installing_enables_the_extension_for_jupyter_server() -> None:
    listing = subprocess.run(
        [str(BIN / "jupyter"), "server", "extension", "list"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = listing.stdout + listing.stderr
    assert "nbcast.server_extension" in text
    assert "enabled" in text.split("nbcast.server_extension", 1)[1][:80]


def test_the_document_is_openapi_31_and_lists_every_route(server: LiveServer) -> None:
    with server.client() as client:
        answer = client.get("/nbcast/api/v1/openapi.json")
    assert answer.status_code == 200
    doc = answer.json()
    assert doc["openapi"] == "3.1.0"
    documented = {(path, method) for path, item in doc["paths"].items() for method in item}
    served = {(r.path, op.method) for r in registered() if r.documented for op in r.operations}
    assert documented == served


def test_every_route_refuses_a_request_without_credentials(server: LiveServer) -> None:
    for r in registered():
        if not r.documented:
            continue
        path = r.path.replace("{", "").replace("}", "")
        for op in r.operations:
            answer = httpx.request(op.method.upper(), f"{server.url}{path}", timeout=10)
            assert answer.status_code in (401, 403), (op.method, path, answer.status_code)
            assert set(answer.json()) == {"error"}, answer.text


def test_health_lists_the_services(server: LiveServer) -> None:
    with server.client() as client:  # the owner: the fresh home's operator
        body = client.get("/nbcast/api/v1/health").json()
    assert body["ok"] is False  # nothing runs: no embedded services in this server
    assert body["alive"] == {"scheduler": 0, "worker": 0, "delivery-worker": 0, "oversight": 0}


def test_a_user_without_a_tenant_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "strict"
    folder.mkdir()
    with LiveServer(
        folder, users={"alice": "acme"}, extra=("--NbcastApp.default_tenant=None",)
    ) as live:
        with live.client() as client:  # the server token: an anonymous user, no tenant
            answer = client.get("/nbcast/api/v1/health")
        assert answer.status_code == 403
        assert answer.json()["error"]["code"] == "forbidden"
        grant_url(load_settings(dict(live.env)).database_url, "acme", "jupyter:alice", "viewer")
        with live.client("alice") as client:
            assert client.get("/nbcast/api/v1/health").status_code == 200


@pytest.mark.parametrize("command", ["server", "lab"])
def test_jupyter_loads_the_extension(tmp_path: Path, command: str) -> None:
    with LiveServer(tmp_path, command=command) as live:
        answer = httpx.get(
            f"{live.url}/nbcast/api/v1/health",
            headers={"Authorization": f"token {TOKEN}"},
            timeout=10,
        )
        assert answer.status_code == 200
        assert json.loads(answer.text)["alive"]["scheduler"] == 0
