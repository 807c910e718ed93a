"""A retried webhook delivery reuses its signed links: the same token on every
attempt of one ledger row, against a real receiver on 127.0.0.1, on SQLite and
PostgreSQL — after a 500, after a lost answer, after a delivery worker (a real
``nbcast delivery-worker`` process) is SIGKILLed between sending and recording —
and a fresh link only when the first one was revoked or has expired.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.delivery.commands import revoke_link
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import Ledger
from nbcast.delivery.links import delivery_link, verify_link
from nbcast.delivery.models import Delivery, DeliveryAttempt, SignedLink
from nbcast.delivery.rendering import RenderQueue
from nbcast.delivery.signing import Signer
from nbcast.delivery.webhook_policy import WebhookPolicy
from nbcast.testing.webhook import WebhookReceiver, webhook_receiver
from tests.delivery.plane import SIGNER, Plane, receipts
from tests.members import grant

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
LOCAL = WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
SECRET = "whsec_links"
AUTHOR = Caller(tenant="default", user="t")


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


def _links(hook: WebhookReceiver) -> list[list[str]]:
    """The ``links`` of every notice the receiver got, in order."""
    return [json.loads(request.body)["links"] for request in hook.requests]


def _link_rows(plane: Plane) -> list[SignedLink]:
    with plane.db.session() as session:
        rows = list(session.scalars(sa.select(SignedLink).order_by(SignedLink.id)))
        session.expunge_all()
    return rows


def _outcomes(plane: Plane) -> list[str | None]:
    with plane.db.session() as session:
        return list(
            session.scalars(sa.select(DeliveryAttempt.outcome).order_by(DeliveryAttempt.attempt))
        )


def _attempt(
    plane: Plane, ledger: Ledger, renders: RenderQueue, hook: WebhookReceiver, number: int
) -> None:
    """Consume, render and deliver, ten minutes of the clock at a time (longer than the
    webhook's backoff before a third attempt), until the receiver got ``number``
    notices."""
    for _ in range(20):
        with plane.db.session() as session:
            consume_outbox(session, plane.clock.now())
        renders.render_pending(10)
        ledger.deliver_due(50)
        if len(hook.requests) >= number:
            return
        plane.clock.advance(timedelta(minutes=10))
    raise AssertionError(f"the receiver did not get {number} notices")


def _publish_and_run(plane: Plane, hook: WebhookReceiver) -> None:
    plane.publish("sales", [{"channel": "webhook", "to": hook.url}], outputs=("html", "csv"))
    plane.succeed("sales")


def test_a_retry_after_a_500_carries_the_links_of_the_first_attempt(plane: Plane) -> None:
    with webhook_receiver() as hook, WebhookChannel(SECRET, timeout=5.0, policy=LOCAL) as hooks:
        hook.respond(500)
        _publish_and_run(plane, hook)
        plane.pump(plane.ledger({"webhook": hooks}), plane.renders())
        first, second = _links(hook)
    assert _outcomes(plane) == ["RETRY", "SENT"]
    assert len(first) == 2  # one per format
    assert second == first  # the same tokens, not new ones
    rows = _link_rows(plane)
    assert len(rows) == 2  # nothing minted for the retry
    [delivery] = receipts(plane)
    assert {row.delivery_id for row in rows} == {delivery["id"]}
    with plane.db.session() as session:  # and they open
        for url in second:
            verify_link(session, SIGNER, url.rsplit("/", 1)[1], plane.clock.now())


def test_a_retry_after_a_lost_answer_carries_the_same_links(plane: Plane) -> None:
    # The receiver got the first notice, but its answer never came back in time: the
    # row is retried (outcome unknown) and the receiver sees the same links twice.
    with webhook_receiver() as hook, WebhookChannel(SECRET, timeout=0.5, policy=LOCAL) as hooks:
        hook.respond(200, delay=3.0)
        _publish_and_run(plane, hook)
        plane.pump(plane.ledger({"webhook": hooks}), plane.renders())
        first, second = _links(hook)
    assert _outcomes(plane) == ["UNKNOWN", "SENT"]
    assert second == first
    assert len(_link_rows(plane)) == 2


def test_a_worker_killed_between_send_and_record_resends_the_same_links(
    plane: Plane, db_url: str, tmp_path: Path
) -> None:
    with webhook_receiver() as hook:
        _publish_and_run(plane, hook)
        crashed = subprocess.run(
            [sys.executable, "-m", "nbcast", "delivery-worker", "--exit-when-idle"],
            env={
                **os.environ,
                "NBCAST_DATABASE_URL": db_url,
                "NBCAST_HOME": str(tmp_path),  # the plane's artifact store
                "NBCAST_CLOCK": f"fixed:{T0.isoformat()}",
                "NBCAST_CRASH_AT": "after_send",
                "NBCAST_SIGNING_KEYS": "k1:test-signing-secret-0123456789",
                "NBCAST_BASE_URL": "https://reports.example.com",
                "NBCAST_WEBHOOK_SECRET": SECRET,
                "NBCAST_WEBHOOK_ALLOW_HTTP": "1",
                "NBCAST_WEBHOOK_ALLOWED_HOSTS": "127.0.0.1",
            },
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        assert crashed.returncode == -9, crashed.stderr  # SIGKILL, right after sending
        with plane.db.session() as session:
            assert session.scalar(sa.select(Delivery.state)) == "SENDING"  # not recorded
        plane.clock.advance(timedelta(minutes=10))  # the dead worker's lease ran out
        with WebhookChannel(SECRET, timeout=5.0, policy=LOCAL) as hooks:
            plane.pump(plane.ledger({"webhook": hooks}, owner="survivor"), plane.renders())
        first, second = _links(hook)
    assert second == first
    assert len(_link_rows(plane)) == 2
    [row] = receipts(plane)
    assert (row["state"], row["possible_duplicate"]) == ("SENT", True)


@pytest.mark.parametrize("lapse", ["revoked", "expired"])
def test_a_link_is_reused_until_it_is_revoked_or_expired(plane: Plane, lapse: str) -> None:
    grant(plane.db, "default", AUTHOR.user)
    with webhook_receiver() as hook, WebhookChannel(SECRET, timeout=5.0, policy=LOCAL) as hooks:
        hook.respond(500, times=2)
        plane.publish("sales", [{"channel": "webhook", "to": hook.url}])  # html only
        plane.succeed("sales")
        ledger = plane.ledger({"webhook": hooks}, link_ttl=timedelta(hours=1))
        renders = plane.renders()
        _attempt(plane, ledger, renders, hook, 1)
        _attempt(plane, ledger, renders, hook, 2)
        [old] = _link_rows(plane)
        if lapse == "revoked":
            assert revoke_link(plane.db, plane.clock, AUTHOR, old.id)
        else:  # past the link's hour
            plane.clock.advance(timedelta(hours=2))
        _attempt(plane, ledger, renders, hook, 3)
        [first], [second], [third] = _links(hook)
    assert second == first  # reused while it could be opened
    assert third != first  # then a fresh one
    lapsed, fresh = _link_rows(plane)
    assert lapsed.id == old.id
    assert (lapsed.revoked_at is not None) == (lapse == "revoked")
    assert fresh.delivery_id == old.delivery_id
    assert _outcomes(plane) == ["RETRY", "RETRY", "SENT"]
    with plane.db.session() as session:
        opened = verify_link(session, SIGNER, third.rsplit("/", 1)[1], plane.clock.now())
    assert opened.id == fresh.id


def test_a_link_is_reused_across_a_key_rotation_until_its_key_is_retired(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": "cfo@example.com"}])
    plane.succeed("sales")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())  # the ledger row
    with plane.db.session() as session:
        [delivery] = session.scalars(sa.select(Delivery))
        tenant_id, run_id, delivery_id = delivery.tenant_id, delivery.run_id, delivery.id

    def handed_out(signer: Signer) -> tuple[int, str, bool]:
        with plane.db.session() as session:
            link = delivery_link(
                session,
                signer,
                tenant_id=tenant_id,
                run_id=run_id,
                delivery_id=delivery_id,
                recipient="cfo@example.com",
                sha256="ab" * 32,
                filename="sales.html",
                media_type="text/html",
                now=plane.clock.now(),
                ttl=timedelta(days=7),
                base_url="https://reports.example.com",
            )
        return link.id, link.token, link.reused

    k1 = ("k1", "test-signing-secret-0123456789")
    k2 = ("k2", "another-signing-secret-98765432")
    made, token, reused = handed_out(Signer([k1]))
    assert not reused
    # k2 is current now; k1 still verifies: the link is handed out as it was signed.
    assert handed_out(Signer([k2, k1])) == (made, token, True)
    # k1 retired: its tokens no longer verify, so the delivery gets a new link.
    renewed, fresh_token, reused = handed_out(Signer([k2]))
    assert (renewed != made, fresh_token.startswith("k2."), reused) == (True, True, False)
