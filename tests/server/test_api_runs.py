"""The runs, deliveries and tenants API against a live server with real runs: a report
that succeeded and was rendered and delivered, one whose cell raised, and queued ones
(:mod:`tests.server.seed`)."""

from __future__ import annotations

import hashlib
import json
import subprocess
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from nbcast.clock import SystemClock
from nbcast.scheduler.control import run_now
from nbcast.server_extension.handlers.links import FILE_POLICY, HTML_POLICY
from tests.server.live import BIN, LiveServer
from tests.server.seed import ALICE, Seeded, database, seed

API = "/nbcast/api/v1"
QUEUED_EXTRA = 7


@pytest.fixture(scope="module")
def seeded(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> Seeded:
    return seed(server, tmp_path_factory.mktemp("notebooks"))


@pytest.fixture(scope="module")
def queued(server: LiveServer, seeded: Seeded) -> list[int]:
    """More of alice's runs, QUEUED (no worker runs after the seed)."""
    db = database(server)
    try:
        return [
            run_now(db, SystemClock(), ALICE, "sales", {"region": f"R{i}"})
            for i in range(QUEUED_EXTRA)
        ]
    finally:
        db.dispose()


@pytest.fixture
def alice(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client("alice") as client:
        yield client


@pytest.fixture
def bob(server: LiveServer) -> Iterator[httpx.Client]:
    with server.client("bob") as client:
        yield client


def cli_json(server: LiveServer, *argv: str) -> Any:
    """``nbcast … --json`` in tenant acme as the server's owner: the OS user who
    operates the home (the server's users are jupyter identities, not OS users)."""
    env = {**server.env, "NBCAST_TENANT": "acme"}
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv, "--json"], env=env, capture_output=True, text=True, check=True
    )
    return json.loads(done.stdout)


def all_pages(client: httpx.Client, path: str, **params: Any) -> list[list[dict[str, Any]]]:
    pages = []
    after = None
    for _ in range(100):
        query = {**params, **({"after": after} if after else {})}
        answer = client.get(path, params=query)
        assert answer.status_code == 200, answer.text
        body = answer.json()
        pages.append(body["items"])
        after = body["next"]
        if after is None:
            return pages
    raise AssertionError("the pages never ended")


def error_of(answer: httpx.Response) -> dict[str, Any]:
    body = answer.json()
    assert set(body) == {"error"}, body
    return body["error"]  # type: ignore[no-any-return]


# -- runs list --------------------------------------------------------------------


def test_the_list_is_the_cli_list(server: LiveServer, seeded: Seeded, alice: httpx.Client) -> None:
    answer = alice.get(f"{API}/runs")
    assert answer.status_code == 200
    body = answer.json()
    assert body["next"] is None
    assert body["items"] == cli_json(server, "runs", "list")
    assert [r["id"] for r in body["items"]][:2] == [seeded.succeeded, seeded.failed]
    assert seeded.bob_run not in {r["id"] for r in body["items"]}


