"""SLA alerts sent by the oversight service on SQLite and PostgreSQL, against a real SMTP
server: retried with the channel's backoff after a transient refusal, failed for good
after a permanent one or once the attempts are spent, failed when the worker has no
such channel, fenced by the claim's attempt, and — the documented at-least-once edge —
sent again, marked a possible duplicate, when a worker died between sending and
recording."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.email import EmailChannel
from nbcast.oversight.sla_alerts import AlertWorker
from nbcast.testing.smtp import FakeSMTPServer, smtp_server
from tests.oversight.sla_world import OWNER, World, minutes

START = datetime(2026, 11, 2, 6, 58, tzinfo=UTC)
SLOT = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)


@pytest.fixture
def world(db: Database, tmp_path: Path) -> World:
    """One miss of definition sales (its 07:00 run never ran), its alert PENDING to the
    owner by email."""
    clock = FixedClock(START)
    world = World(db, clock, tmp_path)
    world.publish("sales", {"cron": "0 7 * * *"})
    clock.set(SLOT + minutes(1))
    world.tick()
    clock.set(SLOT + minutes(31))
    assert world.check()["misses"] == 1
    return world


def _clock(world: World) -> FixedClock:
    assert isinstance(world.clock, FixedClock)
    return world.clock


def _email(server: FakeSMTPServer) -> EmailChannel:
    return EmailChannel(server.host, server.port, sender="nbcast@example.com", timeout=5.0)


def _alerts(world: World, server: FakeSMTPServer, owner: str = "test-delivery") -> AlertWorker:
    return AlertWorker(
        world.db,
        world.clock,
        {"email": _email(server)},
        owner=owner,
        lease=minutes(2),
        base_url="https://reports.example.com",
    )


def test_a_transient_refusal_is_retried_after_the_backoff_then_sent_once(world: World) -> None:
    with smtp_server() as server:
        server.refuse_next("451 4.3.0 Try again later", "451 4.3.0 Try again later")
        alerts = _alerts(world, server)
        assert alerts.send_due() == 1
        [miss] = world.misses()
        assert (miss["alert_state"], miss["alert_attempts"]) == ("PENDING", 1)
        assert miss["alert_error"]["reason"] == "retry"
        assert alerts.send_due() == 0  # not before the backoff is over
        for _ in range(2):
            _clock(world).advance(minutes(70))  # past any backoff of the email channel
            assert alerts.send_due() == 1
        assert len(server.messages) == 1
        assert server.messages[0].mail["To"] == OWNER
    [miss] = world.misses()
    assert (miss["alert_state"], miss["alert_attempts"], miss["alert_error"]) == ("SENT", 3, None)


def test_a_permanent_refusal_fails_the_alert(world: World) -> None:
    with smtp_server() as server:
        server.refuse_next("550 5.1.1 No such mailbox")
        assert _alerts(world, server).send_due() == 1
        _clock(world).advance(minutes(120))
        assert _alerts(world, server).send_due() == 0
        assert server.messages == []
    [miss] = world.misses()
    assert (miss["alert_state"], miss["alert_error"]["reason"]) == ("FAILED", "refused")
    assert "550" in miss["alert_error"]["message"]


def test_the_attempts_are_spent_then_the_alert_fails(world: World) -> None:
    with smtp_server() as server:
        channel = _email(server)
        server.refuse_next(*["451 4.3.0 Busy"] * channel.max_attempts)
        alerts = _alerts(world, server)
        for _ in range(channel.max_attempts):
            assert alerts.send_due() == 1
            _clock(world).advance(minutes(70))
        assert alerts.send_due() == 0
        assert server.messages == []
    [miss] = world.misses()
    assert (miss["alert_state"], miss["alert_attempts"]) == ("FAILED", channel.max_attempts)
    assert miss["alert_error"]["reason"] == "max_attempts"


def test_a_worker_without_the_channel_fails_the_alert(world: World) -> None:
    alerts = AlertWorker(world.db, world.clock, {}, owner="w", lease=minutes(2), base_url=None)
    assert alerts.send_due() == 1
    [miss] = world.misses()
    assert (miss["alert_state"], miss["alert_error"]["reason"]) == ("FAILED", "no_channel")


def test_a_send_whose_answer_was_never_recorded_is_sent_again_as_a_possible_duplicate(
    world: World,
) -> None:
    with smtp_server() as server:
        dying = _alerts(world, server, owner="dying-worker")
        claimed = dying.claim()
        assert claimed is not None
        dying.channels["email"].send(dying.message(claimed))  # …and the worker dies here
        assert _alerts(world, server).send_due() == 0  # its lease still holds
        _clock(world).advance(minutes(3))
        assert _alerts(world, server).send_due() == 1
        assert [m.mail["Subject"] for m in server.messages] == [
            "SLA missed: sales — 2026-11-02T07:00"
        ] * 2
        [miss] = world.misses()
        assert (miss["alert_state"], miss["alert_attempts"]) == ("SENT", 2)
        assert miss["alert_error"] == {"possible_duplicate": True}
        assert _alerts(world, server).send_due() == 0


def test_a_worker_that_lost_its_lease_records_nothing(world: World) -> None:
    with smtp_server() as server:
        slow = _alerts(world, server, owner="slow-worker")
        claimed = slow.claim()
        assert claimed is not None
        _clock(world).advance(minutes(3))
        assert _alerts(world, server).send_due() == 1  # another worker sends it
        assert not slow._record(claimed, "FAILED", {"reason": "too late"})
    [miss] = world.misses()
    assert miss["alert_state"] == "SENT"


def test_the_oversight_service_sends_a_due_alert_in_its_step_and_the_delivery_worker_does_not(
    world: World,
) -> None:
    from nbcast.oversight.service import OversightService

    with smtp_server() as server:
        delivery = world.worker({"email": _email(server)}).delivery
        assert not delivery.step().busy  # SLA alerts are not the delivery plane's
        assert delivery.idle()
        assert server.messages == []
        service = OversightService(
            world.db, world.clock, {"email": _email(server)}, name="oversight-1", interval=0.1
        )
        done = service.step()
        assert (done.alerted, done.error) == (1, None)
        assert service.step().alerted == 0
        assert len(server.messages) == 1
    [miss] = world.misses()
    assert miss["alert_state"] == "SENT"
