"""The isolation matrix: every documented API operation, as tenant B on tenant A's
objects, without credentials, and with a bad body — never the object, never a 5xx,
never a written row.

The cases are made at collection time from
:func:`nbcast.server_extension.routes.registered`, so a route added later is in the
matrix without anyone editing this file. Path parameters are filled with alice's
(tenant acme) real objects by name (:data:`ALICE_VALUES`); a parameter of another
name gets alice's run id (integers) or her definition's name (strings).

Nothing written is checked by a digest of every row of every table (heartbeats
aside) before and after each request.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
import sqlalchemy as sa

from nbcast.db import Database
from nbcast.server_extension.routes import Operation, Route, registered
from tests.server.live import LiveServer
from tests.server.seed import Seeded, database, seed

CASES = [
    pytest.param(r, op, id=f"{op.method.upper()} {r.path.removeprefix('/nbcast/api/v1')}")
    for r in registered()
    if r.documented
    for op in r.operations
]
WITH_PATH = [c for c in CASES if "{" in c.values[0].path]  # type: ignore[union-attr]
WITH_BODY = [c for c in CASES if c.values[1].body is not None]  # type: ignore[union-attr]

UNTRACKED = {"service_heartbeats", "alembic_version"}
"""Tables a request may not write either, but that services beat into by themselves."""

BAD_BODIES = [b"{not json", b"[]", b'"a string"', b"", b'{"a": 1, "a": 2}', b"\xff\xfe"]


@pytest.fixture(scope="module")
def objects(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Alice's objects, by the path parameter names that name them."""
    seeded: Seeded = seed(server, tmp_path_factory.mktemp("notebooks"))
    with server.client("alice") as alice:
        run = alice.get(f"/nbcast/api/v1/runs/{seeded.succeeded}").json()
    [html] = [r for r in run["renditions"] if r["format"] == "html"]
    return {
        "run_id": seeded.succeeded,
        "rendition_id": html["id"],
        "delivery_id": run["deliveries"][0]["id"],
        "name": "sales",
        "definition": "sales",
        "tenant": "acme",
        "version": 1,
        "a": 1,
        "b": 1,
    }


@pytest.fixture(scope="module")
def db(server: LiveServer, objects: dict[str, Any]) -> Iterator[Database]:
    database_ = database(server)
    yield database_
    database_.dispose()


def digest(db: Database) -> str:
    """Every row of every tracked table, hashed."""
    h = hashlib.sha256()
    with db.engine.connect() as connection:
        for table in sorted(sa.inspect(connection).get_table_names()):
            if table in UNTRACKED:
                continue
            rows = connection.execute(sa.text(f'SELECT * FROM "{table}" ORDER BY 1')).all()
            h.update(f"{table}:{len(rows)}:{rows!r}\n".encode())
    return h.hexdigest()


def url_for(route: Route, op: Operation, objects: dict[str, Any], *, missing: bool = False) -> str:
    """The operation's URL on alice's objects (or, ``missing``, on objects that do not
    exist), with its required query parameters."""

    def value(match: re.Match[str]) -> str:
        name = match.group(1)
        [param] = [p for p in op.params if p.name == name and p.where == "path"]
        integer = param.schema.get("type") == "integer"
        if missing:
            return "987654321" if integer else "no-such-thing"
        if name in objects:
            return str(objects[name])
        return str(objects["run_id"] if integer else objects["name"])

    path = re.sub(r"\{(\w+)\}", value, route.path)
    query = {
        p.name: str(objects.get(p.name, example(p.schema)))
        for p in op.params
        if p.where == "query" and p.required
    }
    return str(httpx.URL(path, params=query))


def example(schema: dict[str, Any]) -> Any:
    """A plausible value of a required query parameter."""
    if "enum" in schema:
        return schema["enum"][0]
    if schema.get("type") == "integer":
        return max(1, schema.get("minimum", 1))
    return {"date-time": "2026-01-05T00:00:00Z", "date": "2026-01-05"}.get(
        schema.get("format", ""), "x"
    )


def send(
    client: httpx.Client, op: Operation, url: str, body: bytes | None = None
) -> httpx.Response:
    if body is None and op.body is not None:
        body = b"{}"
    headers = {"Content-Type": "application/json"} if body is not None else {}
    return client.request(op.method.upper(), url, content=body, headers=headers)


def test_the_matrix_covers_the_api() -> None:
    paths = {c.values[0].path for c in WITH_PATH}  # type: ignore[union-attr]
    assert "/nbcast/api/v1/runs/{run_id}" in paths
    assert "/nbcast/api/v1/tenants/{tenant}/quota" in paths
    assert len(WITH_PATH) >= 8


@pytest.mark.parametrize(("route", "op"), WITH_PATH)
def test_another_tenant_finds_nothing(
    route: Route, op: Operation, server: LiveServer, objects: dict[str, Any], db: Database
) -> None:
    url = url_for(route, op, objects)
    with server.client("bob") as bob, server.client("root") as root:
        before = digest(db)
        answer = send(bob, op, url)
        assert digest(db) == before, f"bob's {op.method.upper()} {url} wrote rows"
        assert answer.status_code < 500, answer.text
        assert set(answer.json()) == {"error"}, answer.text
        # The operators' routes too: to anyone else, a tenant not their own is one
        # that does not exist.
        nothing = send(bob, op, url_for(route, op, objects, missing=True))
        strict = op.body is None and not any(p.required for p in op.params if p.where == "query")
        if strict or answer.status_code == 404:
            assert answer.status_code == 404, answer.text
            assert answer.json()["error"]["code"] == "not_found"
        else:
            # Refused before the lookup (the `{}` body is not enough): the same
            # answer as for an object that does not exist, so nothing is told.
            assert 400 <= answer.status_code < 500, answer.text
            assert nothing.status_code == answer.status_code
            assert nothing.json()["error"]["code"] == answer.json()["error"]["code"]
        if op.method == "get":
            # The control: the object is real, and its owner's tenant sees it.
            with server.client("alice") as alice:
                own = send(alice, op, url)
            assert own.status_code != 404, (url, own.text)
            assert own.status_code < 500, own.text
        del root


@pytest.mark.parametrize(("route", "op"), CASES)
def test_no_credentials_no_answer(
    route: Route, op: Operation, server: LiveServer, objects: dict[str, Any], db: Database
) -> None:
    url = url_for(route, op, objects)
    before = digest(db)
    # A connection each: a refused streamed body (the notebook check) is answered
    # without being read, and the server then closes that connection.
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        answer = send(anonymous, op, url)
    with httpx.Client(base_url=server.url, timeout=30) as anonymous:
        forged = anonymous.request(
            op.method.upper(), url, headers={"Authorization": "token not-a-token"}
        )
    assert answer.status_code in (401, 403), answer.text
    assert forged.status_code in (401, 403), forged.text
    assert set(answer.json()) == {"error"}
    assert digest(db) == before


@pytest.mark.parametrize(("route", "op"), WITH_BODY)
@pytest.mark.parametrize("body", BAD_BODIES, ids=lambda b: repr(b)[:20])
def test_a_bad_body_writes_nothing(
    body: bytes,
    route: Route,
    op: Operation,
    server: LiveServer,
    objects: dict[str, Any],
    db: Database,
) -> None:
    url = url_for(route, op, objects)
    with server.client("root" if op.admin else "alice") as owner:
        before = digest(db)
        answer = send(owner, op, url, body)
        assert digest(db) == before, f"{op.method.upper()} {url} with {body!r} wrote rows"
    assert 400 <= answer.status_code < 500, answer.text
    assert set(answer.json()) == {"error"}, answer.text
