"""`nbcast serve` gives a tenant's user nbcast and nothing else of jupyter-server: no
kernels, no files, no terminals — only the server's own token (the operator) has those.
And no request body larger than nbcast needs is buffered."""

from __future__ import annotations

import httpx
import pytest

from nbcast.access import Caller
from nbcast.config import load_settings
from nbcast.server_extension.authorizer import NbcastAuthorizer
from nbcast.server_extension.identity import caller_for
from tests.members import grant_url
from tests.server.live import LiveServer

SERVER_ROUTES = [
    ("GET", "/api/contents"),
    ("GET", "/api/contents/nbcast-home/signing-keys.json"),
    ("GET", "/files/nbcast-home/signing-keys.json"),
    ("GET", "/api/kernels"),
    ("POST", "/api/kernels"),
    ("GET", "/api/sessions"),
    ("GET", "/api/terminals"),  # 404 when terminado is not installed, else 403
    ("GET", "/api/kernelspecs"),
]


@pytest.mark.parametrize(("method", "path"), SERVER_ROUTES, ids=lambda v: str(v))
def test_a_tenants_user_gets_nothing_of_jupyter_server(
    server: LiveServer, method: str, path: str
) -> None:
    with server.client("bob") as bob:
        answer = bob.request(method, path, json={} if method == "POST" else None)
    refused = (403, 404) if path == "/api/terminals" else (403,)
    assert answer.status_code in refused, answer.text[:200]
    assert "HXw" not in answer.text
    assert "signing" not in answer.text.lower()


def test_a_tenants_user_still_has_nbcast(server: LiveServer) -> None:
    grant_url(load_settings(dict(server.env)).database_url, "globex", "jupyter:bob", "viewer")
    with server.client("bob") as bob:
        assert bob.get("/nbcast/api/v1/health").status_code == 200
        assert bob.get("/nbcast/api/v1/definitions").status_code == 200


def test_the_operator_keeps_the_server(server: LiveServer) -> None:
    with server.client(None) as operator:
        assert operator.get("/api/contents").status_code == 200
        assert operator.get("/api/kernelspecs").status_code == 200


def test_operators_may_be_named() -> None:
    authorizer = NbcastAuthorizer(operators=["ops"])
    from jupyter_server.auth.identity import User

    assert authorizer.is_authorized(None, User("bob"), "read", "nbcast")
    assert not authorizer.is_authorized(None, User("bob"), "execute", "kernels")
    assert authorizer.is_authorized(None, User("ops"), "execute", "kernels")


def test_the_servers_own_token_acts_as_its_owner(server: LiveServer) -> None:
    """jupyter-server's identity for its shared token (a random "Anonymous …" per
    browser) is the server's owner, who operates a fresh home: every tenant is theirs
    to list, and not a tenant's user's."""
    from jupyter_server.auth.identity import User

    anonymous = User(username="0123456789abcdef" * 2, name="Anonymous Io")
    tenants = {"alice": "acme"}
    assert caller_for(anonymous, tenants, "default", "owner") == Caller(
        tenant="default", user="owner"
    )
    assert caller_for(User("alice"), tenants, "default", "owner") == Caller(
        tenant="acme", user="jupyter:alice"
    )
    with server.client(None) as owner:
        listed = owner.get("/nbcast/api/v1/tenants")
    assert listed.status_code == 200, listed.text
    assert "default" in {t["name"] for t in listed.json()["items"]}
    with server.client("bob") as bob:
        assert bob.get("/nbcast/api/v1/tenants").status_code == 403


def test_a_huge_body_is_refused_before_it_is_buffered(server: LiveServer) -> None:
    body = b"x" * (48 * 1024 * 1024)
    try:
        answer = httpx.post(f"{server.url}/nbcast/unsubscribe/anything", content=body, timeout=60)
    except httpx.TransportError:
        pass  # the server closed the connection: refused, not read
    else:
        assert answer.status_code in (400, 413), answer.status_code
    with server.client() as owner:
        assert owner.get("/nbcast/api/v1/health").status_code == 200
