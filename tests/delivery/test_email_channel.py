"""EmailChannel against a real SMTP server on 127.0.0.1 (nbcast/testing/smtp.py)."""

from __future__ import annotations

from datetime import UTC, datetime
from email.message import EmailMessage
from typing import cast

import pytest

from nbcast.delivery.channels.base import Attachment, Message
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.report import ReportInfo
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError
from nbcast.testing.smtp import FakeSMTPServer, free_port, smtp_server

SENDER = "nbcast <reports@nbcast.example>"
PDF = b"%PDF-1.4\n1 0 obj<<>>endobj\ntrailer<<>>\n%%EOF\n"
CSV = b"region,revenue\nEMEA,42\n"

REPORT = ReportInfo(
    tenant="acme",
    definition="daily-sales",
    version=3,
    run_id=42,
    slot_key="2026-10-30T07:00",
    fire_at=datetime(2026, 10, 30, 6, 0, tzinfo=UTC),
    finished_at=datetime(2026, 10, 30, 6, 2, tzinfo=UTC),
)


def make_message(
    delivery_id: int = 7,
    *,
    recipient: str = "cfo@example.com",
    attachments: tuple[Attachment, ...] = (),
    unsubscribe_url: str | None = "https://nbcast.example/u/tok.en",
) -> Message:
    return Message(
        key=f"nbcast-d{delivery_id}-r42",
        delivery_id=delivery_id,
        attempt=1,
        recipient=recipient,
        report=REPORT,
        subject="daily-sales — 2026-10-30T07:00",
        html="<h1>Daily sales</h1><p>EMEA: 42 €</p>",
        text="Daily sales\nEMEA: 42 €\n",
        attachments=attachments,
        unsubscribe_url=unsubscribe_url,
    )


def channel_for(server: FakeSMTPServer, **options: object) -> EmailChannel:
    return EmailChannel(server.host, server.port, sender=SENDER, timeout=2.0, **options)  # type: ignore[arg-type]