def test_filters(seeded: Seeded, queued: list[int], alice: httpx.Client) -> None:
    def ids(**params: Any) -> list[int]:
        answer = alice.get(f"{API}/runs", params=params)
        assert answer.status_code == 200, answer.text
        return [r["id"] for r in answer.json()["items"]]

    assert ids(definition="broken") == [seeded.failed]
    assert ids(state="failed") == [seeded.failed]
    assert ids(state="SUCCEEDED") == [seeded.succeeded]
    assert ids(state="QUEUED", definition="sales") == queued
    assert ids(kind="rerun") == []
    failed = alice.get(f"{API}/runs/{seeded.failed}").json()
    assert ids(**{"from": failed["fire_at"]})[0] == seeded.failed
    assert ids(until=failed["fire_at"]) == [seeded.succeeded]
    assert ids(order="desc", limit=2) == queued[::-1][:2]

    answer = alice.get(f"{API}/runs", params={"definition": "no-such-report"})
    assert (answer.status_code, error_of(answer)["code"]) == (404, "not_found")
    for params, field in [
        ({"state": "BOILING"}, "state"),
        ({"kind": "sometimes"}, "kind"),
        ({"from": "yesterday"}, "from"),
        ({"from": "2026-01-01T00:00:00"}, "from"),  # no offset
        ({"limit": "0"}, "limit"),
        ({"limit": "501"}, "limit"),
        ({"after": "not-a-cursor"}, "after"),
        ({"order": "sideways"}, "order"),
    ]:
        answer = alice.get(f"{API}/runs", params=params)
        assert answer.status_code == 400, (params, answer.text)
        assert error_of(answer)["field"] == field, (params, answer.text)
    assert "500" in error_of(alice.get(f"{API}/runs", params={"limit": "501"}))["message"]


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_pages_do_not_overlap_and_cover_the_list(
    order: str, queued: list[int], alice: httpx.Client
) -> None:
    whole = alice.get(f"{API}/runs", params={"order": order}).json()["items"]
    assert len(whole) >= 2 + QUEUED_EXTRA
    pages = all_pages(alice, f"{API}/runs", limit=3, order=order)
    assert all(len(p) == 3 for p in pages[:-1])
    assert len(pages) == -(-len(whole) // 3)
    assert len(pages[-1]) == len(whole) - 3 * (len(pages) - 1)
    assert [r["id"] for p in pages for r in p] == [r["id"] for r in whole]
    # The id of the last run seen works as `after` too.
    first = alice.get(f"{API}/runs", params={"limit": 4, "order": order}).json()["items"]
    rest = alice.get(
        f"{API}/runs", params={"after": str(first[-1]["id"]), "order": order, "limit": 500}
    ).json()["items"]
    assert [r["id"] for r in first + rest] == [r["id"] for r in whole]


# -- one run ----------------------------------------------------------------------


def test_a_failed_run_shows_its_failing_cell(seeded: Seeded, alice: httpx.Client) -> None:
    answer = alice.get(f"{API}/runs/{seeded.failed}")
    assert answer.status_code == 200
    run = answer.json()
    assert (run["state"], run["definition"], run["tenant"]) == ("FAILED", "broken", "acme")
    expected = {
        "ename": "ValueError",
        "evalue": "no sales today",
        "line_number": 2,
        "source_line": 'raise ValueError("no sales today")',
    }
    [attempt] = run["attempts"]
    for error in (run["error"], attempt["error"]):
        assert {k: error[k] for k in expected} == expected
        assert error["cell_index"] == 1  # the cell after the parameters cell
    assert attempt["outcome"] == "FAILED"
    assert run["context"]["kind"] == "manual"


def test_a_succeeded_run_shows_parameters_renditions_and_deliveries(
    server: LiveServer, seeded: Seeded, alice: httpx.Client
) -> None:
    run = alice.get(f"{API}/runs/{seeded.succeeded}").json()
    assert run["parameters"] == {"region": "APAC"}
    assert {(r["format"], r["state"]) for r in run["renditions"]} == {
        ("html", "DONE"),
        ("csv", "DONE"),
    }
    assert {(d["channel"], d["state"]) for d in run["deliveries"]} >= {("link", "SENT")}
    # One record: the CLI's keys, the openings of the run's links (none here) included.
    assert (run["link_opens"], run["link_opens_more"]) == ([], False)
    assert run == cli_json(server, "runs", "show", str(seeded.succeeded))


# -- cancel and rerun -------------------------------------------------------------


def test_cancel_a_queued_run_then_a_finished_one_is_409(
    seeded: Seeded, queued: list[int], alice: httpx.Client
) -> None:
    target = queued[-1]
    answer = alice.post(f"{API}/runs/{target}/cancel")
    assert answer.status_code == 202, answer.text
    body = answer.json()
    assert (body["run_id"], body["state"], body["cancel"]) == (target, "QUEUED", "requested")
    assert (body["requested_by"], body["already_requested"]) == ("jupyter:alice", False)
    again = alice.post(f"{API}/runs/{target}/cancel").json()
    assert again["already_requested"] is True
    assert alice.get(f"{API}/runs/{target}").json()["cancel_requested_by"] == "jupyter:alice"

    finished = alice.post(f"{API}/runs/{seeded.succeeded}/cancel")
    assert (finished.status_code, error_of(finished)["code"]) == (409, "conflict")
    assert "SUCCEEDED" in error_of(finished)["message"]
    assert alice.post(f"{API}/runs/99999999/cancel").status_code == 404
    body_given = alice.post(f"{API}/runs/{queued[0]}/cancel", content=b'{"why": "x"}')
    assert body_given.status_code == 400
    assert alice.get(f"{API}/runs/{queued[0]}").json()["cancel_requested_at"] is None


def test_rerun_a_failed_run(seeded: Seeded, queued: list[int], alice: httpx.Client) -> None:
    answer = alice.post(f"{API}/runs/{seeded.failed}/rerun")
    assert answer.status_code == 201, answer.text
    body = answer.json()
    assert (body["rerun_of"], body["kind"], body["state"]) == (seeded.failed, "rerun", "QUEUED")
    assert answer.headers["Location"].endswith(f"{API}/runs/{body['id']}")
    rerun = alice.get(f"{API}/runs/{body['id']}").json()
    original = alice.get(f"{API}/runs/{seeded.failed}").json()
    assert (rerun["kind"], rerun["rerun_of"], rerun["state"]) == ("rerun", seeded.failed, "QUEUED")
    assert (rerun["version"], rerun["context"]) == (original["version"], original["context"])

    active = alice.post(f"{API}/runs/{queued[0]}/rerun")
    assert (active.status_code, error_of(active)["code"]) == (409, "conflict")


# -- downloads ----------------------------------------------------------------------


def test_download_the_executed_notebook(seeded: Seeded, alice: httpx.Client) -> None:
    for run_id in (seeded.succeeded, seeded.failed):
        run = alice.get(f"{API}/runs/{run_id}").json()
        answer = alice.get(f"{API}/runs/{run_id}/notebook")
        assert answer.status_code == 200
        assert answer.headers["content-type"] == "application/x-ipynb+json"
        assert answer.headers["content-disposition"].startswith("attachment;")
        assert f"run{run_id}.ipynb" in answer.headers["content-disposition"]
        assert answer.headers["x-content-type-options"] == "nosniff"
        assert hashlib.sha256(answer.content).hexdigest() == run["notebook_sha256"]
        notebook = answer.json()
        assert notebook["nbformat"] == 4
        outputs = [o for c in notebook["cells"] for o in c.get("outputs", [])]
        assert outputs
    failed = json.dumps(alice.get(f"{API}/runs/{seeded.failed}/notebook").json())
    assert "no sales today" in failed


def test_a_queued_run_has_no_notebook(queued: list[int], alice: httpx.Client) -> None:
    answer = alice.get(f"{API}/runs/{queued[1]}/notebook")
    assert (answer.status_code, error_of(answer)["code"]) == (404, "not_found")


def test_download_renditions_with_their_types(seeded: Seeded, alice: httpx.Client) -> None:
    run = alice.get(f"{API}/runs/{seeded.succeeded}").json()
    by_format = {r["format"]: r for r in run["renditions"]}
    html = alice.get(f"{API}/runs/{seeded.succeeded}/renditions/{by_format['html']['id']}")
    assert html.status_code == 200
    assert html.headers["content-type"].startswith("text/html")
    assert html.headers["content-security-policy"] == "sandbox"
    assert html.headers["x-content-type-options"] == "nosniff"
    assert html.headers["content-disposition"].startswith("attachment;")
    assert hashlib.sha256(html.content).hexdigest() == by_format["html"]["sha256"]
    csv = alice.get(f"{API}/runs/{seeded.succeeded}/renditions/{by_format['csv']['id']}")
    assert csv.status_code == 200
    assert csv.headers["content-type"].startswith("text/csv")
    assert "APAC" in csv.text
    assert by_format["csv"]["filename"] in csv.headers["content-disposition"]

    # Shown in the browser on request (the Lab panel's links): HTML inline under the
    # signed links' sandbox policy; a CSV still downloads; a bad disposition is a 400.
    shown = alice.get(
        f"{API}/runs/{seeded.succeeded}/renditions/{by_format['html']['id']}",
        params={"disposition": "inline"},
    )
    assert shown.status_code == 200
    assert shown.headers["content-disposition"].startswith("inline;")
    assert shown.headers["content-security-policy"] == HTML_POLICY
    assert shown.content == html.content
    kept = alice.get(
        f"{API}/runs/{seeded.succeeded}/renditions/{by_format['csv']['id']}",
        params={"disposition": "inline"},
    )
    assert kept.headers["content-disposition"].startswith("attachment;")
    assert kept.headers["content-security-policy"] == FILE_POLICY
    bad = alice.get(
        f"{API}/runs/{seeded.succeeded}/renditions/{by_format['csv']['id']}",
        params={"disposition": "open"},
    )
    assert (bad.status_code, error_of(bad)["field"]) == (400, "disposition")

    # A rendition of another run, or none at all, is not this run's.
    other = alice.get(f"{API}/runs/{seeded.failed}/renditions/{by_format['html']['id']}")
    assert other.status_code == 404
    assert alice.get(f"{API}/runs/{seeded.succeeded}/renditions/99999999").status_code == 404
    assert alice.get(f"{API}/runs/{seeded.succeeded}/renditions/html").status_code == 404


# -- deliveries -------------------------------------------------------------------


def test_deliveries_list_filters_pages_and_retry(
    server: LiveServer, seeded: Seeded, alice: httpx.Client
) -> None:
    whole = alice.get(f"{API}/deliveries").json()
    assert whole["next"] is None
    assert whole["items"] == cli_json(server, "deliveries", "list")
    assert {(d["run"], d["channel"], d["state"]) for d in whole["items"]} == {
        (seeded.succeeded, "link", "SENT"),
        (seeded.succeeded, "slack", "FAILED"),
    }

    def channels(**params: Any) -> list[str]:
        answer = alice.get(f"{API}/deliveries", params=params)
        assert answer.status_code == 200, answer.text
        return [d["channel"] for d in answer.json()["items"]]

    assert channels(state="failed") == ["slack"]
    assert channels(channel="link") == ["link"]
    assert sorted(channels(run=seeded.succeeded, definition="sales")) == ["link", "slack"]
    assert channels(run=seeded.failed) == []
    assert alice.get(f"{API}/deliveries", params={"state": "LOST"}).status_code == 400
    assert alice.get(f"{API}/deliveries", params={"definition": "nope"}).status_code == 404
    assert alice.get(f"{API}/deliveries", params={"run": seeded.bob_run}).status_code == 404
    pages = all_pages(alice, f"{API}/deliveries", limit=1)
    assert [d["id"] for p in pages for d in p] == [d["id"] for d in whole["items"]]

    answer = alice.post(f"{API}/runs/{seeded.succeeded}/deliveries/retry")
    assert answer.status_code == 200, answer.text
    assert answer.json() == {"run": seeded.succeeded, "retried": 1}
    assert channels(state="pending") == ["slack"]
    assert channels(state="sent") == ["link"]
    again = alice.post(f"{API}/runs/{seeded.succeeded}/deliveries/retry").json()
    assert again["retried"] == 0
    assert alice.post(f"{API}/runs/99999999/deliveries/retry").status_code == 404


# -- tenants ----------------------------------------------------------------------


def test_tenants_are_for_operators(server: LiveServer, seeded: Seeded) -> None:
    """root (``admin_users``) operates; alice, an author in acme, sees her own tenant
    and nothing else of the tenants routes."""
    with server.client("alice") as alice, server.client("root") as root:
        for method, path, body, status in [
            ("GET", f"{API}/tenants", None, 403),
            ("PATCH", f"{API}/tenants/acme/quota", {"max_concurrent_runs": 9}, 403),
            ("GET", f"{API}/tenants/globex", None, 404),
            ("PATCH", f"{API}/tenants/globex/quota", {"max_concurrent_runs": 9}, 404),
        ]:
            answer = alice.request(method, path, json=body)
            code = {403: "forbidden", 404: "not_found"}[status]
            assert (answer.status_code, error_of(answer)["code"]) == (status, code), answer.text
        own = alice.get(f"{API}/tenants/acme")  # a member reads her own tenant
        assert own.status_code == 200, own.text
        assert own.json()["max_concurrent_runs"] != 9  # the refused change wrote nothing
        listed = root.get(f"{API}/tenants")
        assert listed.status_code == 200
        assert {"acme", "globex"} <= {t["name"] for t in listed.json()["items"]}
        cli = cli_json(server, "tenants", "list")
        assert [
            {k: t[k] for k in c} for t, c in zip(listed.json()["items"], cli, strict=True)
        ] == cli
        acme = root.get(f"{API}/tenants/acme")
        assert (acme.status_code, acme.json()["max_attempts"]) == (200, 1)
        assert root.get(f"{API}/tenants/nobody").status_code == 404
        assert root.get(f"{API}/tenants/NOT%20A%20NAME").status_code == 404

        changed = root.patch(
            f"{API}/tenants/acme/quota", json={"max_concurrent_runs": 7, "cpus_per_run": 1.5}
        )
        assert changed.status_code == 200, changed.text
        assert (changed.json()["max_concurrent_runs"], changed.json()["cpus_per_run"]) == (7, 1.5)
        budgets = {"budget_warehouse_bytes_per_day": None, "budget_cpu_s_per_day": None}
        budget = root.patch(f"{API}/tenants/acme/quota", json=budgets)
        assert budget.status_code == 200, budget.text
        assert {k: budget.json()[k] for k in budgets} == budgets  # no budget: nullable
        for body, field in [
            ({"max_concurrent_runs": 0}, "max_concurrent_runs"),
            ({"max_concurrent_runs": 10_001}, "max_concurrent_runs"),
            ({"max_attempts": 1.5}, "max_attempts"),
            ({"share": True}, "share"),
            ({"max_attempts": None}, "max_attempts"),
            ({"cpus_per_run": 2, "colour": "blue"}, "colour"),
            ({}, "body"),
            ([1], "body"),
        ]:
            answer = root.patch(f"{API}/tenants/acme/quota", json=body)
            assert answer.status_code == 400, (body, answer.text)
            assert error_of(answer)["field"] == field, (body, answer.text)
        bad_json = root.patch(f"{API}/tenants/acme/quota", content=b"{nope")
        assert bad_json.status_code == 400
        after = root.get(f"{API}/tenants/acme").json()
        assert (after["max_concurrent_runs"], after["cpus_per_run"]) == (7, 1.5)
        missing = root.patch(f"{API}/tenants/nobody/quota", json={"max_attempts": 2})
        assert missing.status_code == 404


def test_ceilings_are_set_by_operators_and_hold_admins(server: LiveServer, seeded: Seeded) -> None:
    """``PUT /tenants/{t}/ceilings`` is an operator's; a quota above a new ceiling comes
    down to it, and the answer shows both."""
    with server.client("alice") as alice, server.client("root") as root:
        refused = alice.put(f"{API}/tenants/acme/ceilings", json={"share": 1e6})
        assert (refused.status_code, error_of(refused)["code"]) == (403, "forbidden")
        raised = root.patch(f"{API}/tenants/acme/quota", json={"max_concurrent_runs": 6})
        assert raised.status_code == 200, raised.text
        ceiling = root.put(f"{API}/tenants/acme/ceilings", json={"max_concurrent_runs": 3})
        assert ceiling.status_code == 200, ceiling.text
        tenant = ceiling.json()
        assert (tenant["max_concurrent_runs"], tenant["ceilings"]["max_concurrent_runs"]) == (3, 3)
        for body, field in [({"max_concurrent_runs": 0}, "max_concurrent_runs"), ({}, "body")]:
            answer = root.put(f"{API}/tenants/acme/ceilings", json=body)
            assert (answer.status_code, error_of(answer)["field"]) == (400, field), answer.text
        assert root.put(f"{API}/tenants/nobody/ceilings", json={"share": 2}).status_code == 404


# -- another tenant ---------------------------------------------------------------


def test_bob_never_finds_alice_runs(
    seeded: Seeded, queued: list[int], alice: httpx.Client, bob: httpx.Client
) -> None:
    rendition = alice.get(f"{API}/runs/{seeded.succeeded}").json()["renditions"][0]["id"]
    for run_id in (seeded.succeeded, seeded.failed, queued[2]):
        for method, path in [
            ("GET", f"{API}/runs/{run_id}"),
            ("GET", f"{API}/runs/{run_id}/notebook"),
            ("GET", f"{API}/runs/{run_id}/renditions/{rendition}"),
            ("POST", f"{API}/runs/{run_id}/cancel"),
            ("POST", f"{API}/runs/{run_id}/rerun"),
            ("POST", f"{API}/runs/{run_id}/deliveries/retry"),
            ("GET", f"{API}/deliveries?run={run_id}"),
            ("GET", f"{API}/runs/{run_id}/diff/{seeded.bob_run}"),
            ("GET", f"{API}/runs/{seeded.bob_run}/diff/{run_id}"),
        ]:
            answer = bob.request(method, path)
            assert answer.status_code == 404, (method, path, answer.text)
            assert error_of(answer)["code"] == "not_found"
    theirs = bob.get(f"{API}/runs").json()["items"]
    assert [r["id"] for r in theirs] == [seeded.bob_run]
    assert bob.get(f"{API}/deliveries").json()["items"] == []
    # Alice's run id as a page cursor tells bob nothing either.
    answer = bob.get(f"{API}/runs", params={"after": str(seeded.failed)})
    assert answer.status_code == 400
    nothing = bob.get(f"{API}/runs", params={"after": "99999999"})
    assert error_of(answer)["message"] == error_of(nothing)["message"].replace(
        "99999999", str(seeded.failed)
    )
    assert alice.get(f"{API}/runs/{queued[2]}").json()["cancel_requested_at"] is None


def test_two_runs_reports_compared_as_json_and_as_a_page(
    server: LiveServer, seeded: Seeded, queued: list[int], alice: httpx.Client
) -> None:
    """The sales report (a recorded table, a printed line) against the broken one (an
    error, no table): what a reader sees, nothing volatile; the page has no script and
    frames only data: images; a run without a notebook is a 404 saying so."""
    answer = alice.get(f"{API}/runs/{seeded.succeeded}/diff/{seeded.failed}")
    assert answer.status_code == 200, answer.text
    compared = answer.json()
    assert (compared["a"]["id"], compared["b"]["definition"]) == (seeded.succeeded, "broken")
    assert [(t["name"], t["status"]) for t in compared["tables"]] == [("sales", "removed")]
    assert any(
        "ValueError: no sales today" in line for t in compared["texts"] for line in t["lines"]
    )
    assert "execution_count" not in answer.text
    same = alice.get(f"{API}/runs/{seeded.succeeded}/diff/{seeded.succeeded}").json()
    assert same["same"] is True
    page = alice.get(
        f"{API}/runs/{seeded.succeeded}/diff/{seeded.failed}", params={"format": "html"}
    )
    assert page.status_code == 200
    assert page.headers["content-security-policy"].endswith("img-src data:")
    assert "<script" not in page.text.lower()
    assert "Table sales: removed" in page.text
    missing = alice.get(f"{API}/runs/{seeded.succeeded}/diff/{queued[0]}")
    assert missing.status_code == 404
    assert "has no executed notebook" in error_of(missing)["message"]
    # The status page's form lands on the page above.
    with server.client("alice", follow_redirects=False) as browser:
        moved = browser.get(
            f"/nbcast/runs/{seeded.failed}/compare", params={"with": seeded.succeeded}
        )
    assert moved.status_code == 302
    assert moved.headers["location"].endswith(
        f"{API}/runs/{seeded.succeeded}/diff/{seeded.failed}?format=html"
    )
