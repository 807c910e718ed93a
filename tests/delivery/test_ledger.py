"""The delivery ledger on SQLite and PostgreSQL: intake from the executor's outbox,
one row per (run, channel, recipient), suppression rules, retries of only the failed
recipients, unknown outcomes, and a broken renderer that touches nothing else."""

from __future__ import annotations

import io
import time
from datetime import UTC, datetime, timedelta
from email.message import EmailMessage
from pathlib import Path
from typing import Any

import openpyxl
import pypdf
import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.ledger import retry_failed
from nbcast.delivery.links import verify_link
from nbcast.delivery.models import Delivery, DeliveryAttempt, Rendition
from nbcast.delivery.renderers import Renderer
from nbcast.delivery.report import ReportInfo
from nbcast.delivery.unsubscribe import record_unsubscribe, use_token
from nbcast.errors import RenderError, TransientChannelError
from nbcast.executor.models import OutboxRow
from nbcast.scheduler.control import backfill, run_now
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import ScheduleState
from nbcast.testing.smtp import smtp_server
from tests.delivery.plane import LOOPBACK, SIGNER, Plane, receipts
from tests.executor.test_early_exit import TABLE_AFTER, TABLE_BEFORE, code_cell
from tests.executor.test_worker import run_state
from tests.notebooks import make_notebook
from tests.workers import work_until_idle

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


def _email(server: Any) -> EmailChannel:
    return EmailChannel(server.host, server.port, sender="reports@example.com", timeout=5.0)


def test_an_outbox_row_becomes_one_ledger_row_per_recipient_once(plane: Plane) -> None:
    plane.publish(
        "sales",
        [
            {"channel": "link", "to": "cfo@example.com"},
            {"channel": "email", "to": "cfo@example.com"},
            {"channel": "email", "to": "ops@example.com"},
        ],
        outputs=("html", "csv"),
    )
    run_id = plane.succeed("sales")
    with plane.db.session() as session:
        assert consume_outbox(session, plane.clock.now()) == 1
    with plane.db.session() as session:  # a replayed outbox row adds nothing
        session.execute(sa.update(OutboxRow).values(consumed_at=None))
    with plane.db.session() as session:
        assert consume_outbox(session, plane.clock.now()) == 1
        assert consume_outbox(session, plane.clock.now()) == 0
        deliveries = session.execute(
            sa.select(Delivery.channel, Delivery.recipient, Delivery.state).order_by(Delivery.id)
        ).all()
        formats = sorted(session.scalars(sa.select(Rendition.format)))
    assert [tuple(d) for d in deliveries] == [
        ("link", "cfo@example.com", "PENDING"),
        ("email", "cfo@example.com", "PENDING"),
        ("email", "ops@example.com", "PENDING"),
    ]
    assert formats == ["csv", "html"]
    assert all(r["run_id"] == run_id for r in receipts(plane))


def test_a_report_is_emailed_with_its_attachments_and_headers(plane: Plane) -> None:
    plane.publish(
        "sales",
        [{"channel": "email", "to": "cfo@example.com", "formats": ["csv"]}],
        outputs=("html", "csv"),
    )
    run_id = plane.succeed("sales", marker="revenue is up")
    with smtp_server() as server:
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        [mail] = server.messages
    message: EmailMessage = mail.mail
    assert message["Subject"] == f"sales — run {run_id}"
    assert message["List-Unsubscribe-Post"] == "List-Unsubscribe=One-Click"
    unsubscribe = str(message["List-Unsubscribe"]).strip("<>")
    assert unsubscribe.startswith("https://reports.example.com/nbcast/unsubscribe/k1.")
    assert f"nbcast-d1-r{run_id}" in str(message["Message-ID"])
    html = message.get_body(("html",))
    assert html is not None
    assert "revenue is up" in html.get_content()
    [attachment] = list(message.iter_attachments())
    assert attachment.get_filename().endswith(".csv")
    content = attachment.get_content()
    text = content.decode() if isinstance(content, bytes) else content
    assert text.splitlines()[:2] == ["region,sales", "r0,0"]
    [row] = receipts(plane)
    assert (row["state"], row["attempt"]) == ("SENT", 1)
    assert str(row["receipt"]).find("250") >= 0  # the server's acceptance is the evidence
    # The one-click token in the header unsubscribes; the next run is suppressed.
    with plane.db.session() as session:
        use_token(session, SIGNER, unsubscribe.rsplit("/", 1)[1], plane.clock.now())
    plane.succeed("sales")
    with smtp_server() as server:
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        assert server.messages == []
    assert [(r["state"], r["reason"]) for r in receipts(plane)] == [
        ("SENT", None),
        ("SUPPRESSED", "unsubscribed"),
    ]


