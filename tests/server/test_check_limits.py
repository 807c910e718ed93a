"""``POST /notebooks/check`` is bounded (:mod:`nbcast.server_extension.check_limits`),
against a live server: an author in an existing tenant only, before anything is
parsed; a body over the cap refused before it is kept, with a clean 413; what the JSON
would build counted before it is built; heavy checks limited per user (in flight and
per minute), with 429 and a bounded ``Retry-After``.

No figure here: memory and latency under load are measured by
``benchmarks/check_load.py``.
"""

from __future__ import annotations

import json
import math
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from nbcast.config import load_settings
from tests.members import grant_url
from tests.server.live import LiveServer
from tests.server.test_api_definitions import nbcast, notebook

PATH = "/nbcast/api/v1/notebooks/check"
CAP = 8 * 1024 * 1024
"""The default cap: twice NBCAST_MAX_NOTEBOOK_BYTES (4 MiB)."""
MAX_CHECK_CELLS = 10_000
MAX_CHECK_CONTAINERS = 200_000
HEAVY_CHECKS_PER_MINUTE = 20
"""The documented bounds (README, "Limits and hostile input";
:mod:`nbcast.server_extension.check_limits`), written out: a change to them is a
change to the documented behaviour."""


PER_MINUTE = 3
"""The test server's large checks a user may start a minute."""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """alice an admin of acme, erin an author and carol a viewer there, bob an author of
    globex, dave mapped to a tenant nobody created."""
    folder: Path = tmp_path_factory.mktemp("check-limits")
    users = {"alice": "acme", "carol": "acme", "erin": "acme", "bob": "globex", "dave": "nowhere"}
    # Three large checks a minute: a burst of four overruns it however slowly each one
    # is answered on a busy machine (a refill takes 20 s).
    extra = (f"--NbcastApp.heavy_checks_per_minute={PER_MINUTE}",)
    with LiveServer(folder, users=users, extra=extra) as live:
        for tenant in ("acme", "globex"):
            nbcast(live, "tenants", "create", tenant)
        url = load_settings(dict(live.env)).database_url
        grant_url(url, "acme", "jupyter:alice", "admin")
        grant_url(url, "acme", "jupyter:carol", "viewer")
        grant_url(url, "acme", "jupyter:erin", "author")
        grant_url(url, "globex", "jupyter:bob", "author")
        yield live


def small() -> dict[str, Any]:
    return {"notebook": notebook({"name": "small"}, "x = 1")}


def error_of(answer: httpx.Response) -> dict[str, Any]:
    assert answer.headers["content-type"].startswith("application/json"), answer.text[:200]
    return dict(answer.json()["error"])


def test_an_author_checks(server: LiveServer) -> None:
    with server.client("alice") as alice:
        answer = alice.post(PATH, json=small())
    assert answer.status_code == 200, answer.text
    assert answer.json()["name"] == "small"


@pytest.mark.parametrize(
    "user", ["carol", "dave"], ids=["a-viewer", "a-tenant-that-does-not-exist"]
)
@pytest.mark.parametrize(
    "body",
    [json.dumps(small()).encode(), b"{not json", b'{"notebook": ' + b"[" * 100_000],
    ids=["valid", "not-json", "deep"],
)
def test_only_an_author_in_an_existing_tenant_before_any_parsing(
    server: LiveServer, user: str, body: bytes
) -> None:
    with server.client(user) as client:
        answer = client.post(PATH, content=body, headers={"Content-Type": "application/json"})
    assert answer.status_code == 403, answer.text
    assert error_of(answer)["code"] == "forbidden"


def test_a_body_over_the_cap_is_refused_cleanly_whether_declared_or_not(
    server: LiveServer,
) -> None:
    head = b'{"notebook": {"cells": [], "metadata": {"x": "'
    body = head + b"a" * (CAP + 1024) + b'"}, "nbformat": 4, "nbformat_minor": 5}}'
    with server.client("alice", timeout=120) as alice:
        declared = alice.post(PATH, content=body, headers={"Content-Type": "application/json"})
        streamed = alice.post(
            PATH,
            content=(body[i : i + 65536] for i in range(0, len(body), 65536)),
            headers={"Content-Type": "application/json"},
        )
        after = alice.post(PATH, json=small())  # the server and the user are not held up
    for answer in (declared, streamed):
        assert answer.status_code == 413, answer.text[:300]
        error = error_of(answer)
        assert error["code"] == "too_large"
        assert "8,388,608 bytes" in error["message"]
    assert after.status_code == 200


