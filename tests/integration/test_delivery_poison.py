"""One tenant's poison items fail alone, on PostgreSQL, against real peers on 127.0.0.1.

Beside healthy deliveries (email to an SMTP server, Slack, a webhook, a signed link):

- a run whose notebook cannot be rendered: its deliveries are FAILED ``render_failed``;
- a webhook "receiver" that answers bytes that are not HTTP: FAILED once its attempts
  are spent (``outcome_unknown``: a webhook cannot be asked whether it arrived);
- a Slack API that answers one conversation with malformed JSON: FAILED likewise;
- a webhook answering ``200`` with a large junk body and junk headers: accepted (the
  status is the answer), and none of the junk is kept.

Every healthy delivery is SENT exactly once, each poison item is FAILED on its own
row, and the delivery worker's loop (:meth:`DeliveryWorker.step`) keeps going to the
end.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.channels.slack import SlackChannel
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.delivery.webhook_policy import WebhookPolicy
from nbcast.delivery.worker import DeliveryWorker
from nbcast.testing.http import HTTPReply
from nbcast.testing.slack_api import TOKEN, slack_server
from nbcast.testing.smtp import smtp_server
from nbcast.testing.webhook import garbage_receiver, webhook_receiver
from tests.conftest import _reset_postgres
from tests.delivery.plane import Plane, receipts

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
SLACK = {"C0SALES": "sales", "C0BROKEN": "broken"}
LOCAL = WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
JUNK = HTTPReply(
    200,
    b"\x00<html>" + b"junk " * 50_000,
    {"Content-Type": "text/html; " + "x" * 400, "X-Junk": "y" * 4000},
)


def test_one_tenants_poison_items_fail_alone(pg_url: str, tmp_path: Path) -> None:
    db = Database.open(pg_url)
    _reset_postgres(db)
    plane = Plane(db, FixedClock(T0), tmp_path)
    with (
        smtp_server() as smtp,
        slack_server(channels=SLACK) as slack,
        webhook_receiver() as hook,
        webhook_receiver(default=JUNK) as junk,
        garbage_receiver() as garbage,
    ):
        slack.garble(times=1000, channel="C0BROKEN")  # every call about that conversation
        plane.publish(
            "sales",
            [
                {"channel": "email", "to": "cfo@example.com", "formats": ["csv"]},
                {"channel": "slack", "to": "C0SALES"},
                {"channel": "slack", "to": "C0BROKEN"},
                {"channel": "webhook", "to": hook.url},
                {"channel": "webhook", "to": junk.url},
                {"channel": "webhook", "to": garbage.url},
                {"channel": "link", "to": "cfo@example.com"},
            ],
            outputs=("html", "csv"),
        )
        plane.publish(
            "broken",
            [{"channel": "email", "to": "cfo@example.com"}, {"channel": "link", "to": "ops@x.io"}],
        )
        broken = plane.succeed("broken", notebook=b"\x00 not a notebook")
        sales = plane.succeed("sales")
        channels = {
            "email": EmailChannel(smtp.host, smtp.port, sender="r@example.com", timeout=5.0),
            "slack": SlackChannel(TOKEN, base_url=slack.base_url, timeout=5.0),
            "webhook": WebhookChannel("whsec_test", timeout=5.0, policy=LOCAL),
            "link": LinkChannel(),
        }
        ledger = plane.ledger(channels)
        worker = DeliveryWorker(db, plane.clock, ledger, plane.renders())
        plane.settle(worker)
        ledger.close()
        assert len(smtp.messages) == 1
        assert [p.channel for p in slack.posts] == ["C0SALES"]
        assert len(hook.requests) == 1
        assert len(junk.requests) == 1
        assert garbage.connections >= 1
    rows = {(r["run_id"], r["channel"], r["recipient"]): r for r in receipts(plane)}
    assert {key: (r["state"], r["reason"]) for key, r in rows.items()} == {
        # the run that cannot be rendered: each of its deliveries fails on its own row
        (broken, "email", "cfo@example.com"): ("FAILED", "render_failed"),
        (broken, "link", "ops@x.io"): ("FAILED", "render_failed"),
        # the healthy run, with its poison recipients
        (sales, "email", "cfo@example.com"): ("SENT", None),
        (sales, "slack", "C0SALES"): ("SENT", None),
        (sales, "slack", "C0BROKEN"): ("FAILED", "outcome_unknown"),
        (sales, "webhook", hook.url): ("SENT", None),
        (sales, "webhook", junk.url): ("SENT", None),
        (sales, "webhook", garbage.url): ("FAILED", "outcome_unknown"),
        (sales, "link", "cfo@example.com"): ("SENT", None),
    }
    assert not any(r["possible_duplicate"] for r in rows.values() if r["state"] == "SENT")
    junk_receipt = rows[(sales, "webhook", junk.url)]["receipt"]
    assert set(junk_receipt) == {"status", "headers"}
    assert junk_receipt["status"] == 200
    assert "junk" not in json.dumps(junk_receipt)
    assert all(len(value) <= 100 for value in junk_receipt["headers"].values())
    db.dispose()