def test_emailed_pdf_and_xlsx_attachments_open(plane: Plane) -> None:
    plane.publish(
        "sales",
        [{"channel": "email", "to": "cfo@example.com", "formats": ["pdf", "xlsx"]}],
        outputs=("html", "pdf", "xlsx"),
    )
    plane.succeed("sales", rows=4)
    with smtp_server() as server:
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        [mail] = server.messages
    files = {a.get_filename(): a.get_content() for a in mail.mail.iter_attachments()}
    [pdf_name] = [n for n in files if n.endswith(".pdf")]
    [xlsx_name] = [n for n in files if n.endswith(".xlsx")]
    pdf = pypdf.PdfReader(io.BytesIO(files[pdf_name]))
    assert len(pdf.pages) >= 1
    assert "r3" in "".join(page.extract_text() for page in pdf.pages)
    book = openpyxl.load_workbook(io.BytesIO(files[xlsx_name]))
    assert book.sheetnames == ["About", "sales"]
    rows = list(book["sales"].iter_rows(values_only=True))
    assert rows[0] == ("Region", "Sales")
    assert rows[1:] == [("r0", 0), ("r1", 1), ("r2", 2), ("r3", 3)]


def test_only_failed_recipients_are_retried(plane: Plane) -> None:
    recipients = [f"user{i}@example.com" for i in range(6)]
    plane.publish("sales", [{"channel": "email", "to": r} for r in recipients])
    plane.succeed("sales")
    with smtp_server() as server:
        server.refuse_next("451 4.3.0 busy", "451 4.3.0 busy")  # the first two sends
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        delivered = sorted(r for m in server.messages for r in m.rcpt_tos)
    assert delivered == sorted(recipients)  # each exactly once
    rows = receipts(plane)
    assert all(r["state"] == "SENT" for r in rows)
    assert sorted(r["attempt"] for r in rows) == [1, 1, 1, 1, 2, 2]
    with plane.db.session() as session:
        outcomes = sorted(session.scalars(sa.select(DeliveryAttempt.outcome)))
    assert outcomes == ["RETRY", "RETRY"] + ["SENT"] * 6


def test_a_permanent_refusal_fails_and_can_be_retried_by_hand(plane: Plane) -> None:
    plane.publish(
        "sales",
        [
            {"channel": "email", "to": "gone@example.com"},
            {"channel": "email", "to": "ok@example.com"},
        ],
    )
    run_id = plane.succeed("sales")
    refused = {"gone@example.com": "550 5.1.1 no such mailbox"}
    with smtp_server(refuse_recipients=refused) as server:
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        assert [m.rcpt_tos for m in server.messages] == [("ok@example.com",)]
    assert [(r["state"], r["reason"]) for r in receipts(plane)] == [
        ("FAILED", "refused"),
        ("SENT", None),
    ]
    with plane.db.session() as session:
        assert retry_failed(session, run_id, plane.clock.now()) == 1
    with smtp_server() as server:  # the mailbox exists again
        plane.pump(plane.ledger({"email": _email(server)}), plane.renders())
        assert [m.rcpt_tos for m in server.messages] == [("gone@example.com",)]
    assert [r["state"] for r in receipts(plane)] == ["SENT", "SENT"]