def test_what_the_json_would_build_is_counted_before_it_is_built(server: LiveServer) -> None:
    many_cells = notebook({"name": "cells"})
    many_cells["cells"] = [
        {"cell_type": "raw", "id": f"c{i}", "metadata": {}, "source": ""}
        for i in range(MAX_CHECK_CELLS + 1)
    ]
    nested = notebook({"name": "lists"})
    nested["metadata"]["x"] = [[] for _ in range(MAX_CHECK_CONTAINERS)]
    escaped = json.dumps({"notebook": many_cells}).replace('"cell_type"', '"cell\\u005ftype"')
    with server.client("alice", timeout=120) as alice:
        cells = alice.post(PATH, json={"notebook": many_cells})
        lists = alice.post(PATH, json={"notebook": nested})
        disguised = alice.post(
            PATH, content=escaped.encode(), headers={"Content-Type": "application/json"}
        )
    assert (cells.status_code, error_of(cells)["code"]) == (413, "too_large")
    assert "10,000 cells" in error_of(cells)["message"]
    assert (lists.status_code, error_of(lists)["code"]) == (413, "too_large")
    assert "200,000 JSON objects and arrays" in error_of(lists)["message"]
    # Keys written with escapes are not seen in the raw bytes: counted once parsed.
    assert (disguised.status_code, error_of(disguised)["message"]) == (
        413,
        "the notebook has more than 10,000 cells",
    )


def _slow_body(release: threading.Event) -> Iterator[bytes]:
    """A chunked body (no length: a heavy check) that waits for ``release``."""
    text = json.dumps(small()).encode()
    yield text[:10]
    release.wait(60)
    yield text[10:]


def test_one_heavy_check_per_user_in_flight(server: LiveServer) -> None:
    release = threading.Event()
    first: list[httpx.Response] = []

    def slow() -> None:
        with server.client("bob", timeout=120) as bob:
            first.append(bob.post(PATH, content=_slow_body(release)))

    thread = threading.Thread(target=slow)
    thread.start()
    try:
        refused = None
        with server.client("bob") as bob, server.client("alice") as alice:
            for _ in range(200):  # until the server has taken the first one in
                answer = bob.post(PATH, content=iter([json.dumps(small()).encode()]))
                if answer.status_code == 429:
                    refused = answer
                    break
                time.sleep(0.05)
            # Another user is not held up by bob's check.
            other = alice.post(PATH, content=iter([json.dumps(small()).encode()]))
        assert refused is not None, "a second heavy check of the same user was let in"
        assert error_of(refused) == {
            "code": "too_many_requests",
            "message": "another large check of yours is in progress: try again in 1 s",
            "field": None,
        }
        assert refused.headers["retry-after"] == "1"
        assert other.status_code == 200, other.text
    finally:
        release.set()
        thread.join(60)
    assert first[0].status_code == 200, first[0].text
    with server.client("bob") as bob:  # its place is given back
        again = bob.post(PATH, content=iter([json.dumps(small()).encode()]))
        assert again.status_code == 200, again.text


def test_heavy_checks_per_user_per_minute(server: LiveServer) -> None:
    long = notebook({"name": "heavy"}, "")
    long["cells"][0]["source"] = [
        f"x_{i} = {i}  # a line of a long notebook\n" for i in range(30_000)
    ]
    heavy = json.dumps({"notebook": long})
    assert len(heavy) > 1024 * 1024
    statuses: list[int] = []
    with server.client("erin", timeout=60) as erin:
        for _ in range(PER_MINUTE * 3):
            answer = erin.post(
                PATH, content=heavy.encode(), headers={"Content-Type": "application/json"}
            )
            statuses.append(answer.status_code)
            if answer.status_code == 429:
                break
        light = erin.post(PATH, json=small())  # a light check is never refused for load
    assert statuses[-1] == 429, statuses
    assert set(statuses[:-1]) == {200}
    assert len(statuses) > PER_MINUTE  # the burst was let through
    message = error_of(answer)["message"]
    assert message.startswith(f"more than {PER_MINUTE} large checks of yours")
    # The wait is the bucket's refill of one check: at least a second, at most 60 s
    # divided by the rate (20 s at 3 a minute), never the whole minute.
    refill_s = math.ceil(60 / PER_MINUTE)
    retry_after = int(answer.headers["retry-after"])
    assert retry_after >= 1, answer.headers
    assert retry_after <= refill_s, (retry_after, refill_s)
    assert light.status_code == 200


def test_nothing_above_was_a_server_error(server: LiveServer) -> None:
    log = server.log()
    assert "Traceback" not in log
    assert not [line for line in log.splitlines() if "] 500 " in line]


def test_the_default_rate_is_the_documented_one() -> None:
    from nbcast.server_extension import check_limits
    from nbcast.server_extension.app import NbcastApp
    from nbcast.server_extension.state import ServerOptions

    assert check_limits.HEAVY_CHECKS_PER_MINUTE == HEAVY_CHECKS_PER_MINUTE
    assert NbcastApp.heavy_checks_per_minute.default_value == HEAVY_CHECKS_PER_MINUTE
    assert ServerOptions().heavy_checks_per_minute == HEAVY_CHECKS_PER_MINUTE
