"""Webhook URLs through a live ``nbcast serve``: every API answer and status page that
shows a subscription, a ledger row, a signed link, a version (its notebook, its diff)
or a run's executed notebook shows the URL whole to the tenant's admin and masked
(``https://hooks.example.com/…a1b2``) to its author and viewer.

Seeded through the command layer with the server's environment: a definition with a
webhook subscription published twice (the second version names another URL), a run
completed through the executor's queue with an executed notebook that carries the
version's ``nbcast`` block (as papermill keeps a notebook's metadata), its ledger
rows made by the delivery plane's intake, and the signed link its webhook delivery
hands out.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import httpx
import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.artifacts import open_store
from nbcast.clock import SystemClock
from nbcast.config import load_settings
from nbcast.definitions.queries import get_version
from nbcast.definitions.versions import publish
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.links import delivery_link
from nbcast.delivery.models import Delivery
from nbcast.delivery.signing import load_signer
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.live import LiveServer
from tests.server.seed import database

SECRET = "T0PSECRET-B0-xyz"
HOOK = f"https://hooks.example.com/services/{SECRET}-a1b2"
NEXT_HOOK = f"https://hooks.example.com/services/{SECRET}-next-c3d4"
MASKED = "https://hooks.example.com/…a1b2"
MASKED_NEXT = "https://hooks.example.com/…c3d4"
ROLES = {"ada": "admin", "al": "author", "vic": "viewer"}
ADA = Caller(tenant="acme", user="jupyter:ada")


@dataclass(frozen=True)
class Seeded:
    server: LiveServer
    run_id: int


def _publish(server: LiveServer, folder: Path, hook: str) -> None:
    path = make_notebook(
        folder / "sales.ipynb",  # the same file, edited
        nbcast={
            "name": "sales",
            "outputs": ["html"],
            "subscriptions": [
                {"channel": "webhook", "to": hook},
                {"channel": "email", "to": "cfo@example.com"},
            ],
        },
    )
    db = database(server)
    try:
        publish(db, path, caller=ADA, environ=server.env)
    finally:
        db.dispose()


@contextlib.contextmanager
def _served(folder: Path, *, opened: bool) -> Iterator[Seeded]:
    """A live server seeded as the module docstring says; with ``opened``, the
    webhook delivery's link was opened once (its opening is listed with the run)."""
    with LiveServer(folder, users=dict.fromkeys(ROLES, "acme")) as server:
        db = database(server)
        try:
            for user, role in ROLES.items():
                grant(db, "acme", f"jupyter:{user}", role)
            _publish(server, folder, HOOK)
            clock = SystemClock()
            run_id = run_now(db, clock, ADA, "sales", {})
            with db.session() as session:  # what papermill leaves: the metadata kept
                notebook = get_version(session, ADA, "sales").notebook
            assert HOOK in json.dumps(notebook)
            store = open_store(load_settings(server.env).artifacts_location)
            sha = store.put(json.dumps(notebook, indent=1).encode()).sha256
            queue = RunQueue(db, clock, owner="test-worker")
            [lease] = queue.claim(1)
            queue.start(lease)
            queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)
            with db.session() as session:
                consume_outbox(session, clock.now())
            with db.session() as session:
                webhook = session.scalar(sa.select(Delivery).where(Delivery.channel == "webhook"))
                assert webhook is not None
                link = delivery_link(
                    session,
                    load_signer(server.home, server.env),  # the server's own key
                    tenant_id=webhook.tenant_id,
                    run_id=run_id,
                    delivery_id=webhook.id,
                    recipient=webhook.recipient,
                    sha256=store.put(b"<p>the report</p>").sha256,
                    filename="sales.html",
                    media_type="text/html",
                    now=clock.now(),
                    ttl=timedelta(days=7),
                    base_url=server.url,
                )
        finally:
            db.dispose()
        _publish(server, folder, NEXT_HOOK)
        if opened:
            assert httpx.get(link.url, timeout=30).status_code == 200
        yield Seeded(server, run_id)


