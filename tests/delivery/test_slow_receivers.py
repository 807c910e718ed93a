"""A webhook receiver that answers slowly cannot hold delivery up: every request has a
total deadline (:attr:`WebhookChannel.total_timeout`), on SQLite and PostgreSQL.

The receivers here are raw TCP peers on 127.0.0.1 scripted byte by byte, since an
HTTP server library always answers whole: one trickles its headers a byte at a time,
one answers ``102 Processing`` over and over. Each byte comes well within httpx's
per-read timeout, so only a deadline for the whole request ends the send. The
``join`` timeouts below are liveness guards (a hung send fails the test instead of
hanging it), not timing assertions.
"""

from __future__ import annotations

import contextlib
import socket
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.webhook import MAX_TOTAL_TIMEOUT, WebhookChannel
from nbcast.delivery.models import Delivery
from nbcast.delivery.webhook_policy import WebhookPolicy
from nbcast.delivery.worker import DeliveryWorker
from nbcast.errors import ConfigError, OutcomeUnknownError
from nbcast.testing.webhook import webhook_receiver
from tests.delivery.plane import Plane, receipts
from tests.delivery.test_webhook_channel import SECRET, make_message

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
LOCAL = WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
GUARD_S = 60.0
"""How long a test waits for a send that should end within a second or two."""

TRICKLE = "trickle"
"""``HTTP/1.1 200 OK`` then an ``X-Slow: aaaa…`` header, one byte at a time, forever."""
PROCESSING = "processing"
"""``HTTP/1.1 102 Processing`` again and again, never a final answer."""


class SlowReceiver:
    """A TCP peer on 127.0.0.1 that reads each HTTP request and then answers as
    ``mode`` says, a piece every ``interval`` seconds, until stopped."""

    def __init__(self, mode: str, interval: float = 0.1) -> None:
        self.mode = mode
        self.interval = interval
        self.requests = 0
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._connections: list[socket.socket] = []
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self.url = f"http://127.0.0.1:{self._socket.getsockname()[1]}/hooks/nbcast"
        self._thread = threading.Thread(target=self._accept, daemon=True)

    def _accept(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self._connections.append(conn)
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with contextlib.suppress(OSError):
            received = b""
            while b"\r\n\r\n" not in received:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = next(
                (
                    int(line.split(b":", 1)[1])
                    for line in head.split(b"\r\n")
                    if line.lower().startswith(b"content-length:")
                ),
                0,
            )
            while len(body) < length:
                chunk = conn.recv(65536)
                if not chunk:
                    return
                body += chunk
            with self._lock:
                self.requests += 1
            if self.mode == TRICKLE:
                conn.sendall(b"HTTP/1.1 200 OK\r\nX-Slow: ")
            piece = b"a" if self.mode == TRICKLE else b"HTTP/1.1 102 Processing\r\n\r\n"
            while not self._stopping.wait(self.interval):
                conn.sendall(piece)

    def __enter__(self) -> SlowReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._socket.close()
        with self._lock:
            for conn in self._connections:
                conn.close()


@pytest.fixture(params=[TRICKLE, PROCESSING])
def slow(request: pytest.FixtureRequest) -> Iterator[SlowReceiver]:
    with SlowReceiver(request.param) as receiver:
        yield receiver


def test_a_slow_answer_ends_at_the_total_deadline(slow: SlowReceiver) -> None:
    # Each piece comes well within the 0.5 s per-read timeout: only the total ends it.
    channel = WebhookChannel(SECRET, timeout=0.5, total_timeout=1.0, policy=LOCAL)
    outcome: list[BaseException | None] = []

    def send() -> None:
        try:
            channel.send(make_message(slow.url))
            outcome.append(None)
        except BaseException as exc:
            outcome.append(exc)

    sender = threading.Thread(target=send, daemon=True)
    sender.start()
    sender.join(GUARD_S)
    assert not sender.is_alive(), "the send did not return"
    channel.close()
    [error] = outcome
    assert isinstance(error, OutcomeUnknownError)  # it was received: it may have arrived
    assert "total time limit of 1s" in str(error)
    assert slow.requests == 1


@pytest.fixture
def plane(db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Plane:
    # Publishing checks webhook URLs against the deployment's policy.
    monkeypatch.setenv("NBCAST_WEBHOOK_ALLOW_HTTP", "1")
    monkeypatch.setenv("NBCAST_WEBHOOK_ALLOWED_HOSTS", "127.0.0.1")
    return Plane(db, FixedClock(T0), tmp_path)


def test_a_slow_receiver_does_not_hold_up_another_tenants_delivery(
    plane: Plane, slow: SlowReceiver
) -> None:
    with webhook_receiver() as healthy:
        # The slow tenant's row first: with one sender the batch is sent in order.
        plane.publish("sales", [{"channel": "webhook", "to": slow.url}], tenant="slowpoke")
        plane.publish("costs", [{"channel": "webhook", "to": healthy.url}], tenant="acme")
        plane.succeed("sales", tenant="slowpoke")
        plane.succeed("costs", tenant="acme")
        channel = WebhookChannel("whsec_test", timeout=0.5, total_timeout=1.0, policy=LOCAL)
        ledger = plane.ledger({"webhook": channel})
        worker = DeliveryWorker(plane.db, plane.clock, ledger, plane.renders())
        thread = threading.Thread(target=worker.run, kwargs={"exit_when_idle": True}, daemon=True)
        thread.start()
        thread.join(GUARD_S)
        if thread.is_alive():
            worker.stop()
            pytest.fail("the delivery worker did not get past the slow receiver")
        ledger.close()
        assert len(healthy.requests) == 1
    rows = {r["recipient"]: r for r in receipts(plane)}
    assert rows[healthy.url]["state"] == "SENT"
    stuck = rows[slow.url]
    assert stuck["state"] in {"PENDING", "FAILED"}  # retried later, or out of attempts
    with plane.db.session() as session:
        unknown, error = session.execute(
            sa.select(Delivery.outcome_unknown, Delivery.error).where(Delivery.id == stuck["id"])
        ).one()
    assert unknown  # it was received: it may have arrived
    assert "total time limit of 1s" in error["message"]
    assert slow.requests >= 1


@pytest.mark.parametrize("value", [0, -1, float("nan"), float("inf"), MAX_TOTAL_TIMEOUT + 1])
def test_the_total_timeout_is_bounded(value: float) -> None:
    with pytest.raises(ConfigError, match="total_timeout"):
        WebhookChannel(SECRET, total_timeout=value, policy=LOCAL)


def test_the_total_timeout_defaults_to_thirty_seconds() -> None:
    with WebhookChannel(SECRET, policy=LOCAL) as channel:
        assert isinstance(channel, WebhookChannel)
        assert channel.total_timeout == WebhookChannel.total_timeout == 30.0