def test_a_newer_slot_supersedes_an_older_one(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": "cfo@example.com"}])
    older = plane.succeed("sales")
    plane.clock.advance(timedelta(hours=1))
    newer = plane.succeed("sales")
    ledger, renders = plane.ledger({"link": LinkChannel()}), plane.renders()
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
        session.execute(
            sa.update(Delivery)
            .where(Delivery.run_id == older)
            .values(not_before=plane.clock.now() + timedelta(minutes=30))
        )  # the older one is late
    plane.pump(ledger, renders)
    by_run = {r["run_id"]: (r["state"], r["reason"]) for r in receipts(plane)}
    assert by_run == {newer: ("SENT", None), older: ("SUPPRESSED", "superseded")}


def test_a_backfill_is_sent_though_newer_reports_went_out_and_it_is_late(
    plane: Plane,
) -> None:
    """A backfill is asked for on purpose, for past periods: each run reports its own
    period, so its rows are neither superseded nor stale, and supersede nothing."""
    schedule = {
        "cron": "0 7 * * *",
        "timezone": "Europe/Berlin",
        "staleness": {"after": "40m", "action": "suppress"},
    }
    plane.publish("sales", [{"channel": "link", "to": "cfo@example.com"}], schedule=schedule)
    newer = plane.succeed("sales")  # today's report, sent first
    ledger, renders = plane.ledger({"link": LinkChannel()}), plane.renders()
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.pump(ledger, renders)
    Materializer(plane.db, plane.clock).sync()
    result = backfill(
        plane.db,
        plane.clock,
        Caller(tenant="default", user="t"),
        "sales",
        T0 - timedelta(days=3),
        T0,
    )
    assert (result.slots, result.inserted) == (3, 3)
    backfilled = plane.complete_due()
    assert len(backfilled) == 3
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.pump(ledger, renders)
    by_run = {r["run_id"]: (r["state"], r["reason"]) for r in receipts(plane)}
    assert by_run == {run: ("SENT", None) for run in [newer, *backfilled]}


def test_stale_reports_get_a_banner_or_are_suppressed(plane: Plane) -> None:
    every_day = {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}
    plane.publish(
        "banner",
        [{"channel": "link", "to": "a@example.com"}, {"channel": "email", "to": "a@example.com"}],
        schedule={**every_day, "staleness": {"after": "40m", "action": "banner"}},
    )
    plane.publish(
        "quiet",
        [{"channel": "link", "to": "a@example.com"}],
        schedule={**every_day, "staleness": {"after": "40m", "action": "suppress"}},
    )
    plane.succeed("banner")
    plane.succeed("quiet")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.clock.advance(timedelta(hours=1))  # both are now later than 40 minutes
    with smtp_server() as server:
        plane.pump(plane.ledger({"link": LinkChannel(), "email": _email(server)}), plane.renders())
        [mail] = server.messages
    rows = receipts(plane)
    assert [(r["state"], r["reason"]) for r in rows] == [
        ("SENT", None),
        ("SENT", None),
        ("SUPPRESSED", "stale"),
    ]
    with plane.db.session() as session:
        late = session.execute(
            sa.select(Rendition.variant, Rendition.state, Rendition.sha256)
        ).all()
        link_url = rows[0]["receipt"]["links"][0]
        link = verify_link(session, SIGNER, link_url.rsplit("/", 1)[1], plane.clock.now())
    variants = {(v, s) for v, s, _ in late}
    assert ("late", "DONE") in variants
    late_sha = next(sha for v, _, sha in late if v == "late")
    assert link.sha256 == late_sha  # the link points at the bannered rendition
    assert b"late" in plane.store.get(late_sha).lower()
    assert str(mail.mail["Subject"]).endswith("(late)")  # and the email says so
    body = mail.mail.get_body(("html",))
    assert body is not None
    assert "late" in body.get_content().lower()


class _FlakyLink(LinkChannel):
    """A link channel whose first send is refused for now; two attempts in all."""

    max_attempts = 2

    def __init__(self) -> None:
        self.sends = 0

    def send(self, message: Any) -> Any:
        self.sends += 1
        if self.sends == 1:
            raise TransientChannelError("busy")
        return super().send(message)


def test_a_claim_released_for_late_renditions_stays_on_the_record(plane: Plane) -> None:
    """A late delivery is claimed, released unsent while its bannered renditions are
    rendered, and claimed again: the released attempt is kept as evidence (RELEASED),
    its number is not reused, and it spends none of the channel's attempts."""
    plane.publish(
        "banner",
        [{"channel": "link", "to": "a@example.com"}],
        schedule={
            "cron": "0 7 * * *",
            "timezone": "Europe/Berlin",
            "staleness": {"after": "40m", "action": "banner"},
        },
    )
    plane.succeed("banner")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.clock.advance(timedelta(hours=1))
    plane.pump(plane.ledger({"link": _FlakyLink()}), plane.renders())
    [row] = receipts(plane)
    assert (row["state"], row["attempt"]) == ("SENT", 3)
    with plane.db.session() as session:
        attempts = session.execute(
            sa.select(
                DeliveryAttempt.attempt, DeliveryAttempt.outcome, DeliveryAttempt.detail
            ).order_by(DeliveryAttempt.attempt)
        ).all()
        retry_base = session.scalar(sa.select(Delivery.retry_base))
    assert [(a, o) for a, o, _ in attempts] == [(1, "RELEASED"), (2, "RETRY"), (3, "SENT")]
    assert attempts[0].detail == {"reason": "late_renditions"}
    assert retry_base == 1  # the release is not one of the channel's two attempts


def test_conditional_sends(plane: Plane) -> None:
    plane.publish("results", [{"channel": "link", "to": "a@example.com", "only_if": "results"}])
    plane.publish("changes", [{"channel": "link", "to": "a@example.com", "only_if": "changed"}])
    ledger, renders = plane.ledger({"link": LinkChannel()}), plane.renders()
    plane.succeed("results", rows=0)
    plane.succeed("results", rows=2)
    plane.succeed("changes", marker="same")
    plane.pump(ledger, renders)
    plane.clock.advance(timedelta(minutes=5))
    plane.succeed("changes", marker="same")  # byte-identical report
    plane.pump(ledger, renders)
    plane.clock.advance(timedelta(minutes=5))
    plane.succeed("changes", marker="different")
    plane.pump(ledger, renders)
    assert [(r["state"], r["reason"]) for r in receipts(plane)] == [
        ("SUPPRESSED", "no_results"),
        ("SENT", None),
        ("SENT", None),
        ("SUPPRESSED", "unchanged"),
        ("SENT", None),
    ]


class _Broken(Renderer):
    name = "html"
    media_type = "text/html"
    extension = "html"

    def __init__(self, mode: str) -> None:
        self.mode = mode

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        if self.mode == "hang":
            time.sleep(60)
        raise RenderError("this renderer is broken on purpose")


@pytest.mark.parametrize("mode", ["raise", "hang"])
def test_a_broken_renderer_leaves_scheduling_and_execution_running(plane: Plane, mode: str) -> None:
    """Hour by hour: the scheduler ticks, the executor runs what is due, and the
    delivery plane, whose renderer raises or hangs, fails its deliveries — while the
    watermark keeps advancing and the runs keep succeeding."""
    plane.publish(
        "hourly",
        [{"channel": "link", "to": "a@example.com"}],
        schedule={"cron": "0 * * * *", "timezone": "UTC"},
    )
    materializer = Materializer(plane.db, plane.clock)
    renders = plane.renders(lambda name: _Broken(mode), timeout=0.5, max_attempts=1)
    ledger = plane.ledger({"link": LinkChannel()})
    watermarks, succeeded = [], []
    for _ in range(3):
        plane.clock.advance(timedelta(hours=1))
        materializer.tick()
        succeeded += plane.complete_due()
        plane.pump(ledger, renders)
        with plane.db.session() as session:
            watermarks.append(session.scalar(sa.select(ScheduleState.watermark)))
    assert watermarks == sorted(set(watermarks))
    assert len(watermarks) == 3
    assert len(succeeded) == 3
    rows = receipts(plane)
    assert [(r["state"], r["reason"]) for r in rows] == [("FAILED", "render_failed")] * 3
    with plane.db.session() as session:
        errors = list(session.scalars(sa.select(Rendition.error)))
        states = set(session.execute(sa.text("SELECT state FROM runs")).scalars())
    expected = "RenderError" if mode == "raise" else "RenderTimeout"
    assert all(e is not None and e["error"] == expected for e in errors)
    assert states == {"SUCCEEDED"}  # the executor's rows are untouched


class _SlowLink(LinkChannel):
    """A link channel whose sends take a minute of the test's clock."""

    def __init__(self, clock: FixedClock) -> None:
        self.clock = clock

    def send(self, message: Any) -> Any:
        self.clock.advance(timedelta(seconds=61))
        return super().send(message)


def test_no_send_starts_once_the_lease_may_have_run_out(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": f"u{i}@example.com"} for i in range(3)])
    plane.succeed("sales")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.renders().render_pending(10)
    ledger = plane.ledger({"link": _SlowLink(plane.clock)}, lease_seconds=120)
    assert ledger.deliver_due(10) == 3
    # The lease is 120 s and a send must start with 30 s of it left: the sends that
    # start at 0 s and 61 s go out; at 122 s the lease may have run out (another
    # worker may hold the row), so the third goes back to the queue unsent.
    assert [(r["state"], r["reason"]) for r in receipts(plane)] == [
        ("SENT", None),
        ("SENT", None),
        ("PENDING", "lease_low"),
    ]


def test_a_row_that_cannot_be_prepared_fails_alone(plane: Plane) -> None:
    plane.publish(
        "sales",
        [
            {"channel": "link", "to": "a@example.com", "only_if": "results"},
            {"channel": "link", "to": "b@example.com"},
        ],
    )
    run_id = plane.succeed("sales")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.renders().render_pending(10)
    with plane.db.session() as session:
        sha = session.execute(sa.text(f"SELECT artifact_sha256 FROM runs WHERE id = {run_id}"))
        plane.store.path(sha.scalar_one()).unlink()  # only_if: results cannot be decided
    assert plane.ledger({"link": LinkChannel()}).deliver_due(10) == 2
    assert [(r["recipient"], r["state"], r["reason"]) for r in receipts(plane)] == [
        ("a@example.com", "FAILED", "prepare_failed"),
        ("b@example.com", "SENT", None),
    ]


def test_a_row_that_keeps_killing_its_workers_fails(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "link", "to": "a@example.com"}])
    plane.succeed("sales")
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
    plane.renders().render_pending(10)
    channel = LinkChannel()
    channel.max_attempts = 2
    for attempt in (1, 2):  # two workers claim it and die
        dead = plane.ledger({"link": channel}, owner=f"dead-{attempt}")
        assert len(dead.claim(10)) == 1
        plane.clock.advance(timedelta(minutes=10))
        assert plane.ledger({"link": channel}).reap() == 1
    [row] = receipts(plane)
    assert (row["state"], row["reason"], row["attempt"]) == ("FAILED", "outcome_unknown", 2)