@pytest.fixture(scope="module")
def seeded(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    with _served(tmp_path_factory.mktemp("masking"), opened=False) as made:
        yield made


@pytest.fixture(scope="module")
def opened(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seeded]:
    with _served(tmp_path_factory.mktemp("masking-opened"), opened=True) as made:
        yield made


def _faces(seeded: Seeded, user: str) -> dict[str, str]:
    """Every answer that shows the definition, its versions, the run or its ledger,
    as ``user`` gets it (each must be a 200)."""
    api = "/nbcast/api/v1"
    paths = [
        f"{api}/deliveries",
        f"{api}/deliveries?channel=webhook",
        f"{api}/runs/{seeded.run_id}",
        f"{api}/runs/{seeded.run_id}/notebook",
        f"{api}/definitions",
        f"{api}/definitions/sales",
        f"{api}/definitions/sales?version=1",
        f"{api}/definitions/sales/versions",
        f"{api}/definitions/sales/diff?a=1&b=2",
        f"{api}/definitions/sales/diff?a=1&b=2&format=nbdime",
        f"{api}/definitions/sales/diff?a=1&b=2&format=html",
        "/nbcast/",
        "/nbcast/definitions",
        "/nbcast/definitions/sales",
        f"/nbcast/runs/{seeded.run_id}",
    ]
    answers = {}
    with seeded.server.client(user) as client:
        for path in paths:
            answer = client.get(path)
            assert answer.status_code == 200, (user, path, answer.text[:300])
            answers[path] = answer.text
    return answers


@pytest.mark.parametrize("user", ["al", "vic"])
def test_only_the_tenants_admin_sees_webhook_urls_whole(seeded: Seeded, user: str) -> None:
    theirs = _faces(seeded, user)
    leaks = [path for path, text in theirs.items() if SECRET in text]
    assert leaks == []
    api = "/nbcast/api/v1"
    [row] = json.loads(theirs[f"{api}/deliveries?channel=webhook"])["items"]
    assert row["recipient"] == MASKED
    run = json.loads(theirs[f"{api}/runs/{seeded.run_id}"])
    assert {d["recipient"] for d in run["deliveries"]} == {MASKED, "cfo@example.com"}
    detail = json.loads(theirs[f"{api}/definitions/sales"])
    assert detail["nbcast"]["subscriptions"][0]["to"] == MASKED_NEXT
    executed = json.loads(theirs[f"{api}/runs/{seeded.run_id}/notebook"])
    assert executed["metadata"]["nbcast"]["subscriptions"][0]["to"] == MASKED
    assert MASKED in theirs[f"/nbcast/runs/{seeded.run_id}"]  # the ledger and the link

    admin = _faces(seeded, "ada")
    api_whole = [path for path, text in admin.items() if SECRET in text]
    assert f"{api}/deliveries?channel=webhook" in api_whole
    [row] = json.loads(admin[f"{api}/deliveries?channel=webhook"])["items"]
    assert row["recipient"] == HOOK
    executed = json.loads(admin[f"{api}/runs/{seeded.run_id}/notebook"])
    assert executed["metadata"]["nbcast"]["subscriptions"][0]["to"] == HOOK
    assert NEXT_HOOK in admin[f"{api}/definitions/sales"]
    assert HOOK in admin[f"/nbcast/runs/{seeded.run_id}"]


@pytest.mark.parametrize("user", ["al", "vic"])
def test_a_links_openings_show_its_webhook_url_masked(opened: Seeded, user: str) -> None:
    with opened.server.client(user) as client:
        run = client.get(f"/nbcast/api/v1/runs/{opened.run_id}").json()
        page = client.get(f"/nbcast/runs/{opened.run_id}").text
    assert [o["recipient"] for o in run["link_opens"]] == [MASKED]
    assert SECRET not in json.dumps(run)
    assert SECRET not in page
    with opened.server.client("ada") as client:
        run = client.get(f"/nbcast/api/v1/runs/{opened.run_id}").json()
    assert [o["recipient"] for o in run["link_opens"]] == [HOOK]
