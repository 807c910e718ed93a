"""Slack and SMTP peers that answer nonsense: bounded, never a crash, never stored whole.

Against the fake Slack Web API and the SMTP server on 127.0.0.1
(``nbcast/testing/slack_api.py``, ``nbcast/testing/smtp.py``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from nbcast.delivery.channels._peer import RETRY_AFTER_CEILING
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.channels.slack import SlackChannel
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError
from nbcast.testing.slack_api import TOKEN, FakeSlackAPI, slack_server
from nbcast.testing.smtp import smtp_server
from tests.delivery.test_slack_channel import make_message


@pytest.fixture
def slack() -> Iterator[FakeSlackAPI]:
    with slack_server() as server:
        yield server


def _channel(slack: FakeSlackAPI) -> SlackChannel:
    return SlackChannel(TOKEN, base_url=slack.base_url, timeout=2.0)


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        ("99999999999999999999", RETRY_AFTER_CEILING),
        ("inf", None),
        ("-3", None),
        ("Fri, 31 Dec 9999 23:59:59 GMT", RETRY_AFTER_CEILING),
    ],
    ids=["huge", "inf", "negative", "year_9999"],
)
def test_a_hostile_retry_after_is_bounded_and_not_waited_for_in_the_send(
    slack: FakeSlackAPI, header: str, expected: float | None
) -> None:
    slack.rate_limit(5, retry_after=header)  # type: ignore[arg-type]
    with pytest.raises(TransientChannelError) as caught:
        _channel(slack).send(make_message())
    assert caught.value.retry_after == expected
    assert slack.calls == ["chat.postMessage"]  # no wait inside the send
    assert slack.posts == []


def test_a_decimal_retry_after_is_waited_out(slack: FakeSlackAPI) -> None:
    slack.rate_limit(1, retry_after="0.2")  # type: ignore[arg-type]
    receipt = _channel(slack).send(make_message())
    assert receipt.detail["ts"] == slack.posts[0].ts
    assert slack.calls == ["chat.postMessage", "chat.postMessage"]


def test_malformed_json_from_chat_post_message_is_an_unknown_outcome(
    slack: FakeSlackAPI,
) -> None:
    slack.garble(1, method="chat.postMessage")
    with pytest.raises(OutcomeUnknownError, match="not JSON"):
        _channel(slack).send(make_message())


def test_ok_without_channel_and_ts_is_an_unknown_outcome(slack: FakeSlackAPI) -> None:
    slack.garble(1, method="chat.postMessage", body=b'{"ok": true, "ts": {"no": 1}}')
    with pytest.raises(OutcomeUnknownError, match="no channel and ts"):
        _channel(slack).send(make_message())


def test_a_non_json_answer_is_refused_with_a_bounded_message(slack: FakeSlackAPI) -> None:
    slack.garble(1, method="chat.postMessage", body=b"<html>" + b"x" * 5000)
    with pytest.raises(PermanentChannelError) as caught:
        _channel(slack).send(make_message())
    assert len(str(caught.value)) <= 400


def test_garbled_history_is_a_transient_failure_to_look(slack: FakeSlackAPI) -> None:
    slack.garble(1, method="conversations.history", body=b'{"ok": true, "messages": 7')
    with pytest.raises(TransientChannelError):
        _channel(slack).check(make_message())
    slack.garble(1, method="conversations.history", body=b'{"ok": true, "messages": [7, {}]}')
    assert _channel(slack).check(make_message()) is None


def test_an_smtp_server_s_long_reply_is_kept_short() -> None:
    with smtp_server() as server:
        channel = EmailChannel(server.host, server.port, sender="r@example.com", timeout=5.0)
        server.refuse_next("554 5.7.1 " + "no " * 2000)
        with pytest.raises(PermanentChannelError) as caught:
            channel.send(make_message(recipient="cfo@example.com"))
        channel.close()
    assert str(caught.value).startswith("SMTP DATA refused: 554 5.7.1 no no")
    assert len(str(caught.value)) <= 400
