"""Messages per second through one ``EmailChannel`` to a local SMTP server.

Prints JSON. One channel sends ``--messages`` reports (default 2,000; HTML body, a
text alternative, one small CSV attachment, the List-Unsubscribe headers) to an
aiosmtpd server running in its own process (``Sink`` handler, so the server's cost is
the same for both sides), over the one SMTP session the channel keeps open.

Side by side, the reference: the same number of messages, built once with the
standard library's :mod:`email` package, sent with plain :mod:`smtplib` over one
session. The ratio is what building each message (fresh Message-ID, headers per
recipient) and mapping every reply costs. ``sessions_opened`` must stay 1: a channel
that reconnected per message would show it here, and in a rate far below the
reference (this figure used to be a timing assertion in
``tests/delivery/test_email_channel.py``: more than 200 messages/s).
"""

from __future__ import annotations

import argparse
import json
import smtplib
import time
from datetime import UTC, datetime
from email.message import EmailMessage
from typing import Any

from benchmarks._common import smtp_sink
from nbcast.delivery.channels.base import Attachment, Message
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.report import ReportInfo
from nbcast.testing.http import free_port

SENDER = "reports@example.com"
CSV = b"region,revenue\nEMEA,42\nAPAC,7\n"
HTML = "<h1>Daily sales</h1><p>EMEA: 42 \u20ac</p>"
TEXT = "Daily sales\nEMEA: 42 \u20ac\n"
FLOOR = 200
"""Messages per second far below what one reused session does, far above a reconnect
per message: the old test's bound, kept as a reference figure."""

REPORT = ReportInfo(
    tenant="acme",
    definition="daily-sales",
    version=3,
    run_id=42,
    slot_key="2026-10-30T07:00",
    fire_at=datetime(2026, 10, 30, 6, 0, tzinfo=UTC),
    finished_at=datetime(2026, 10, 30, 6, 2, tzinfo=UTC),
)


def message(n: int) -> Message:
    """The ``n``-th message: one recipient, one attachment."""
    return Message(
        key=f"nbcast-d{n}-r42",
        delivery_id=n,
        attempt=1,
        recipient=f"user{n:05d}@example.com",
        report=REPORT,
        subject="daily-sales \u2014 2026-10-30T07:00",
        html=HTML,
        text=TEXT,
        attachments=(Attachment(filename="daily-sales.csv", media_type="text/csv", content=CSV),),
        unsubscribe_url=f"https://nbcast.example/nbcast/unsubscribe/tok{n}",
    )


def run_nbcast(port: int, count: int) -> dict[str, Any]:
    """Send ``count`` messages through one EmailChannel."""
    messages = [message(n) for n in range(count)]
    with EmailChannel("127.0.0.1", port, sender=SENDER, timeout=30) as channel:
        started = time.perf_counter()
        for item in messages:
            channel.send(item)
        elapsed = time.perf_counter() - started
        sessions = channel.sessions_opened
    return {
        "sent": count,
        "seconds": round(elapsed, 3),
        "messages_per_s": round(count / elapsed),
        "sessions_opened": sessions,
    }


def run_reference(port: int, count: int) -> dict[str, Any]:
    """Send ``count`` copies of one prebuilt message with plain smtplib, one session."""
    mail = EmailMessage()
    mail["From"] = SENDER
    mail["To"] = "user@example.com"
    mail["Subject"] = "daily-sales \u2014 2026-10-30T07:00"
    mail.set_content(TEXT)
    mail.add_alternative(HTML, subtype="html")
    mail.add_attachment(CSV, maintype="text", subtype="csv", filename="daily-sales.csv")
    payload = mail.as_bytes()
    with smtplib.SMTP("127.0.0.1", port) as smtp:
        started = time.perf_counter()
        for n in range(count):
            smtp.sendmail(SENDER, [f"user{n:05d}@example.com"], payload)
        elapsed = time.perf_counter() - started
    return {"sent": count, "seconds": round(elapsed, 3), "messages_per_s": round(count / elapsed)}


def main() -> None:
    """Run both sides and print the JSON report."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--messages", type=int, default=2000)
    args = parser.parse_args()
    port = free_port()
    sink = smtp_sink(port)
    try:
        run_nbcast(port, min(args.messages, 50))  # warm up: imports, the first session
        nbcast = run_nbcast(port, args.messages)
        reference = run_reference(port, args.messages)
    finally:
        sink.terminate()
        sink.wait(10)
    print(
        json.dumps(
            {
                "benchmark": "email_send",
                "when": datetime.now(UTC).isoformat(timespec="seconds"),
                "messages": args.messages,
                "nbcast_email_channel": nbcast,
                "reference_plain_smtplib": reference,
                "nbcast_over_reference": round(
                    nbcast["messages_per_s"] / reference["messages_per_s"], 3
                ),
                "floor_messages_per_s": FLOOR,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