def test_unsubscribing_an_address_ignores_its_case(plane: Plane) -> None:
    plane.publish(
        "sales",
        [{"channel": "link", "to": "a@example.com"}, {"channel": "email", "to": "CFO@Example.com"}],
    )
    plane.succeed("sales")
    with plane.db.session() as session:
        tenant_id = session.execute(sa.text("SELECT id FROM tenants")).scalar_one()
        record_unsubscribe(
            session,
            tenant_id=tenant_id,
            scope="sales",
            channel="email",
            recipient="cfo@example.com",
            source="cli",
            now=plane.clock.now(),
        )
    with smtp_server() as server:
        plane.pump(plane.ledger({"link": LinkChannel(), "email": _email(server)}), plane.renders())
        assert server.messages == []
    assert [(r["channel"], r["state"], r["reason"]) for r in receipts(plane)] == [
        ("link", "SENT", None),
        ("email", "SUPPRESSED", "unsubscribed"),
    ]


def test_a_report_that_ended_early_has_no_results(plane: Plane) -> None:
    """Issue 9 finding 13 end to end: a real kernel runs a report that records a table
    with rows and then calls ``sys.exit()``; the run is SUCCEEDED ``ended_early``, the
    ``only_if: results`` subscription is SUPPRESSED ``no_results`` (its table had a row:
    the early exit is what counts) and the unconditional one still gets the report."""
    path = make_notebook(
        plane.folder / "quiet-day.ipynb",
        parameters="n = 10\n",
        body=TABLE_BEFORE,
        nbcast={
            "name": "quiet-day",
            "subscriptions": [
                {"channel": "link", "to": "a@example.com", "only_if": "results"},
                {"channel": "link", "to": "b@example.com"},
            ],
        },
        extra_cells=[
            code_cell("import sys\nsys.exit()", "exit"),
            code_cell(TABLE_AFTER, "after"),
        ],
    )
    # The worker runs on the system clock: a fixed clock would move on with each of its
    # waits, past its lease while the kernel runs.
    plane.clock.set(datetime.now(UTC))
    publish(
        plane.db,
        path,
        caller=Caller(tenant="default", user="t"),
        now=plane.clock.now(),
        environ=LOOPBACK,
    )
    run_id = run_now(plane.db, plane.clock, Caller(tenant="default", user="t"), "quiet-day", {})
    work_until_idle(plane.db, artifacts=plane.store.root, work_dir=plane.folder / "runs")
    run = run_state(plane.db, run_id)
    assert (run.state, run.reason) == ("SUCCEEDED", "ended_early")
    plane.clock.set(datetime.now(UTC))
    plane.pump(plane.ledger({"link": LinkChannel()}), plane.renders())
    assert [(r["recipient"], r["state"], r["reason"]) for r in receipts(plane)] == [
        ("a@example.com", "SUPPRESSED", "no_results"),
        ("b@example.com", "SENT", None),
    ]
