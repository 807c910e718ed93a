"""SLA misses on a live server's faces: ``GET /nbcast/api/v1/sla`` for the caller's
tenant only, ``nbcast_sla_misses_total`` in ``/nbcast/metrics`` (by tenant for
administrators only), the overview's count of the last 24 hours and the definition
page's misses. The miss is made by the real planes in this process, on the server's
database: published, its slot materialized, left undelivered, judged by the monitor."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from prometheus_client.parser import text_string_to_metric_families

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.definitions.versions import publish
from nbcast.oversight.sla import check_slas
from nbcast.scheduler.materializer import Materializer
from nbcast.tenancy.models import User
from nbcast.tenancy.tenants import ensure_tenant
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.deliveries import database
from tests.server.live import LiveServer

OWNER = "alice@example.com"


@pytest.fixture(scope="module")
def missed(server: LiveServer, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """Acme's definition kpi (hourly, delivered within 30 minutes, owned by alice): its
    slot three hours ago was never run, so it missed."""
    folder: Path = tmp_path_factory.mktemp("sla")
    slot = (datetime.now(UTC) - timedelta(hours=3)).replace(minute=0, second=0, microsecond=0)
    clock = FixedClock(slot - timedelta(minutes=2))
    with server.client() as owner:  # the server seeds its operators (root) first
        assert owner.get("/nbcast/api/v1/health").status_code == 200
    db = database(server)
    try:
        with db.session() as session:
            ensure_tenant(session, "acme")
        grant(db, "globex", "jupyter:bob", "viewer")  # bob sees his own tenant's overview
        notebook = make_notebook(
            folder / "kpi.ipynb",
            nbcast={
                "name": "kpi",
                "schedule": {"cron": "0 * * * *"},
                "sla": {"delivered_within": "30m"},
                "subscriptions": [{"channel": "email", "to": "cfo@example.com"}],
            },
        )
        alice = Caller(tenant="acme", user="jupyter:alice")
        publish(db, notebook, caller=alice, now=clock.now(), environ=server.env)
        with db.session() as session:
            session.execute(sa.update(User).where(User.name == "jupyter:alice").values(email=OWNER))
        clock.set(slot + timedelta(minutes=1))
        Materializer(db, clock, name="test-scheduler").tick()
        clock.set(slot + timedelta(minutes=31))
        assert check_slas(db, clock, environ={})["misses"] == 1
    finally:
        db.dispose()
    return {"slot": slot, "key": slot.strftime("%Y-%m-%dT%H:%M")}


def test_the_api_lists_the_tenants_misses(server: LiveServer, missed: dict[str, Any]) -> None:
    with server.client("alice") as alice:
        answer = alice.get("/nbcast/api/v1/sla")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["next"] is None
        [miss] = body["items"]
        assert (miss["definition"], miss["slot"], miss["state"]) == ("kpi", missed["key"], "QUEUED")
        assert miss["reason"] == "QUEUED at the deadline"
        deadline = missed["slot"] + timedelta(minutes=30)
        assert miss["deadline"] == deadline.isoformat().replace("+00:00", "Z")
        assert isinstance(miss["run"], int)
        assert miss["alert"]["state"] == "PENDING"
        assert (miss["alert"]["channel"], miss["alert"]["to"]) == ("email", OWNER)
        assert alice.get(f"/nbcast/api/v1/runs/{miss['run']}").status_code == 200

        assert (
            len(alice.get("/nbcast/api/v1/sla", params={"definition": "kpi"}).json()["items"]) == 1
        )
        later = (missed["slot"] + timedelta(minutes=1)).isoformat()
        assert alice.get("/nbcast/api/v1/sla", params={"from": later}).json()["items"] == []
        unknown = alice.get("/nbcast/api/v1/sla", params={"definition": "nope"})
        assert (unknown.status_code, unknown.json()["error"]["code"]) == (404, "not_found")
        forged = alice.get("/nbcast/api/v1/sla", params={"after": "not-a-cursor"})
        assert (forged.status_code, forged.json()["error"]["field"]) == (400, "after")
        backwards = alice.get(
            "/nbcast/api/v1/sla",
            params={"from": "2026-11-03T00:00:00Z", "to": "2026-11-02T00:00:00Z"},
        )
        assert backwards.status_code == 400
    with server.client("bob") as bob:  # tenant globex
        assert bob.get("/nbcast/api/v1/sla").json() == {"items": [], "next": None}
        theirs = bob.get("/nbcast/api/v1/sla", params={"definition": "kpi"})
        assert theirs.status_code == 404


def test_the_route_is_in_the_openapi_document(server: LiveServer) -> None:
    with server.client("alice") as alice:
        document = alice.get("/nbcast/api/v1/openapi.json").json()
    operation = document["paths"]["/nbcast/api/v1/sla"]["get"]
    assert {p["name"] for p in operation["parameters"]} == {
        "definition",
        "from",
        "to",
        "limit",
        "after",
    }
    assert "SlaMiss" in document["components"]["schemas"]
    assert "SlaMissPage" in document["components"]["schemas"]


def _samples(text: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {
        tuple(sorted(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
        if s.name == name
    }


def test_the_metrics_count_misses_by_tenant_for_administrators_only(
    server: LiveServer, missed: dict[str, Any]
) -> None:
    with server.client("alice") as alice:
        text = alice.get("/nbcast/metrics").text
    assert _samples(text, "nbcast_sla_misses_total") == {(("state", "QUEUED"),): 1.0}
    assert _samples(text, "nbcast_sla_alerts") == {(("state", "PENDING"),): 1.0}
    assert "acme" not in text
    with server.client("root") as root:
        text = root.get("/nbcast/metrics").text
    assert _samples(text, "nbcast_sla_misses_total") == {
        (("state", "QUEUED"), ("tenant", "acme")): 1.0
    }


def test_the_overview_counts_the_last_day_and_the_definition_page_lists_them(
    server: LiveServer, missed: dict[str, Any]
) -> None:
    with server.client("alice") as alice:
        overview = alice.get("/nbcast/")
        page = alice.get("/nbcast/definitions/kpi")
    assert overview.status_code == 200
    assert "SLA misses, last 24 h" in overview.text
    assert '<b class="sla-count">1</b>' in overview.text
    assert page.status_code == 200
    assert "delivered within 30m of each slot" in page.text
    section = page.text.split('<table class="sla-misses">')[1].split("</table>")[0]
    assert missed["key"] in section
    assert "QUEUED at the deadline" in section
    assert OWNER in section
    with server.client("bob") as bob:
        theirs = bob.get("/nbcast/")
    assert '<b class="sla-count">0</b>' in theirs.text
    assert "kpi" not in theirs.text
