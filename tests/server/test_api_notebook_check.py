"""``POST /nbcast/api/v1/notebooks/check`` against a live server: what publishing would
do, with nothing written — the parameter schema, the first refusal with its field, the
next fire times with their DST notes, and the published definition of that name (its
version, and whether the notebook equals it), another tenant's never shown.

The server's clock is fixed at 2026-10-23 12:00 UTC, two days before Europe/Berlin
falls back, so a nightly 02:30 Berlin schedule has a DST note among its next fires.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.server.live import LiveServer
from tests.server.test_api_definitions import conforms, nbcast, notebook

API = "/nbcast/api/v1"
PATH = "/nbcast/api/v1/notebooks/check"
READS_FILES = "--NbcastAuthorizer.operators=alice"
"""alice may read the server's files (publish by path); bob may not."""
NOW = "2026-10-23T12:00:00Z"
PARAMETERS = 'region = "EMEA"  # the sales region\ntop_n: int = 5\n'
BLOCK = {
    "name": "nightly",
    "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"},
    "parameters": {"region": {"$period": "slot", "format": "%Y-%m"}},
    "subscriptions": [{"channel": "email", "to": "cfo@example.com"}],
}


def report(block: dict[str, Any] | None = None) -> dict[str, Any]:
    nb = notebook(copy.deepcopy(BLOCK if block is None else block), PARAMETERS, "print(region)")
    nb["cells"][0]["metadata"]["tags"] = ["parameters"]
    return nb


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("check-api")
    with LiveServer(
        folder,
        users={"alice": "acme", "bob": "globex"},
        env={"NBCAST_CLOCK": f"fixed:{NOW}"},
        extra=(READS_FILES,),
    ) as live:
        for tenant in ("acme", "globex"):
            nbcast(live, "tenants", "create", tenant)
        yield live


@pytest.fixture(scope="module")
def document(server: LiveServer) -> dict[str, Any]:
    with server.client() as client:
        return dict(client.get(f"{API}/openapi.json").json())


