"""WebhookChannel against a real HTTP receiver on 127.0.0.1 (nbcast/testing/webhook.py).

The receivers listen on the loopback interface, which nbcast's default webhook policy
refuses: these tests allow it, as a user's own tests would
(``WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))``). What the policy refuses,
and what a receipt keeps, is tested in ``test_webhook_policy.py``.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import pytest

from nbcast.delivery.channels.base import Attachment, Message
from nbcast.delivery.channels.webhook import WebhookChannel, verify_signature
from nbcast.delivery.report import ReportInfo
from nbcast.delivery.webhook_policy import WebhookPolicy
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError
from nbcast.testing.smtp import free_port
from nbcast.testing.webhook import WebhookReceiver, webhook_receiver

SECRET = "whsec_test"
PDF = b"%PDF-1.4\n%%EOF\n"
LOCAL = WebhookPolicy(allow_http=True, allowed=("127.0.0.1",))
"""The receivers of these tests, on 127.0.0.1, allowed as a user's test would."""


def make_message(recipient: str, *, late_by: timedelta | None = None) -> Message:
    report = ReportInfo(
        tenant="acme",
        definition="daily-sales",
        version=3,
        run_id=42,
        slot_key="2026-10-30T07:00",
        fire_at=datetime(2026, 10, 30, 6, 0, tzinfo=UTC),
        finished_at=datetime(2026, 10, 30, 6, 2, 30, tzinfo=UTC),
        late_by=late_by,
    )
    return Message(
        key="nbcast-d7-r42",
        delivery_id=7,
        attempt=2,
        recipient=recipient,
        report=report,
        subject="daily-sales — 2026-10-30T07:00",
        html="<p>EMEA: 42</p>",
        text="EMEA: 42",
        attachments=(Attachment(filename="r.pdf", media_type="application/pdf", content=PDF),),
        links=("https://nbcast.example/l/abc",),
    )


@pytest.fixture
def hook() -> Iterator[WebhookReceiver]:
    with webhook_receiver() as receiver:
        yield receiver


@pytest.fixture
def channel() -> Iterator[WebhookChannel]:
    with WebhookChannel(SECRET, timeout=1.0, policy=LOCAL) as made:
        assert isinstance(made, WebhookChannel)
        yield made


def test_signed_payload_and_receipt(hook: WebhookReceiver, channel: WebhookChannel) -> None:
    receipt = channel.send(make_message(hook.url, late_by=timedelta(minutes=45)))

    [request] = hook.requests
    assert request.method == "POST"
    assert request.path == "/hooks/nbcast"
    assert request.header("X-Nbcast-Delivery") == "nbcast-d7-r42"
    timestamp = request.header("X-Nbcast-Timestamp")
    signature = request.header("X-Nbcast-Signature")
    assert timestamp is not None
    assert signature is not None
    assert signature.startswith("sha256=")
    assert verify_signature(SECRET, timestamp, request.body, signature)

    body = json.loads(request.body)
    assert body["key"] == "nbcast-d7-r42"
    assert body["report"] == {
        "tenant": "acme",
        "definition": "daily-sales",
        "version": 3,
        "run_id": 42,
        "slot_key": "2026-10-30T07:00",
        "fire_at": "2026-10-30T06:00:00+00:00",
        "finished_at": "2026-10-30T06:02:30+00:00",
        "late_by": 2700.0,
    }
    assert body["links"] == ["https://nbcast.example/l/abc"]
    assert body["attachments"] == [
        {
            "filename": "r.pdf",
            "media_type": "application/pdf",
            "size": len(PDF),
            "sha256": hashlib.sha256(PDF).hexdigest(),
        }
    ]
    assert receipt.detail == {
        "status": 200,
        "headers": {"content-type": "application/json", "content-length": "12"},
    }


def test_tampered_body_wrong_secret_and_old_timestamp_fail_verification(
    hook: WebhookReceiver, channel: WebhookChannel
) -> None:
    channel.send(make_message(hook.url))
    [request] = hook.requests
    timestamp = request.header("X-Nbcast-Timestamp") or ""
    signature = request.header("X-Nbcast-Signature") or ""
    tampered = request.body.replace(b'"run_id":42', b'"run_id":43')
    assert tampered != request.body
    assert not verify_signature(SECRET, timestamp, tampered, signature)
    assert not verify_signature("other", timestamp, request.body, signature)
    assert not verify_signature(SECRET, timestamp, request.body, signature, now=time.time() + 301)
    assert verify_signature(SECRET, timestamp, request.body, signature, now=time.time() + 200)
    assert not verify_signature(SECRET, "not-a-number", request.body, signature)


def test_503_with_retry_after_seconds_is_transient(
    hook: WebhookReceiver, channel: WebhookChannel
) -> None:
    hook.respond(503, headers={"Retry-After": "7"})
    with pytest.raises(TransientChannelError) as caught:
        channel.send(make_message(hook.url))
    assert caught.value.retry_after == 7.0


def test_429_with_retry_after_date_is_transient(
    hook: WebhookReceiver, channel: WebhookChannel
) -> None:
    later = datetime.now(UTC) + timedelta(seconds=120)
    hook.respond(429, headers={"Retry-After": format_datetime(later, usegmt=True)})
    with pytest.raises(TransientChannelError) as caught:
        channel.send(make_message(hook.url))
    assert caught.value.retry_after is not None
    assert 100 < caught.value.retry_after <= 120


@pytest.mark.parametrize("status", [410, 404, 401, 301])
def test_other_refusals_are_permanent(
    hook: WebhookReceiver, channel: WebhookChannel, status: int
) -> None:
    hook.respond(status)
    with pytest.raises(PermanentChannelError, match=str(status)):
        channel.send(make_message(hook.url))


def test_lost_answer_is_an_unknown_outcome(hook: WebhookReceiver) -> None:
    hook.respond(200, delay=3.0)
    with (
        WebhookChannel(SECRET, timeout=0.5, policy=LOCAL) as channel,
        pytest.raises(OutcomeUnknownError),
    ):
        channel.send(make_message(hook.url))
    assert len(hook.requests) == 1


def test_connection_refused_is_transient(channel: WebhookChannel) -> None:
    with pytest.raises(TransientChannelError, match="unreachable"):
        channel.send(make_message(f"http://127.0.0.1:{free_port()}/hook"))


def test_connections_are_kept_alive(hook: WebhookReceiver, channel: WebhookChannel) -> None:
    for _ in range(20):
        channel.send(make_message(hook.url))
    assert len(hook.requests) == 20
    assert len({request.peer for request in hook.requests}) == 1
