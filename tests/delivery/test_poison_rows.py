"""One row's poison fails that row alone, on SQLite and PostgreSQL.

- A webhook receiver answering 429 with a hostile ``Retry-After`` (a number no
  timedelta holds, a date in the year 9999) beside healthy webhook and Slack rows in
  the same batch: the healthy ones are SENT once, the hostile one waits at most the
  channel's ``max_retry_after``, nothing stays SENDING, and the delivery worker's
  ``exit_when_idle`` loop returns.
- A channel with a bug, and an answer that cannot be stored: that row is FAILED
  ``internal_error`` and the rest of its batch is SENT.
- A report version that no longer parses, in a batch with others: its rows are
  FAILED ``prepare_failed``, the others SENT.
- ``idle`` looks :data:`~nbcast.delivery.worker.IDLE_HORIZON` ahead, no further.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, ClassVar

import pytest
import sqlalchemy as sa

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.models import DefinitionVersion
from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.channels.slack import SlackChannel
from nbcast.delivery.channels.webhook import WebhookChannel
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.models import Delivery
from nbcast.delivery.webhook_policy import WebhookPolicy
from nbcast.delivery.worker import IDLE_HORIZON, DeliveryWorker
from nbcast.errors import TransientChannelError
from nbcast.scheduler.models import Run
from nbcast.testing.http import HTTPReply
from nbcast.testing.slack_api import TOKEN, slack_server
from nbcast.testing.webhook import webhook_receiver
from tests.delivery.plane import Plane, receipts

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
LOCAL = WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
SLACK = {"C0SALES": "sales"}


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


def run_until_idle(worker: DeliveryWorker) -> None:
    """``worker.run(exit_when_idle=True)``, which must return by itself."""
    thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True}, daemon=True)
    thread.start()
    thread.join(timeout=120)  # a liveness guard, not a timing assertion
    if thread.is_alive():
        worker.stop()
        thread.join(timeout=30)
        pytest.fail("the delivery worker did not exit when idle")


def _not_before(plane: Plane, delivery_id: int) -> datetime:
    with plane.db.session() as session:
        value = session.scalar(sa.select(Delivery.not_before).where(Delivery.id == delivery_id))
    assert value is not None
    return value.astimezone(UTC)


HOSTILE_RETRY_AFTER = {
    "huge_seconds": "99999999999999999999",
    "year_9999": "Fri, 31 Dec 9999 23:59:59 GMT",
}


@pytest.mark.parametrize("retry_after", HOSTILE_RETRY_AFTER.values(), ids=HOSTILE_RETRY_AFTER)
def test_a_hostile_retry_after_waits_at_most_the_cap_and_the_worker_exits(
    plane: Plane, retry_after: str
) -> None:
    throttled = HTTPReply(429, b"slow down", {"Retry-After": retry_after})
    with (
        webhook_receiver(default=throttled) as hostile,
        webhook_receiver() as healthy,
        slack_server(channels=SLACK) as slack,
    ):
        plane.publish(  # the hostile row first: the rest of the batch comes after it
            "sales",
            [
                {"channel": "webhook", "to": hostile.url},
                {"channel": "webhook", "to": healthy.url},
                {"channel": "slack", "to": "C0SALES"},
            ],
        )
        plane.succeed("sales")
        webhook = WebhookChannel("whsec_test", timeout=5.0, policy=LOCAL)
        channels = {"webhook": webhook, "slack": SlackChannel(TOKEN, base_url=slack.base_url)}
        ledger = plane.ledger(channels)
        run_until_idle(DeliveryWorker(plane.db, plane.clock, ledger, plane.renders()))
        ledger.close()
        assert len(hostile.requests) == 1
        assert len(healthy.requests) == 1
        assert len(slack.posts) == 1
    rows = {r["recipient"]: r for r in receipts(plane)}
    assert {k: (r["state"], r["possible_duplicate"]) for k, r in rows.items()} == {
        hostile.url: ("PENDING", False),
        healthy.url: ("SENT", False),
        "C0SALES": ("SENT", False),
    }
    assert rows[hostile.url]["reason"] == "retry"
    waits_until = _not_before(plane, rows[hostile.url]["id"])
    cap = timedelta(seconds=WebhookChannel.max_retry_after)
    assert plane.clock.now() + IDLE_HORIZON < waits_until <= plane.clock.now() + cap


class _ThirdPartyChannel(Channel):
    """A channel a third party might ship, standing in for ``link``: fine for most
    recipients, and for one of them it misbehaves as ``mode`` says."""

    name: ClassVar[str] = "link"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def send(self, message: Message) -> Receipt:
        if message.recipient != "poison@example.com":
            return Receipt({"links": list(message.links)})
        if self.mode == "bad_receipt":  # not a mapping: the ledger cannot record it
            return Receipt(["not", "a", "mapping"])  # type: ignore[arg-type]
        if self.mode == "unstorable_receipt":  # a NUL (jsonb) and bytes (JSON)
            return Receipt({"note": "nul\x00byte", "raw": b"\x00\xff"})
        # A peer's nonsense passed on as is.
        raise TransientChannelError("busy", retry_after=float(self.mode))


def _poisoned_batch(plane: Plane, channel: Channel) -> dict[str, dict[str, Any]]:
    recipients = ["a@example.com", "poison@example.com", "b@example.com", "c@example.com"]
    plane.publish("sales", [{"channel": "link", "to": r} for r in recipients])
    plane.succeed("sales")
    ledger = plane.ledger({"link": channel})
    run_until_idle(DeliveryWorker(plane.db, plane.clock, ledger, plane.renders()))
    return {r["recipient"]: r for r in receipts(plane)}


@pytest.mark.parametrize("mode", ["bad_receipt", "unstorable_receipt"])
def test_a_row_that_cannot_be_recorded_fails_alone(plane: Plane, mode: str) -> None:
    rows = _poisoned_batch(plane, _ThirdPartyChannel(mode))
    poison = rows.pop("poison@example.com")
    assert (poison["state"], poison["reason"]) == ("FAILED", "internal_error")
    with plane.db.session() as session:
        error, unknown = session.execute(
            sa.select(Delivery.error, Delivery.outcome_unknown).where(Delivery.id == poison["id"])
        ).one()
    assert unknown  # it was sent: the failure says it may have arrived
    assert len(error["message"]) <= 500
    assert {(r["state"], r["reason"]) for r in rows.values()} == {("SENT", None)}


@pytest.mark.parametrize("retry_after", ["nan", "inf", "1e300"])
def test_a_nonsense_retry_after_from_any_channel_is_bounded(plane: Plane, retry_after: str) -> None:
    rows = _poisoned_batch(plane, _ThirdPartyChannel(retry_after))
    poison = rows.pop("poison@example.com")
    # Retried with the channel's own backoff (a value it cannot use is ignored) until
    # a wait goes past the idle horizon, or its attempts run out.
    assert (poison["state"], poison["reason"]) in {("PENDING", "retry"), ("FAILED", "max_attempts")}
    if poison["state"] == "PENDING":
        cap = timedelta(seconds=max(Channel.max_retry_after, Channel.backoff_cap))
        assert _not_before(plane, poison["id"]) <= plane.clock.now() + cap
    assert {(r["state"], r["reason"]) for r in rows.values()} == {("SENT", None)}


def test_idle_looks_only_as_far_as_the_horizon(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": "a@example.com"}])
    plane.succeed("sales")
    ledger = plane.ledger({"link": LinkChannel()})
    worker = DeliveryWorker(plane.db, plane.clock, ledger, plane.renders())
    assert not worker.idle()  # an unconsumed outbox row
    worker.step()
    assert worker.idle()  # sent
    with plane.db.session() as session:
        session.execute(
            sa.update(Delivery).values(
                state="PENDING", not_before=plane.clock.now() + IDLE_HORIZON / 2
            )
        )
    assert not worker.idle()  # a retry due within the horizon: wait for it
    with plane.db.session() as session:
        session.execute(sa.update(Delivery).values(not_before=plane.clock.now() + 2 * IDLE_HORIZON))
    assert worker.idle()  # due later: left PENDING for the next run


def test_a_version_that_no_longer_parses_fails_only_its_own_rows(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": "a@example.com"}])
    plane.publish("costs", [{"channel": "link", "to": "a@example.com"}])
    plane.succeed("sales")
    costs = plane.succeed("costs")
    renders = plane.renders()
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    while renders.render_pending(10):
        pass
    with plane.db.session() as session:  # e.g. stricter validation after an upgrade
        version = session.scalar(sa.select(Run.version_id).where(Run.id == costs))
        session.execute(
            sa.update(DefinitionVersion)
            .where(DefinitionVersion.id == version)
            .values(spec={"name": 42})
        )
    ledger = plane.ledger({"link": LinkChannel()})
    assert ledger.deliver_due(50) == 2  # one batch, both runs
    by_run = {r["run_id"]: (r["state"], r["reason"]) for r in receipts(plane)}
    assert by_run.pop(costs) == ("FAILED", "prepare_failed")
    assert list(by_run.values()) == [("SENT", None)]