@pytest.fixture
def alice(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client("alice") as client:
        yield client


def check(client: httpx.Client, document: dict[str, Any], **body: Any) -> dict[str, Any]:
    return dict(conforms(document, client.post(PATH, json=body), PATH, "post"))


def test_a_valid_notebook_shows_its_schema_and_next_fires(
    alice: httpx.Client, document: dict[str, Any]
) -> None:
    result = check(alice, document, notebook=report(), path="reports/nightly.ipynb")
    assert result["name"] == "nightly"
    assert result["problem"] is None
    assert result["published"] is None
    assert result["parameters"] == [
        {
            "name": "region",
            "type": "str",
            "default": "EMEA",
            "help": "the sales region",
            "allowed": None,
        },
        {"name": "top_n", "type": "int", "default": 5, "help": "", "allowed": None},
    ]
    # What the bound region resolves to in the next three slots, as a run would get it.
    assert [(b["slot_key"], b["parameters"]) for b in result["bound"]] == [
        ("2026-10-24T02:30", {"region": "2026-10"}),
        ("2026-10-25T02:30", {"region": "2026-10"}),
        ("2026-10-26T02:30", {"region": "2026-10"}),
    ]
    assert [(f["local"], f["note"]) for f in result["next_fires"]] == [
        ("2026-10-24T02:30:00+02:00", None),
        (
            "2026-10-25T02:30:00+02:00",
            "02:30 happens twice on 2026-10-25: runs the first pass only (CEST)",
        ),
        ("2026-10-26T02:30:00+01:00", None),
        ("2026-10-27T02:30:00+01:00", None),
        ("2026-10-28T02:30:00+01:00", None),
    ]
    assert {"email", "slack", "webhook", "link"} <= set(result["channels"])
    assert {"html", "pdf", "xlsx", "csv"} <= set(result["formats"])


def test_the_first_refusal_names_its_field_and_nothing_is_written(
    server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    cases = [
        ({**BLOCK, "schedule": {"cron": "30 2 * * *", "timezone": "Mars/Olympus"}},
         "schedule.timezone", "'Mars/Olympus' is not an IANA time zone"),
        ({**BLOCK, "schedule": {"cron": "61 * * * *"}}, "schedule.cron", None),
        ({**BLOCK, "subscriptions": [{"channel": "email", "to": "nobody"}]},
         "subscriptions[0].to", "'nobody' is not an email address"),
        ({**BLOCK, "parameters": {"top_n": "five"}}, "parameters.top_n", None),
        ({**BLOCK, "outputs": ["docx"]}, "outputs[0]", None),
        ({**BLOCK, "colour": "red"}, "colour", None),
    ]  # fmt: skip
    for block, field, message in cases:
        result = check(alice, document, notebook=report(block))
        assert result["problem"]["field"] == field, (block, result["problem"])
        if message is not None:
            assert result["problem"]["message"] == message
        # The schema is still there for the form, and the name when it is valid.
        assert [p["name"] for p in result["parameters"]] == ["region", "top_n"]
        assert result["name"] == "nightly"
        assert result["next_fires"] == []
    assert alice.get(f"{API}/definitions").json()["items"] == []
    # A block that is not a mapping, a webhook the deployment forbids (as publishing
    # refuses it), a parameters cell too long to read: each a problem, never a 500.
    for block in ("abc", [1], True, 5):
        nb = report()
        nb["metadata"]["nbcast"] = block
        odd = check(alice, document, notebook=nb)
        assert odd["problem"]["field"] == "nbcast", (block, odd["problem"])
        assert odd["name"] is None
    hook = {**BLOCK, "subscriptions": [{"channel": "webhook", "to": "http://127.0.0.1:1/x"}]}
    refused = check(alice, document, notebook=report(hook))["problem"]
    assert refused["field"] == "subscriptions[0].to"
    published = alice.post(f"{API}/definitions", json={"notebook": report(hook)})
    assert (published.status_code, published.json()["error"]["field"]) == (
        400,
        "subscriptions[0].to",
    )
    long_cell = report()
    long_cell["cells"][0]["source"] = ["x = 1\n"] * 20_000
    too_long = check(alice, document, notebook=long_cell)["problem"]
    assert too_long == {
        "field": "parameters",
        "message": "parameters cell: the cell is 120,000 characters, over the limit of "
        "100,000 (a parameters cell holds a few assignments)",
    }
    broken = check(alice, document, notebook={"cells": "none"})
    assert broken["problem"]["field"] == "notebook"
    assert broken["parameters"] == []


def test_a_published_notebook_shows_its_version_and_whether_it_changed(
    server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    published = alice.post(f"{API}/definitions", json={"notebook": report(), "message": "v1"})
    assert published.status_code == 201, published.text
    same = check(alice, document, notebook=report())
    assert same["published"] == {
        "name": "nightly",
        "latest_version": 1,
        "source_path": "api:nightly",
        "this_file": False,
        "paused": False,
        "same": True,
    }
    edited = report()
    edited["cells"][1]["source"] = "print(region, top_n)"
    assert check(alice, document, notebook=edited)["published"]["same"] is False
    # A refused block still finds the definition by its name (not the same, of course).
    refused = check(alice, document, notebook=report({**BLOCK, "outputs": []}))
    assert refused["problem"]["field"] == "outputs"
    assert (refused["published"]["latest_version"], refused["published"]["same"]) == (1, False)
    # Published from a file: the check of that path says the definition is bound to it.
    (server.folder / "reports").mkdir(exist_ok=True)
    file_block = {**BLOCK, "name": "from-file"}
    (server.folder / "reports" / "f.ipynb").write_text(json.dumps(report(file_block)))
    by_path = alice.post(f"{API}/definitions", json={"path": "reports/f.ipynb"})
    assert by_path.status_code == 201, by_path.text
    mine = check(alice, document, notebook=report(file_block), path="reports/f.ipynb")
    elsewhere = check(alice, document, notebook=report(file_block), path="other/f.ipynb")
    assert (mine["published"]["this_file"], mine["published"]["same"]) == (True, True)
    assert elsewhere["published"]["this_file"] is False
    # The bound file is shown relative to the server's root, never as its absolute path.
    assert mine["published"]["source_path"] == "reports/f.ipynb"
    assert str(server.folder) not in json.dumps(mine)
    # Another tenant's definition of that name is not there for bob.
    with server.client("bob") as bob:
        assert check(bob, document, notebook=report())["published"] is None


def test_the_browser_zone_is_answered_as_a_schedule_may_name_it(
    alice: httpx.Client, document: dict[str, Any]
) -> None:
    answers = {
        zone: check(alice, document, notebook=report(), timezone=zone)["timezone"]
        for zone in ("Europe/Berlin", "Asia/Calcutta", "US/Eastern", "UTC", "Mars/Olympus")
    }
    assert answers == {
        "Europe/Berlin": "Europe/Berlin",
        "Asia/Calcutta": "Asia/Kolkata",
        "US/Eastern": "America/New_York",
        "UTC": "UTC",
        "Mars/Olympus": None,
    }
    zones = check(alice, document, notebook=report())["zones"]
    assert {"Europe/Berlin", "Asia/Kolkata", "UTC", "Etc/GMT+5"} <= set(zones)
    assert not {"Asia/Calcutta", "US/Eastern", "localtime"} & set(zones)
    assert zones == sorted(zones)


def test_a_bad_request_is_a_400_naming_its_field(
    alice: httpx.Client, document: dict[str, Any]
) -> None:
    for body, field in (
        ({}, "notebook"),
        ({"notebook": []}, "notebook"),
        ({"notebook": report(), "colour": 1}, "colour"),
        ({"notebook": report(), "path": 7}, "path"),
        ({"notebook": report(), "path": "x" * 1025}, "path"),
        ({"notebook": report(), "name": "n" * 201}, "name"),
        ({"notebook": report(), "timezone": "Z" * 65}, "timezone"),
        ({"notebook": report(), "timezone": ["UTC"]}, "timezone"),
    ):
        answer = alice.post(PATH, json=body)
        assert answer.status_code == 400, (body, answer.text)
        assert conforms(document, answer, PATH, "post")["error"]["field"] == field
