"""Delivery under faults, against real protocol peers on 127.0.0.1 and PostgreSQL.

- An SMTP server that refuses 30 % of messages at random and a Slack API that
  answers 429s: in the end every ledger row is SENT, each exactly once at the sink,
  and no recipient got a duplicate.
- A delivery worker (``nbcast delivery-worker``, a real process) SIGKILLed between
  sending and recording: over email the next worker sends again — one duplicate,
  recorded on the ledger row — and over Slack it finds the first post in the
  channel's history and posts nothing twice.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.channels.slack import SlackChannel
from nbcast.delivery.models import Delivery, DeliveryAttempt
from nbcast.testing.slack_api import TOKEN, slack_server
from nbcast.testing.smtp import smtp_server
from tests.conftest import scratch_pg_database
from tests.delivery.plane import Plane, receipts

pytestmark = [pytest.mark.postgres]

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
EMAILS = [f"user{i:02d}@example.com" for i in range(25)]
SLACK = {"C0SALES": "sales", "C0OPS": "ops", "C0EXEC": "exec"}


def test_refusals_and_rate_limits_end_with_every_row_sent_once(pg_url: str, tmp_path: Path) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    plane = Plane(db, FixedClock(T0), tmp_path)
    subscriptions = [{"channel": "email", "to": a, "formats": ["csv"]} for a in EMAILS]
    subscriptions += [{"channel": "slack", "to": c, "formats": ["csv"]} for c in SLACK]
    for report in ("sales", "costs", "churn"):  # three reports, one run each
        plane.publish(report, subscriptions, outputs=("html", "csv"))
        plane.succeed(report)
    with smtp_server(refuse_rate=0.3, seed=7) as smtp, slack_server(channels=SLACK) as slack:
        slack.rate_limit(6, retry_after=1, method="chat.postMessage")
        email = EmailChannel(smtp.host, smtp.port, sender="reports@example.com", timeout=5.0)
        email.max_attempts = 12  # 30 % refusals: 0.3^12 per row is never
        chat = SlackChannel(TOKEN, base_url=slack.base_url, timeout=5.0)
        plane.pump(plane.ledger({"email": email, "slack": chat}), plane.renders(), rounds=200)
        delivered = Counter(
            (m.mail["X-Nbcast-Delivery"], rcpt) for m in smtp.messages for rcpt in m.rcpt_tos
        )
        posts = Counter((p.channel, p.metadata["event_payload"]["key"]) for p in slack.posts)
        refused = len(smtp.refused)
        limited = slack.calls.count("chat.postMessage") - len(slack.posts)
    rows = receipts(plane)
    assert len(rows) == 3 * (len(EMAILS) + len(SLACK))
    assert {(r["state"], r["reason"]) for r in rows} == {("SENT", None)}
    assert not any(r["possible_duplicate"] for r in rows)
    assert refused > 0  # the faults happened ...
    assert limited == 6
    assert len(delivered) == 3 * len(EMAILS)  # ... and each message arrived once
    assert set(delivered.values()) == {1}
    assert len(posts) == 3 * len(SLACK)
    assert set(posts.values()) == {1}
    retried = [r for r in rows if r["attempt"] > 1]
    assert retried  # refused recipients were retried, and only they
    assert len(retried) <= refused + limited
    db.dispose()


def _crashing_worker(url: str, home: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "nbcast", "delivery-worker", "--exit-when-idle", "--poll", "0.1"],
        env={
            **os.environ,
            **env,
            "NBCAST_DATABASE_URL": url,
            "NBCAST_HOME": str(home),
            "NBCAST_CLOCK": f"fixed:{T0.isoformat()}",
            "NBCAST_CRASH_AT": "after_send",
            "NBCAST_SIGNING_KEYS": "k1:test-signing-secret-0123456789",
        },
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("channel", ["email", "slack"])
def test_a_worker_killed_between_send_and_record(tmp_path: Path, channel: str) -> None:
    with (
        scratch_pg_database("nbcast_crash") as url,
        smtp_server() as smtp,
        slack_server(channels=SLACK) as slack,
    ):
        db = Database.open(url)
        home = tmp_path / "home"
        plane = Plane(db, FixedClock(T0), home)  # the worker's artifact store
        recipient = "cfo@example.com" if channel == "email" else "C0SALES"
        plane.publish("sales", [{"channel": channel, "to": recipient}])
        plane.succeed("sales")
        env = {
            "NBCAST_SMTP_URL": f"smtp://{smtp.host}:{smtp.port}",
            "NBCAST_SLACK_TOKEN": TOKEN,
            "NBCAST_SLACK_API_URL": slack.base_url,
        }
        crashed = _crashing_worker(url, home, env)
        assert crashed.returncode == -9, crashed.stderr  # SIGKILL, right after sending
        arrived = len(smtp.messages) if channel == "email" else len(slack.posts)
        assert arrived == 1
        with db.session() as session:
            state = session.scalar(sa.select(Delivery.state))
        assert state == "SENDING"  # sent, not recorded

        # The next worker, once the dead one's lease has expired.
        plane.clock.advance(timedelta(minutes=10))
        channels = {
            "email": EmailChannel(smtp.host, smtp.port, sender="r@example.com", timeout=5.0),
            "slack": SlackChannel(TOKEN, base_url=slack.base_url, timeout=5.0),
        }
        plane.pump(plane.ledger(channels, owner="survivor"), plane.renders())
        [row] = receipts(plane)
        with db.session() as session:
            outcomes = list(
                session.scalars(
                    sa.select(DeliveryAttempt.outcome).order_by(DeliveryAttempt.attempt)
                )
            )
        if channel == "email":  # SMTP cannot be asked: one duplicate, on the record
            assert len(smtp.messages) == 2
            assert (row["state"], row["possible_duplicate"]) == ("SENT", True)
            assert outcomes == ["UNKNOWN", "SENT"]
        else:  # Slack's history shows the first post: nothing is posted twice
            assert len(slack.posts) == 1
            assert (row["state"], row["possible_duplicate"]) == ("SENT", False)
            assert outcomes == ["UNKNOWN", "FOUND"]
            assert row["receipt"]["ts"] == slack.posts[0].ts
        db.dispose()
