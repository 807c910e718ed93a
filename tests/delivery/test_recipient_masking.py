"""Webhook URLs are secrets: the command layer's records show them whole to the
tenant's admins only, and masked (``http://host/…a1b2``) to authors and viewers — in
ledger rows and their errors, signed links, definitions, versions, their stored
notebooks and diffs — on SQLite and PostgreSQL, and so does the CLI. A masked URL
cannot be published back.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nbcast.access import Caller
from nbcast.cli import main
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.diff import diff_versions
from nbcast.definitions.diff_render import render_diff
from nbcast.definitions.notebook import canonical_json
from nbcast.definitions.queries import get_version, list_versions
from nbcast.definitions.recipients import Disclosure, mask_url
from nbcast.definitions.spec import parse_spec
from nbcast.definitions.versions import publish
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.delivery.queries import deliveries_of_run, list_deliveries, list_links
from nbcast.errors import MetadataError
from nbcast.views.definitions import get_definition, list_definitions
from nbcast.views.runs import get_run
from tests.delivery.plane import LOOPBACK, Plane
from tests.members import grant
from tests.notebooks import make_notebook

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
SECRET = "s3cr3t-token"
HOOK = f"http://127.0.0.1:9/hooks/{SECRET}-a1b2"
"""A webhook the test policy lets a definition name; sending refuses it (plain
http), so its ledger row fails with the URL quoted in its error."""
MASKED = "http://127.0.0.1:9/…a1b2"
NEXT_HOOK = f"http://127.0.0.1:9/hooks/{SECRET}-other-c3d4"
MASKED_NEXT = "http://127.0.0.1:9/…c3d4"

ADMIN, AUTHOR, VIEWER = "ada", "al", "vic"
ROLES = {ADMIN: "admin", AUTHOR: "author", VIEWER: "viewer"}


def caller(user: str) -> Caller:
    return Caller(tenant="default", user=user)


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    """Sales, delivered by webhook (refused when sent) and link, published twice (the
    second version names another webhook), with a member of each role."""
    made = Plane(db, FixedClock(T0), tmp_path)
    for user, role in ROLES.items():
        grant(db, "default", user, role)
    grant(db, "default", "t")  # the publisher, an author
    subscriptions = [
        {"channel": "webhook", "to": HOOK},
        {"channel": "link", "to": "cfo@example.com"},
    ]
    made.publish("sales", subscriptions)
    made.succeed("sales")
    with WebhookChannel("whsec_test") as hooks:  # https only: the http URL is refused
        made.pump(made.ledger({"webhook": hooks, "link": LinkChannel()}), made.renders())
    made.publish("sales", [{**subscriptions[0], "to": NEXT_HOOK}, subscriptions[1]])
    return made


def everything(plane: Plane, user: str) -> dict[str, Any]:
    """What each query of the delivery and definition read models gives ``user``."""
    who = caller(user)
    with plane.db.session() as session:
        [run_id] = {d.run_id for d in list_deliveries(session, who).items}
        old, new = get_version(session, who, "sales", 1), get_version(session, who, "sales", 2)
        return {
            "deliveries": [d.to_json() for d in list_deliveries(session, who).items],
            "run": get_run(session, who, run_id).to_json(),
            "of_run": [d.to_json() for d in deliveries_of_run(session, who, run_id)],
            "links": [link.to_json() for link in list_links(session, who).items],
            "definitions": [d.block for d in list_definitions(session, who).items],
            "definition": get_definition(session, who, "sales").block,
            "version": new.to_json(with_notebook=True),
            "versions": [
                v.to_json(with_notebook=True) for v in list_versions(session, who, "sales")
            ],
            "diff": diff_versions(old, new),
            "diff_text": render_diff(old, new),
        }


@pytest.mark.parametrize("user", [AUTHOR, VIEWER])
def test_only_admins_see_webhook_urls_whole(plane: Plane, user: str) -> None:
    seen = everything(plane, user)
    assert SECRET not in json.dumps(seen, ensure_ascii=False)
    rows = {d["channel"]: d for d in seen["deliveries"]}
    assert rows["webhook"]["recipient"] == MASKED
    assert rows["webhook"]["state"] == "FAILED"
    assert f"'{MASKED}' must start with https://" in rows["webhook"]["error"]["message"]
    assert rows["link"]["recipient"] == "cfo@example.com"  # not a URL: shown as it is
    assert {link["recipient"] for link in seen["links"]} == {MASKED, "cfo@example.com"}
    assert seen["definition"]["subscriptions"][0]["to"] == MASKED_NEXT
    assert seen["version"]["notebook"]["metadata"]["nbcast"]["subscriptions"][0]["to"] == (
        MASKED_NEXT
    )
    assert MASKED in seen["diff_text"]
    assert MASKED_NEXT in seen["diff_text"]

    whole = everything(plane, ADMIN)  # the same records, for an admin
    rows = {d["channel"]: d for d in whole["deliveries"]}
    assert rows["webhook"]["recipient"] == HOOK
    assert HOOK in rows["webhook"]["error"]["message"]
    assert {link["recipient"] for link in whole["links"]} == {HOOK, "cfo@example.com"}
    assert whole["definition"]["subscriptions"][0]["to"] == NEXT_HOOK
    assert whole["version"]["notebook"]["metadata"]["nbcast"]["subscriptions"][0]["to"] == (
        NEXT_HOOK
    )
    assert HOOK in whole["diff_text"]
    assert NEXT_HOOK in whole["diff_text"]


def test_a_masked_version_still_parses(plane: Plane) -> None:
    with plane.db.session() as session:
        info = get_version(session, caller(VIEWER), "sales")
    assert [s.to for s in info.spec.subscriptions] == [MASKED_NEXT, "cfo@example.com"]


def test_an_exported_masked_version_cannot_be_published_back(plane: Plane, tmp_path: Path) -> None:
    with plane.db.session() as session:
        block = get_version(session, caller(AUTHOR), "sales").block
    path = make_notebook(tmp_path / "again.ipynb", nbcast=block)
    with pytest.raises(MetadataError, match=r"subscriptions\[0\]\.to: .*masked webhook URL"):
        publish(plane.db, path, caller=caller(AUTHOR), environ=LOOPBACK)


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    code = main(list(argv))
    out, err = capsys.readouterr()
    assert code == 0, out + err
    return out + err


def _shown_by_the_cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    folder: Path,
    user: str,
    run_id: int,
) -> str:
    """Everything the CLI prints to ``user`` about the run and its definition."""
    monkeypatch.setenv("NBCAST_USER", user)
    exported = folder / f"exported-{user}.ipynb"
    return "\n".join(
        [
            _cli(capsys, "deliveries", "list"),
            _cli(capsys, "deliveries", "list", "--json"),
            _cli(capsys, "links", "list", "--json"),
            _cli(capsys, "runs", "show", str(run_id)),
            _cli(capsys, "runs", "show", str(run_id), "--json"),
            _cli(capsys, "definitions", "show", "sales"),
            _cli(capsys, "definitions", "show", "sales", "--json"),
            _cli(capsys, "diff", "sales", "1", "2", "--json"),
            _cli(capsys, "export", "sales", "-o", str(exported)),
            exported.read_text(),
        ]
    )


@pytest.mark.parametrize("user", [AUTHOR, VIEWER])
def test_the_cli_shows_webhook_urls_whole_to_admins_only(
    plane: Plane,
    user: str,
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    with plane.db.session() as session:
        [run_id] = {d.run_id for d in list_deliveries(session, caller(ADMIN)).items}
    shown = _shown_by_the_cli(capsys, monkeypatch, tmp_path, user, run_id)
    assert SECRET not in shown
    assert MASKED in shown
    assert MASKED_NEXT in shown
    rows = json.loads(_cli(capsys, "deliveries", "list", "--json"))
    assert [r["recipient"] for r in rows if r["channel"] == "webhook"] == [MASKED]

    whole = _shown_by_the_cli(capsys, monkeypatch, tmp_path, ADMIN, run_id)
    assert HOOK in whole
    assert NEXT_HOOK in whole


MASKS = {
    "slack_style": (
        "https://hooks.slack.com/services/T000/B000/XXXXa1b2",
        "https://hooks.slack.com/…a1b2",
    ),
    "port_kept": ("http://127.0.0.1:8080/hooks/nbcast", "http://127.0.0.1:8080/…cast"),
    "query_secret": ("https://h.example.com/hook?token=abcd9876", "https://h.example.com/…9876"),
    "host_only": ("https://hooks.example.com", "https://hooks.example.com/…"),
    "credentials_dropped": ("https://user:pw@h.example.com/x/yz", "https://h.example.com/…x/yz"),
}


@pytest.mark.parametrize(("url", "masked"), MASKS.values(), ids=MASKS)
def test_mask_url_shows_the_host_and_the_last_four_characters(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_urls_masked_alike_are_numbered_and_still_parse() -> None:
    block = {
        "outputs": ["html"],
        "subscriptions": [
            {"channel": "webhook", "to": "https://h.example.com/one/hook"},
            {"channel": "email", "to": "cfo@example.com"},
            {"channel": "webhook", "to": "https://h.example.com/two/hook"},
        ],
    }
    masked = Disclosure(whole=False).block(block)
    assert [s["to"] for s in masked["subscriptions"]] == [
        "https://h.example.com/…hook",
        "cfo@example.com",
        "https://h.example.com/…hook (2)",
    ]
    assert len(parse_spec(masked).subscriptions) == 3
    assert Disclosure(whole=True).block(block) == block


def test_a_stored_notebook_is_masked_as_parsing_it_would_mask_it() -> None:
    block = {
        "outputs": ["html"],
        "subscriptions": [
            {"channel": "webhook", "to": 'https://h.example.com/a\\b/"é"/hook'},
            {"channel": "email", "to": "cfo@example.com"},
            {"channel": "webhook", "to": "https://h.example.com/other/hook"},
        ],
    }
    notebook = {
        "cells": [{"cell_type": "markdown", "id": "c0", "metadata": {}, "source": "# Sales"}],
        "metadata": {"nbcast": block, "kernelspec": {"name": "python3"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    text = canonical_json(notebook)
    masked, changed = Disclosure(whole=False).notebook(notebook)
    assert changed
    assert Disclosure(whole=False).notebook_json(text, block) == canonical_json(masked)
    assert Disclosure(whole=True).notebook_json(text, block) == text
