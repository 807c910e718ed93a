"""The definitions API against a live server: list, show, versions, diff (JSON and
HTML), publish by contents path and by body, pause, resume, run now, backfill,
previews; another tenant's definition is not found; every JSON answer satisfies the
OpenAPI document's schema for its route.

The server's clock is fixed at 2026-10-23 12:00 UTC, two days before Europe/Berlin
falls back (02:00–03:00 happens twice on 2026-10-25), so a nightly 02:30 Berlin
schedule shows its DST note among its next three fire times.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import jsonschema
import nbformat
import pytest

from tests.server.live import LiveServer

BIN = Path(sys.executable).parent
API = "/nbcast/api/v1"
NOW = "2026-10-23T12:00:00Z"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    """A live server with a fixed clock; tenants acme (alice) and globex (bob)."""
    folder: Path = tmp_path_factory.mktemp("definitions-api")
    with LiveServer(
        folder,
        users={"alice": "acme", "bob": "globex", "root": "acme"},
        admins=("root",),
        env={"NBCAST_CLOCK": f"fixed:{NOW}"},
        extra=("--NbcastAuthorizer.operators=alice",),  # alice may read files: by path
    ) as live:
        for tenant in ("acme", "globex"):
            nbcast(live, "tenants", "create", tenant)
        yield live


def nbcast(live: LiveServer, *args: str, tenant: str | None = None) -> str:
    """Run the nbcast CLI against the server's home as the server's owner (the OS user
    who operates it); its stdout."""
    env = {k: v for k, v in live.env.items() if k != "NBCAST_TENANT"}
    if tenant is not None:
        env.update(NBCAST_TENANT=tenant)
    done = subprocess.run(
        [str(BIN / "nbcast"), *args], env=env, capture_output=True, text=True, cwd=live.folder
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def notebook(block: dict[str, Any], *sources: str) -> dict[str, Any]:
    """A notebook with the nbcast ``block`` and code cells ``sources``."""
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_code_cell(source) for source in sources]
    for index, cell in enumerate(nb.cells):
        cell["id"] = f"cell-{index}"
    nb.metadata["nbcast"] = block
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    return json.loads(json.dumps(nb))


NIGHTLY = {"name": "nightly", "schedule": {"cron": "30 2 * * *", "timezone": "Europe/Berlin"}}


# -- the OpenAPI document's schemas ----------------------------------------------------


@pytest.fixture(scope="module")
def document(server: LiveServer) -> dict[str, Any]:
    with server.client() as client:
        return dict(client.get(f"{API}/openapi.json").json())


def conforms(document: dict[str, Any], answer: httpx.Response, path: str, method: str) -> Any:
    """``answer``'s JSON, after checking it against the document's response schema for
    ``method path`` and its status (a status the document does not list fails)."""
    responses = document["paths"][path][method]["responses"]
    assert str(answer.status_code) in responses, (answer.status_code, answer.text)
    media = responses[str(answer.status_code)]["content"]["application/json"]
    body = answer.json()
    validator = jsonschema.Draft202012Validator(
        {**media["schema"], "components": document["components"]},
        format_checker=jsonschema.Draft202012Validator.FORMAT_CHECKER,
    )
    validator.validate(body)
    return body


@pytest.fixture(scope="module")
def alice(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client("alice") as client:
        yield client


@pytest.fixture(scope="module")
def published(server: LiveServer, alice: httpx.Client, document: dict[str, Any]) -> dict[str, Any]:
    """nightly, published by path through the contents manager, then ticked."""
    (server.folder / "reports").mkdir()
    nbformat.write(
        nbformat.from_dict(notebook(NIGHTLY, "print('nightly')")),
        str(server.folder / "reports" / "nightly.ipynb"),
    )
    answer = alice.post(f"{API}/definitions", json={"path": "reports/nightly.ipynb"})
    body = conforms(document, answer, "/nbcast/api/v1/definitions", "post")
    nbcast(server, "scheduler", "tick")
    return dict(body)


# -- tests -------------------------------------------------------------------------------


def test_publish_by_path_binds_the_file_and_answers_201(published: dict[str, Any]) -> None:
    assert published["created"] is True
    assert published["version"]["version"] == 1
    assert published["version"]["author"] == "jupyter:alice"  # the server's user alice
    assert published["definition"]["name"] == "nightly"
    assert published["definition"]["source_path"] == "reports/nightly.ipynb"  # not absolute


def test_the_list_shows_next_fires_with_the_dst_note(
    published: dict[str, Any], alice: httpx.Client, document: dict[str, Any]
) -> None:
    body = conforms(document, alice.get(f"{API}/definitions"), f"{API}/definitions", "get")
    (item,) = [d for d in body["items"] if d["name"] == "nightly"]
    assert item["cron"] == "30 2 * * *"
    assert item["every"] is None
    assert item["timezone"] == "Europe/Berlin"
    assert item["paused"] is False
    fires = item["next_fires"]
    assert [f["local"][:10] for f in fires][:2] == ["2026-10-24", "2026-10-25"]
    assert fires[0]["note"] is None
    assert fires[1]["note"].startswith("02:30 happens twice on 2026-10-25")


def test_the_list_pages_by_cursor(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    nbcast(server, "publish", str(Path("notebooks/examples/daily_sales.ipynb").resolve()),
           tenant="acme")  # fmt: skip
    first = conforms(
        document, alice.get(f"{API}/definitions", params={"limit": 1}), f"{API}/definitions", "get"
    )
    assert [d["name"] for d in first["items"]] == ["daily-sales"]
    assert first["next"]
    second = alice.get(f"{API}/definitions", params={"limit": 1, "after": first["next"]}).json()
    assert [d["name"] for d in second["items"]] == ["nightly"]
    for params, field in (
        ({"limit": 0}, "limit"),
        ({"limit": 501}, "limit"),
        ({"after": "x"}, "after"),
    ):
        answer = alice.get(f"{API}/definitions", params=params)
        assert answer.status_code == 400
        assert conforms(document, answer, f"{API}/definitions", "get")["error"]["field"] == field


def test_show_and_versions(
    server: LiveServer, published: dict[str, Any], alice: httpx.Client, document: dict[str, Any]
) -> None:
    path = f"{API}/definitions/{{name}}"
    body = conforms(document, alice.get(f"{API}/definitions/nightly"), path, "get")
    assert body["version"] == 1
    assert body["nbcast"] == NIGHTLY
    assert body["schedule"] == "30 2 * * * (Europe/Berlin)"
    assert len(body["next_fires"]) == 3
    # One detail record: the CLI prints what the API answers.
    shown = nbcast(server, "definitions", "show", "nightly", "--json", tenant="acme")
    assert json.loads(shown) == body
    versions = conforms(
        document, alice.get(f"{API}/definitions/nightly/versions"), f"{path}/versions", "get"
    )
    assert [v["version"] for v in versions["items"]] == [1]


def test_publish_by_body_then_diff_as_json_and_html(
    server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    block = {"name": "bodyrep"}
    v1 = notebook(block, "x = 1\n", "print(x)\n")
    v2 = notebook(block, "x = 2\n", "print(x)\n", "'<script>alert(1)</script>'\n")
    for nb, number in ((v1, 1), (v2, 2)):
        answer = alice.post(f"{API}/definitions", json={"notebook": nb, "message": f"v{number}"})
        body = conforms(document, answer, f"{API}/definitions", "post")
        assert (body["created"], body["version"]["version"]) == (True, number)
        assert body["definition"]["source_path"] == "api:bodyrep"
    again = alice.post(f"{API}/definitions", json={"notebook": v2}).json()
    assert (again["created"], again["version"]["version"]) == (False, 2)

    path = f"{API}/definitions/{{name}}/diff"
    answer = alice.get(f"{API}/definitions/bodyrep/diff", params={"a": 1, "b": 2})
    body = conforms(document, answer, path, "get")
    assert (body["a"], body["b"]) == (1, 2)
    expected = nbcast(server, "diff", "bodyrep", "1", "2", "--json", tenant="acme")
    assert body["diff"] == json.loads(expected)["diff"]

    # For nbdime's web components (the Lab tab): the same diff and version 1's notebook,
    # which applying the diff turns into version 2's (nbdime's own patch).
    from nbdime import patch
    from nbdime.diff_format import DiffEntry

    def entries(diff: list[dict[str, Any]]) -> list[DiffEntry]:
        return [DiffEntry(e, **({"diff": entries(e["diff"])} if "diff" in e else {})) for e in diff]

    rich = alice.get(f"{API}/definitions/bodyrep/diff", params={"a": 1, "b": 2, "format": "nbdime"})
    both = conforms(document, rich, path, "get")
    stored = alice.get(f"{API}/definitions/bodyrep/versions").json()["items"]
    assert both["diff"] == body["diff"]
    assert both["base"]["cells"][0]["source"] == "x = 1\n"
    [v1_sources, v2_sources] = [
        [c["source"] for c in nb["cells"]]
        for nb in (both["base"], patch(both["base"], entries(both["diff"])))
    ]
    assert v1_sources == ["x = 1\n", "print(x)\n"]
    assert v2_sources == ["x = 2\n", "print(x)\n", "'<script>alert(1)</script>'\n"]
    assert [v["version"] for v in stored] == [1, 2]

    page = alice.get(f"{API}/definitions/bodyrep/diff", params={"a": 1, "b": 2, "format": "html"})
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    assert "default-src 'none'" in page.headers["content-security-policy"]
    assert "<script" not in page.text
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page.text
    assert "cell 3 added" in page.text
    assert '<span class="del">- x = 1</span><span class="add">+ x = 2</span>' in page.text

    bad = alice.get(f"{API}/definitions/bodyrep/diff", params={"a": 1, "b": 9})
    assert bad.status_code == 404
    conforms(document, bad, path, "get")
    for params in ({"a": 1}, {"a": 1, "b": 2, "format": "pdf"}, {"a": "x", "b": 2}):
        assert alice.get(f"{API}/definitions/bodyrep/diff", params=params).status_code == 400


def test_a_refused_publish_names_the_field_and_writes_nothing(
    server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    bad = notebook({"name": "broken", "schedule": {"cron": "61 * * * *"}}, "1\n")
    answer = alice.post(f"{API}/definitions", json={"notebook": bad})
    body = conforms(document, answer, f"{API}/definitions", "post")
    assert answer.status_code == 400
    assert body["error"]["field"] == "schedule.cron"
    assert alice.get(f"{API}/definitions/broken").status_code == 404
    names = [d["name"] for d in alice.get(f"{API}/definitions").json()["items"]]
    assert "broken" not in names
    for request, field in (
        ({"path": "../outside.ipynb"}, "path"),
        ({"path": "reports"}, "path"),
        ({"path": "missing.ipynb"}, "path"),
        ({"path": "reports/nightly.ipynb", "notebook": bad}, "path"),
        ({"notebook": {"cells": "no"}}, None),
        ({"notebook": bad, "extra": 1}, "extra"),
    ):
        answer = alice.post(f"{API}/definitions", json=request)
        assert answer.status_code == 400, (request, answer.text)
        assert conforms(document, answer, f"{API}/definitions", "post")["error"]["field"] == field
    assert alice.get(f"{API}/definitions/broken").status_code == 404


def test_pause_and_resume(
    published: dict[str, Any], alice: httpx.Client, document: dict[str, Any]
) -> None:
    base = f"{API}/definitions/{{name}}"
    first = conforms(
        document, alice.post(f"{API}/definitions/nightly/pause"), f"{base}/pause", "post"
    )
    assert (first["paused"], first["changed"]) == (True, True)
    assert alice.post(f"{API}/definitions/nightly/pause").json()["changed"] is False
    assert alice.get(f"{API}/definitions/nightly").json()["paused"] is True
    resumed = conforms(
        document, alice.post(f"{API}/definitions/nightly/resume"), f"{base}/resume", "post"
    )
    assert (resumed["paused"], resumed["changed"]) == (False, True)
    assert alice.get(f"{API}/definitions/nightly").json()["paused"] is False
    assert alice.post(f"{API}/definitions/nightly/resume").json()["changed"] is False


def test_run_now_queues_a_manual_run(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    path = f"{API}/definitions/{{name}}/runs"
    answer = alice.post(f"{API}/definitions/nightly/runs", json={"at": "2026-10-22T09:00:00Z"})
    assert answer.status_code == 201
    (run_id,) = conforms(document, answer, path, "post")["run_ids"]
    runs = json.loads(nbcast(server, "runs", "list", "--json", tenant="acme"))
    (run,) = [r for r in runs if r["id"] == run_id]
    assert (run["definition"], run["kind"], run["state"]) == ("nightly", "manual", "QUEUED")
    for body, field in (
        ({"parameters": {"nope": 1}}, "parameters.nope"),
        ({"parameters": []}, "parameters"),
        ({"at": "yesterday"}, "at"),
        ({"when": 1}, "when"),
    ):
        refused = alice.post(f"{API}/definitions/nightly/runs", json=body)
        assert refused.status_code == 400, refused.text
        assert conforms(document, refused, path, "post")["error"]["field"] == field
    after = json.loads(nbcast(server, "runs", "list", "--json", tenant="acme"))
    assert len(after) == len(runs)


def test_backfill_takes_bare_dates_in_the_schedule_zone(
    published: dict[str, Any], alice: httpx.Client, document: dict[str, Any]
) -> None:
    path = f"{API}/definitions/{{name}}/backfill"
    week = {"from": "2026-10-12", "until": "2026-10-17"}
    body = conforms(
        document, alice.post(f"{API}/definitions/nightly/backfill", json=week), path, "post"
    )
    assert (body["slots"], body["inserted"], body["already_recorded"]) == (5, 5, 0)
    again = alice.post(f"{API}/definitions/nightly/backfill", json=week).json()
    assert (again["inserted"], again["already_recorded"]) == (0, 5)
    for request, field in (
        ({"from": "2026-10-12", "until": "2026-12-01"}, None),  # after the watermark
        ({"from": "2026-02-30", "until": "2026-10-17"}, "from"),
        ({"from": "2026-10-12"}, "until"),
    ):
        refused = alice.post(f"{API}/definitions/nightly/backfill", json=request)
        assert refused.status_code == 400, refused.text
        assert conforms(document, refused, path, "post")["error"]["field"] == field


def test_definition_preview_across_the_fall_back(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    path = f"{API}/definitions/{{name}}/preview"
    params = {"from": "2026-10-24", "until": "2026-10-27"}
    rows = conforms(
        document, alice.get(f"{API}/definitions/nightly/preview", params=params), path, "get"
    )
    cli = nbcast(
        server, "schedule", "preview", "--definition", "nightly", "--from", "2026-10-24",
        "--to", "2026-10-27", "--json", tenant="acme",
    )  # fmt: skip
    assert rows == json.loads(cli)
    assert [r["local"][:10] for r in rows].count("2026-10-25") >= 1
    assert {r["local"][19:] for r in rows} == {"+02:00", "+01:00"}
    too_many = alice.get(f"{API}/definitions/nightly/preview", params={**params, "limit": 1})
    assert too_many.status_code == 400
    conforms(document, too_many, path, "get")


def test_schedule_preview_matches_the_cli(
    server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    path = f"{API}/schedule/preview"
    params = {
        "cron": "30 2 * * *",
        "tz": "America/New_York",
        "from": "2026-03-07",
        "until": "2026-03-10",
        "dst_gap": "skip",
    }
    rows = conforms(document, alice.get(path, params=params), path, "get")
    cli = nbcast(
        server, "schedule", "preview", "--cron", "30 2 * * *", "--tz", "America/New_York",
        "--from", "2026-03-07", "--to", "2026-03-10", "--dst-gap", "skip", "--json",
    )  # fmt: skip
    # The CLI's rows, and what DST does to each (the Lab dialog shows these notes).
    assert [{k: v for k, v in r.items() if k != "note"} for r in rows] == json.loads(cli)
    assert [(r["status"], r["note"]) for r in rows] == [
        ("scheduled", None),
        ("skipped", "02:30 does not exist on 2026-03-08 (clocks go forward): skipped"),
        ("scheduled", None),
    ]
    fold = alice.get(
        path,
        params={
            "cron": "30 1 * * *",
            "tz": "America/New_York",
            "from": "2026-10-31",
            "until": "2026-11-02",
            "dst_fold": "both",
        },
    )
    assert [r["note"] for r in conforms(document, fold, path, "get")] == [
        None,
        "01:30 happens twice on 2026-11-01: runs both (EDT, then EST)",
        "01:30 happens twice on 2026-11-01: this is the second pass (EST)",
    ]
    every = alice.get(
        path, params={"every": "6h", "from": "2026-01-01T00:00:00Z", "until": "2026-01-02"}
    )
    assert [r["note"] for r in conforms(document, every, path, "get")] == [None] * 4
    for bad, field in (
        ({**params, "cron": "nope"}, "cron"),
        ({**params, "every": "1h"}, "cron"),
        ({**params, "tz": "Mars/Olympus"}, "tz"),
        ({**params, "tz": "US/Eastern"}, "tz"),
        ({**params, "until": "2026-03-01"}, "from"),
        ({**params, "limit": 2}, "until"),
        ({"every": "1s", "from": "2026-03-07", "until": "2026-03-10"}, "every"),
        ({**params, "from": "soon"}, "from"),
        ({**params, "dst_fold": "middle"}, "dst_fold"),
        ({**params, "limit": 10_001}, "limit"),
    ):
        answer = alice.get(path, params=bad)
        assert answer.status_code == 400, (bad, answer.text)
        assert conforms(document, answer, path, "get")["error"]["field"] == field


def test_another_tenant_finds_nothing(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client, document: dict[str, Any]
) -> None:
    with server.client("bob") as bob:
        listed = conforms(document, bob.get(f"{API}/definitions"), f"{API}/definitions", "get")
        assert listed["items"] == []
        base = f"{API}/definitions/nightly"
        for method, url, body in (
            ("GET", base, None),
            ("GET", f"{base}/versions", None),
            ("GET", f"{base}/diff?a=1&b=1", None),
            ("GET", f"{base}/diff?a=1&b=1&format=html", None),
            ("GET", f"{base}/preview?from=2026-10-24&until=2026-10-27", None),
            ("POST", f"{base}/pause", None),
            ("POST", f"{base}/resume", None),
            ("POST", f"{base}/runs", {"parameters": {}}),
            ("POST", f"{base}/backfill", {"from": "2026-10-12", "until": "2026-10-13"}),
        ):
            answer = bob.request(method, url, json=body)
            assert answer.status_code == 404, (method, url, answer.text)
            assert answer.json()["error"]["code"] == "not_found"
        # bob's publish of the same name is his own definition, not alice's
        mine = bob.post(f"{API}/definitions", json={"notebook": notebook(NIGHTLY, "2\n")})
        assert mine.status_code == 201
        assert bob.post(f"{base}/pause").json()["changed"] is True
    assert alice.get(f"{API}/definitions/nightly").json()["paused"] is False
    assert alice.get(f"{API}/definitions/nightly").json()["nbcast"] == NIGHTLY


def test_the_html_diff_is_cut_well_formed_and_shows_hidden_characters() -> None:
    from datetime import UTC, datetime
    from html.parser import HTMLParser

    from nbcast.definitions.diff_html import diff_fragment
    from nbcast.definitions.queries import VersionInfo

    def version(number: int, *sources: str) -> VersionInfo:
        return VersionInfo(
            definition="d<i>",
            version=number,
            sha256="0" * 64,
            author="alice",
            message="",
            created_at=datetime(2026, 10, 1, tzinfo=UTC),
            schema=(),
            block={},
            notebook_json=json.dumps(notebook({}, *sources)),
        )

    class Tags(HTMLParser):
        def __init__(self) -> None:
            super().__init__()
            self.open: list[str] = []

        def handle_starttag(self, tag: str, attrs: Any) -> None:
            if tag != "br":
                self.open.append(tag)

        def handle_endtag(self, tag: str) -> None:
            assert self.open.pop() == tag

    old = version(1, "".join(f"line {i}\n" for i in range(2_000)))
    new = version(2, "".join(f"line {i} changed\u202e\x07\n" for i in range(2_000)))
    whole = diff_fragment(old, new)
    assert "line 7 changed&lt;U+202E&gt;&lt;U+0007&gt;" in whole
    assert "\u202e" not in whole
    assert "\x07" not in whole
    assert "d&lt;i&gt;" in whole
    cut = diff_fragment(old, new, cap=5_000)
    assert len(cut) < 5_300 < len(whole)
    assert "The diff was cut at 5,000 characters" in cut
    for text in (whole, cut):
        tags = Tags()
        tags.feed(text)
        tags.close()
        assert tags.open == []


@pytest.mark.parametrize(
    "name", ["%00", "x" * 300, "%C3%A9t%C3%A9", "..%2F..", "%F0%9F%92%A5", "nightly%20"]
)
def test_odd_names_are_not_found_never_a_server_error(
    published: dict[str, Any], alice: httpx.Client, name: str
) -> None:
    base = f"{API}/definitions/{name}"
    for method, url, body in (
        ("GET", base, None),
        ("GET", f"{base}/versions", None),
        ("GET", f"{base}/diff?a=1&b=1", None),
        ("GET", f"{base}/preview?from=2026-10-24&until=2026-10-25", None),
        ("POST", f"{base}/pause", None),
        ("POST", f"{base}/runs", {}),
        ("POST", f"{base}/backfill", {"from": "2026-10-12", "until": "2026-10-13"}),
    ):
        answer = alice.request(method, url, json=body)
        assert answer.status_code == 404, (method, url, answer.status_code, answer.text)


def test_odd_publish_paths_are_refused_with_the_field(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client
) -> None:
    (server.folder / "binary.ipynb").write_bytes(b"\xff\xfe\x00garbage")
    (server.folder / "text.ipynb").write_text("{not json")
    for path in ("x" * 300 + ".ipynb", "a/" * 400, "binary.ipynb", "text.ipynb", "/", "%00"):
        answer = alice.post(f"{API}/definitions", json={"path": path})
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"]["field"] in ("path", None)


def test_nbcasts_own_files_and_files_outside_the_root_are_never_read(
    published: dict[str, Any], server: LiveServer, alice: httpx.Client, tmp_path: Path
) -> None:
    outside = tmp_path / "outside.ipynb"
    outside.write_text(Path("notebooks/examples/daily_sales.ipynb").read_text())
    (server.folder / "escape.ipynb").symlink_to(outside)
    (server.folder / "home-link.ipynb").symlink_to(server.home / "nbcast.db")
    before = sorted(p.name for p in server.home.iterdir())
    for path in (
        "nbcast-home/nbcast.db",  # what opening and closing would unlock: the database
        "nbcast-home/signing-keys.json",
        "home-link.ipynb",
        "escape.ipynb",
        "nbcast-home",
    ):
        answer = alice.post(f"{API}/definitions", json={"path": path, "name": "stolen"})
        assert answer.status_code == 400, (path, answer.text)
        assert answer.json()["error"]["field"] == "path"
        assert "stolen" not in alice.get(f"{API}/definitions").text
    # The database was never opened as a file (its -wal and -shm files are still there).
    assert sorted(p.name for p in server.home.iterdir()) == before


def test_nothing_above_was_a_server_error(server: LiveServer) -> None:
    log = server.log()
    assert "Traceback" not in log
    assert not [line for line in log.splitlines() if "] 500 " in line]