def test_message_headers_bodies_and_attachments() -> None:
    attachments = (
        Attachment(
            filename="daily-sales_2026-10-30T0700.pdf", media_type="application/pdf", content=PDF
        ),
        Attachment(filename="daily-sales.csv", media_type="text/csv", content=CSV),
    )
    with smtp_server() as server, channel_for(server) as channel:
        receipt = channel.send(make_message(attachments=attachments))

        [received] = server.messages
    mail = received.mail
    assert received.mail_from == "reports@nbcast.example"
    assert received.rcpt_tos == ("cfo@example.com",)
    assert mail["Subject"] == "daily-sales — 2026-10-30T07:00"
    assert mail["To"] == "cfo@example.com"
    assert mail["X-Nbcast-Delivery"] == "nbcast-d7-r42"
    assert mail["Message-ID"].startswith("<nbcast-d7-r42.")
    assert mail["Message-ID"].endswith("@nbcast.example>")
    assert mail["List-Unsubscribe"] == "<https://nbcast.example/u/tok.en>"
    assert mail["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"

    html = mail.get_body(("html",))
    text = mail.get_body(("plain",))
    assert isinstance(html, EmailMessage)
    assert isinstance(text, EmailMessage)
    assert "EMEA: 42 €" in html.get_content()
    # Text travels in canonical form (CRLF line ends, RFC 2046).
    assert text.get_content().replace("\r\n", "\n") == "Daily sales\nEMEA: 42 €\n"

    found = {
        part.get_filename(): (part.get_content_type(), part.get_content())
        for part in mail.iter_attachments()
    }
    assert found == {
        "daily-sales_2026-10-30T0700.pdf": ("application/pdf", PDF),
        "daily-sales.csv": ("text/csv", CSV.decode()),
    }

    assert receipt.detail["smtp"].startswith("250 ")
    assert receipt.detail["message_id"] == mail["Message-ID"]
    assert receipt.detail["refused"] == {}


def test_no_unsubscribe_headers_without_url_and_no_attachments_when_attach_is_off() -> None:
    pdf = Attachment(filename="r.pdf", media_type="application/pdf", content=PDF)
    with smtp_server() as server, channel_for(server, attach=False) as channel:
        channel.send(make_message(attachments=(pdf,), unsubscribe_url=None))
        mail = server.messages[0].mail
    assert "List-Unsubscribe" not in mail
    assert "List-Unsubscribe-Post" not in mail
    assert list(mail.iter_attachments()) == []


def test_each_attempt_gets_a_new_message_id_carrying_the_key() -> None:
    with smtp_server() as server, channel_for(server) as channel:
        first = channel.send(make_message())
        second = channel.send(make_message())
    assert first.detail["message_id"] != second.detail["message_id"]
    assert all("nbcast-d7-r42." in r.detail["message_id"] for r in (first, second))


def test_one_session_carries_many_sends() -> None:
    with smtp_server() as server:
        channel = channel_for(server)
        with channel:
            for n in range(200):
                channel.send(make_message(n))
            assert channel.sessions_opened == 1
        assert len(server.messages) == 200
        assert server.sessions == 1
        assert {m.mail["X-Nbcast-Delivery"] for m in server.messages} == {
            f"nbcast-d{n}-r42" for n in range(200)
        }


def test_temporary_refusal_is_transient_and_the_session_survives() -> None:
    with smtp_server() as server, channel_for(server) as opened:
        channel = cast(EmailChannel, opened)
        server.refuse_next("451 4.3.0 Try again later")
        with pytest.raises(TransientChannelError, match="451"):
            channel.send(make_message(1))
        channel.send(make_message(2))
        assert [m.mail["X-Nbcast-Delivery"] for m in server.messages] == ["nbcast-d2-r42"]
        assert server.sessions == 1
        assert channel.sessions_opened == 1


def test_unknown_mailbox_is_permanent() -> None:
    unknown = {"nobody@example.com": "550 5.1.1 <nobody@example.com>: unknown mailbox"}
    with smtp_server(refuse_recipients=unknown) as server, channel_for(server) as channel:
        with pytest.raises(PermanentChannelError, match=r"550 5\.1\.1"):
            channel.send(make_message(recipient="nobody@example.com"))
        assert server.messages == []
        [refused] = server.refused
        assert refused.stage == "RCPT"


def test_partly_refused_recipients_are_recorded() -> None:
    unknown = {"nobody@example.com": "550 5.1.1 unknown mailbox"}
    with smtp_server(refuse_recipients=unknown) as server, channel_for(server) as channel:
        receipt = channel.send(make_message(recipient="cfo@example.com, nobody@example.com"))
        assert server.messages[0].rcpt_tos == ("cfo@example.com",)
    assert receipt.detail["refused"] == {"nobody@example.com": "550 5.1.1 unknown mailbox"}


def test_permanent_refusal_at_data() -> None:
    with smtp_server(refuse_rate=1.0, refuse_reply="554 5.7.1 Rejected") as server:
        with channel_for(server) as channel, pytest.raises(PermanentChannelError, match="554"):
            channel.send(make_message())


def test_random_refusals_are_transient_and_retries_get_through() -> None:
    with smtp_server(refuse_rate=0.3, seed=1) as server, channel_for(server) as channel:
        outcomes = {"sent": 0, "transient": 0}
        for n in range(40):
            for _ in range(20):
                try:
                    channel.send(make_message(n))
                except TransientChannelError:
                    outcomes["transient"] += 1
                else:
                    outcomes["sent"] += 1
                    break
        assert outcomes["sent"] == 40
        assert outcomes["transient"] == len(server.refused) > 0
        assert server.sessions == 1


def test_no_answer_after_data_is_an_unknown_outcome() -> None:
    with smtp_server(hang_after_data=3.0) as server:
        channel = EmailChannel(server.host, server.port, sender=SENDER, timeout=0.5)
        with channel, pytest.raises(OutcomeUnknownError):
            channel.send(make_message())
        # The message did arrive: this is what "unknown" protects against.
        assert len(server.messages) == 1
        server.set_hang_after_data(None)
        with channel:
            channel.send(make_message(8))  # a fresh session after the lost one
        assert channel.sessions_opened == 2


def test_connection_refused_is_transient() -> None:
    channel = EmailChannel("127.0.0.1", free_port(), sender=SENDER, timeout=1.0)
    with channel, pytest.raises(TransientChannelError, match="cannot reach"):
        channel.send(make_message())


def test_a_session_the_server_dropped_is_reopened() -> None:
    with smtp_server() as server, channel_for(server) as opened:
        channel = cast(EmailChannel, opened)
        channel.send(make_message(1))
        server.drop_connections()
        channel.send(make_message(2))
        assert len(server.messages) == 2
        assert channel.sessions_opened == 2


def test_starttls_and_auth() -> None:
    options = {"tls": True, "require_starttls": True, "users": {"nbcast": "s3cret"}}
    with smtp_server(**options) as server:
        channel = channel_for(
            server,
            security="starttls",
            username="nbcast",
            password="s3cret",
            ssl_context=server.client_context,
        )
        with channel:
            channel.send(make_message())
            channel.send(make_message(8))
        assert len(server.messages) == 2
        assert server.sessions == 1


def test_bad_credentials_are_a_transient_configuration_error() -> None:
    options = {"tls": True, "users": {"nbcast": "s3cret"}}
    with smtp_server(**options) as server:
        channel = channel_for(
            server,
            security="starttls",
            username="nbcast",
            password="wrong",
            ssl_context=server.client_context,
        )
        with channel, pytest.raises(TransientChannelError, match="configuration: AUTH 535"):
            channel.send(make_message())
        assert server.messages == []


def test_implicit_tls() -> None:
    with smtp_server(implicit_tls=True) as server:
        channel = channel_for(server, security="ssl", ssl_context=server.client_context)
        with channel:
            channel.send(make_message())
        assert len(server.messages) == 1


def test_untrusted_certificate_is_a_transient_configuration_error() -> None:
    with smtp_server(tls=True) as server:
        channel = channel_for(server, security="starttls")  # system CAs: not ours
        with channel, pytest.raises(TransientChannelError, match="configuration: TLS"):
            channel.send(make_message())


def test_a_non_ascii_address_is_refused_and_the_session_stays_usable() -> None:
    with smtp_server() as server, channel_for(server) as channel:
        with pytest.raises(PermanentChannelError, match="SMTPUTF8"):
            channel.send(make_message(recipient="jörg@example.com"))
        channel.send(make_message(recipient="a@example.com"))  # not "503 nested MAIL"
        assert [m.rcpt_tos for m in server.messages] == [("a@example.com",)]
