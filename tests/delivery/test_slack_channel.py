"""SlackChannel against a fake Slack Web API on 127.0.0.1 (nbcast/testing/slack_api.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest

from nbcast.delivery.channels.base import Attachment, Message
from nbcast.delivery.channels.slack import EVENT_TYPE, SlackChannel
from nbcast.delivery.report import ReportInfo
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError
from nbcast.testing.slack_api import TOKEN, FakeSlackAPI, slack_server

PDF = b"%PDF-1.4\n%%EOF\n"


def make_message(
    delivery_id: int = 7,
    *,
    recipient: str = "C0REPORTS",
    attachments: tuple[Attachment, ...] = (),
) -> Message:
    now = datetime.now(UTC)
    report = ReportInfo(
        tenant="acme",
        definition="daily-sales",
        version=3,
        run_id=42,
        slot_key="2026-10-30T07:00",
        fire_at=now - timedelta(minutes=3),
        finished_at=now - timedelta(minutes=1),
    )
    return Message(
        key=f"nbcast-d{delivery_id}-r42",
        delivery_id=delivery_id,
        attempt=1,
        recipient=recipient,
        report=report,
        subject="daily-sales — 2026-10-30T07:00",
        html="<p>EMEA: 42</p>",
        text="EMEA: 42 <up 3%>",
        attachments=attachments,
        links=("https://nbcast.example/l/abc",),
    )


@pytest.fixture
def slack() -> Iterator[FakeSlackAPI]:
    with slack_server() as server:
        yield server


def channel_for(slack: FakeSlackAPI, *, timeout: float = 1.0, **options: bool) -> SlackChannel:
    return SlackChannel(TOKEN, base_url=slack.base_url, timeout=timeout, **options)


def test_post_with_metadata_and_files_in_its_thread(slack: FakeSlackAPI) -> None:
    pdf = Attachment(filename="daily-sales.pdf", media_type="application/pdf", content=PDF)
    csv = Attachment(filename="daily-sales.csv", media_type="text/csv", content=b"a,b\n1,2\n")
    receipt = channel_for(slack).send(make_message(attachments=(pdf, csv)))

    [post] = slack.posts
    assert receipt.detail["channel"] == post.channel == "C0REPORTS"
    assert receipt.detail["ts"] == post.ts
    assert post.text == "EMEA: 42 <up 3%>"
    assert post.metadata == {"event_type": EVENT_TYPE, "event_payload": {"key": "nbcast-d7-r42"}}
    assert post.blocks[0]["text"]["text"] == "daily-sales — 2026-10-30T07:00"
    assert "EMEA: 42 &lt;up 3%&gt;" in str(post.blocks)
    assert "nbcast-d7-r42" in str(post.blocks[-1])

    files = {f.filename: f for f in slack.files}
    assert {name: f.content for name, f in files.items()} == {
        "daily-sales.pdf": PDF,
        "daily-sales.csv": b"a,b\n1,2\n",
    }
    assert all(f.channel == "C0REPORTS" and f.thread_ts == post.ts for f in files.values())
    assert sorted(receipt.detail["files"]) == sorted(f.id for f in files.values())
    assert slack.calls.count("files.getUploadURLExternal") == 2


def test_files_are_not_uploaded_when_turned_off(slack: FakeSlackAPI) -> None:
    pdf = Attachment(filename="r.pdf", media_type="application/pdf", content=PDF)
    receipt = channel_for(slack, upload_files=False).send(make_message(attachments=(pdf,)))
    assert slack.files == []
    assert "files" not in receipt.detail


def test_a_channel_name_is_posted_to(slack: FakeSlackAPI) -> None:
    receipt = channel_for(slack).send(make_message(recipient="#reports"))
    assert receipt.detail["channel"] == "C0REPORTS"


def test_rate_limit_is_waited_out_once(slack: FakeSlackAPI) -> None:
    slack.rate_limit(1, retry_after=1)
    started = time.monotonic()
    receipt = channel_for(slack).send(make_message())
    assert time.monotonic() - started >= 1.0  # the client waited Retry-After
    assert receipt.detail["ts"] == slack.posts[0].ts
    assert slack.calls == ["chat.postMessage", "chat.postMessage"]


def test_persistent_rate_limit_is_transient_with_retry_after(slack: FakeSlackAPI) -> None:
    slack.rate_limit(5, retry_after=1)
    with pytest.raises(TransientChannelError) as caught:
        channel_for(slack).send(make_message())
    assert caught.value.retry_after == 1.0
    assert slack.calls == ["chat.postMessage", "chat.postMessage"]
    assert slack.posts == []


def test_a_long_retry_after_goes_back_to_the_ledger_at_once(slack: FakeSlackAPI) -> None:
    slack.rate_limit(1, retry_after=30)
    with pytest.raises(TransientChannelError) as caught:
        channel_for(slack).send(make_message())
    assert slack.calls == ["chat.postMessage"]  # not waited out in the send: no second try
    assert caught.value.retry_after == 30.0


def test_server_error_may_have_posted(slack: FakeSlackAPI) -> None:
    """A 5xx after the request reached Slack (or a proxy) may still have posted: the
    outcome is unknown, so the ledger checks the history before posting again."""
    slack.server_error(1)
    with pytest.raises(OutcomeUnknownError, match="500"):
        channel_for(slack).send(make_message())
    assert slack.posts == []
    slack.fail("internal_error")
    with pytest.raises(OutcomeUnknownError, match="internal_error"):
        channel_for(slack).send(make_message())


@pytest.mark.parametrize("error", ["channel_not_found", "not_in_channel", "invalid_auth"])
def test_refusals_are_permanent(slack: FakeSlackAPI, error: str) -> None:
    slack.fail(error)
    with pytest.raises(PermanentChannelError, match=error):
        channel_for(slack).send(make_message())


def test_unknown_channel_and_bad_token_are_permanent(slack: FakeSlackAPI) -> None:
    with pytest.raises(PermanentChannelError, match="channel_not_found"):
        channel_for(slack).send(make_message(recipient="C0NOWHERE"))
    wrong = SlackChannel("xoxb-wrong", base_url=slack.base_url, timeout=1.0)
    with pytest.raises(PermanentChannelError, match="invalid_auth"):
        wrong.send(make_message())


def test_connection_refused_is_transient() -> None:
    with slack_server() as gone:
        base_url = gone.base_url
    with pytest.raises(TransientChannelError, match="could not be reached"):
        SlackChannel(TOKEN, base_url=base_url, timeout=1.0).send(make_message())


def test_lost_answer_is_unknown_and_check_finds_the_post(slack: FakeSlackAPI) -> None:
    channel = channel_for(slack, timeout=0.5)
    message = make_message()
    slack.hang(1, seconds=3.0)
    with pytest.raises(OutcomeUnknownError):
        channel.send(message)

    [post] = slack.posts  # it did arrive
    receipt = channel.check(message)
    assert receipt is not None
    assert receipt.detail == {"channel": "C0REPORTS", "ts": post.ts, "found_by": "metadata"}
    assert slack.calls.count("chat.postMessage") == 1


def test_check_finds_nothing_for_a_message_never_sent(slack: FakeSlackAPI) -> None:
    channel = channel_for(slack)
    channel.send(make_message(1))
    assert channel.check(make_message(2)) is None


def test_check_falls_back_to_the_key_in_the_blocks(slack: FakeSlackAPI) -> None:
    channel = channel_for(slack)
    sent = channel.send(make_message(3))
    # A history read without metadata (e.g. stripped by a workspace policy).
    slack.posts[0].metadata.clear()  # type: ignore[union-attr]
    receipt = channel.check(make_message(3))
    assert receipt is not None
    assert receipt.detail["ts"] == sent.detail["ts"]
    assert receipt.detail["found_by"] == "text"


def test_check_cannot_look_up_a_channel_name(slack: FakeSlackAPI) -> None:
    channel = channel_for(slack)
    channel.send(make_message(recipient="#reports"))
    # conversations.history takes ids only: it cannot tell, and says so (the ledger
    # then sends again and records a possible duplicate).
    with pytest.raises(PermanentChannelError, match="cannot be read"):
        channel.check(make_message(recipient="#reports"))


def test_check_raises_transient_when_history_is_unavailable(slack: FakeSlackAPI) -> None:
    slack.server_error(1, method="conversations.history")
    with pytest.raises(TransientChannelError):
        channel_for(slack).check(make_message())
