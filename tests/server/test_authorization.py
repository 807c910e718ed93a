"""Every nbcast route asks jupyter-server's authorizer: a live server whose authorizer
refuses the resource ``nbcast`` (:mod:`tests.server.refusing_authorizer`) answers 403
on every method of every registered route — API, pages, form actions, metrics — and
the authorizer has written down a refusal for that very handler and method. So a
handler that lost its ``@authorized`` fails here even where something else would
have refused the request too (an operator route's admin check, a missing object).

The cases come from :func:`nbcast.server_extension.routes.registered` at collection
time (every method an operation declares or an nbcast handler class implements), so
a route added later is covered without editing this file. The only routes that do
not ask are the public ones, where the signed token in the path is the authority
(:data:`PUBLIC`); they are checked to ask nothing.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nbcast.server_extension.routes import HTTP_METHODS, Route, registered
from tests.server.live import LiveServer
from tests.server.refusing_authorizer import REFUSALS_ENV

ROOT = Path(__file__).resolve().parents[2]

PUBLIC = {
    "/nbcast/links/{token}": "a signed link: the token is the capability, no login",
    "/nbcast/unsubscribe/{token}": "RFC 8058 one-click unsubscribe: the token is the authority",
}
"""Routes that are public by design, and why."""


def implemented(handler: type) -> set[str]:
    """The HTTP methods an nbcast class of ``handler`` defines (not tornado's 405)."""
    found = set()
    for method in HTTP_METHODS:
        for klass in handler.__mro__:
            if method in vars(klass):
                if klass.__module__.startswith("nbcast."):
                    found.add(method)
                break
    return found


def _cases(public: bool) -> list[Any]:
    cases = []
    for r in registered():
        if (r.path in PUBLIC) != public:
            continue
        methods = {op.method for op in r.operations} | implemented(r.handler)
        for method in sorted(methods):
            cases.append(pytest.param(r, method, id=f"{method.upper()} {r.path}"))
    return cases


GUARDED = _cases(public=False)
OPEN = _cases(public=True)


@pytest.fixture(scope="module")
def refusing(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live ``jupyter server`` with nbcast's extension whose authorizer refuses
    ``nbcast`` to everyone (``nbcast serve`` names its own authorizer on the command
    line, which a second ``--ServerApp.authorizer_class`` cannot override)."""
    folder: Path = tmp_path_factory.mktemp("refusing")
    refusals = folder / "refusals.jsonl"
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    authorizer = "tests.server.refusing_authorizer.RefusingAuthorizer"
    with LiveServer(
        folder,
        users={"alice": "acme"},
        admins=("alice",),
        env={"PYTHONPATH": path, REFUSALS_ENV: str(refusals)},
        command="server",
        extra=(f"--ServerApp.authorizer_class={authorizer}",),
        ready_status=403,
    ) as live:
        yield live


def url_of(route: Route) -> str:
    """The route's path with every parameter filled in (the authorizer is asked
    before any lookup, so no object need exist)."""
    return re.sub(r"\{\w+\}", "1", route.path)


def refusals(live: LiveServer) -> list[dict[str, str]]:
    """The refusals written since the last :func:`forget_refusals`."""
    path = Path(live.env[REFUSALS_ENV])
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line]


def forget_refusals(live: LiveServer) -> None:
    Path(live.env[REFUSALS_ENV]).write_text("")


def send(live: LiveServer, method: str, url: str) -> httpx.Response:
    """A request as alice (a mapped user, an administrator), with a JSON body where
    the method takes one."""
    body = b"{}" if method in ("post", "put", "patch") else None
    headers = {"Content-Type": "application/json"} if body is not None else {}
    with live.client("alice", follow_redirects=False) as client:
        return client.request(method.upper(), url, content=body, headers=headers)


def test_the_cases_cover_every_kind_of_route() -> None:
    paths = {p.values[0].path for p in GUARDED}
    assert {
        "/nbcast/api/v1/runs/{run_id}",
        "/nbcast/api/v1/tenants/{tenant}/quota",
        "/nbcast/api/v1/openapi.json",
        "/nbcast/",
        "/nbcast/runs/{run_id}/notebook.html",
        "/nbcast/definitions/{name}/{action}",
        "/nbcast/metrics",
    } <= paths
    registered_paths = {r.path for r in registered()}
    assert set(PUBLIC) <= registered_paths  # no stale exemption
    assert paths | set(PUBLIC) == registered_paths


@pytest.mark.parametrize(("route", "method"), GUARDED)
def test_every_route_asks_the_authorizer_and_is_refused(
    refusing: LiveServer, route: Route, method: str
) -> None:
    forget_refusals(refusing)
    answer = send(refusing, method, url_of(route))
    assert answer.status_code == 403, (answer.status_code, answer.text[:300])
    asked = [(r["handler"], r["method"]) for r in refusals(refusing)]
    assert (route.handler.__name__, method.upper()) in asked, asked
    assert all(r["resource"] == "nbcast" for r in refusals(refusing))
    if answer.headers["content-type"].startswith("application/json"):
        assert set(answer.json()) == {"error"}
    assert "Traceback" not in answer.text


@pytest.mark.parametrize(("route", "method"), OPEN)
def test_the_public_routes_ask_nothing(refusing: LiveServer, route: Route, method: str) -> None:
    forget_refusals(refusing)
    with httpx.Client(base_url=refusing.url, timeout=30) as anonymous:
        answer = anonymous.request(method.upper(), url_of(route))
    assert answer.status_code < 500
    assert answer.status_code in (400, 403, 404, 410), answer.status_code  # a bad token
    assert refusals(refusing) == []


def test_jupyter_servers_other_resources_stay_allowed(refusing: LiveServer) -> None:
    with refusing.client(None) as operator:
        assert operator.get("/api/status").status_code == 200
