"""Test runs through the real delivery plane and a real SMTP server, on SQLite and
PostgreSQL: only the asked-for addresses get mail, marked TEST; the subscribers get
nothing; a dry run of a slot renders the slot's bytes; and a test run is neither the
``only_if: changed`` baseline nor a newer report that supersedes a real one."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.models import Delivery, Rendition
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run, RunKind
from nbcast.scheduler.trial import queue_test_run
from nbcast.testing.smtp import FakeSMTPServer, smtp_server
from tests.delivery.plane import Plane, executed_notebook

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)  # a Monday
ALICE = Caller(tenant="default", user="t")
SUBSCRIBERS = [
    {"channel": "email", "to": "cfo@example.com", "formats": ["pdf"]},
    {"channel": "email", "to": "ops@example.com", "only_if": "changed"},
]


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


@pytest.fixture
def server() -> Any:
    with smtp_server() as started:
        yield started


def _email(server: FakeSMTPServer) -> EmailChannel:
    return EmailChannel(server.host, server.port, sender="reports@example.com", timeout=5.0)


def _complete(plane: Plane, run_ids: list[int], marker: str = "hello") -> None:
    queue = RunQueue(plane.db, plane.clock, owner="test-worker")
    done: set[int] = set()
    while leases := [lease for lease in queue.claim(20) if lease.run_id in set(run_ids) - done]:
        for lease in queue.start_many(leases):
            sha = plane.store.put(executed_notebook(marker=marker)).sha256
            queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)
            done.add(lease.run_id)
    assert done == set(run_ids)


def _deliver(plane: Plane, server: FakeSMTPServer) -> None:
    plane.pump(plane.ledger({"email": _email(server)}), plane.renders())


def test_a_test_run_goes_only_to_the_given_address_marked_test(
    plane: Plane, server: FakeSMTPServer
) -> None:
    plane.publish("sales", SUBSCRIBERS, outputs=("html", "pdf"))
    (tried,) = queue_test_run(plane.db, plane.clock, ALICE, "sales", {}, to=["me@example.com"])
    _complete(plane, [tried.id])
    _deliver(plane, server)
    (mail,) = server.messages
    assert mail.rcpt_tos == ("me@example.com",)
    message = mail.mail
    assert message["Subject"].startswith("[TEST] sales")
    assert message["List-Unsubscribe"] is None  # a test address subscribes to nothing
    body = message.get_body(("html",))
    assert body is not None
    assert "TEST: a test run of this report" in body.get_content()
    # The formats of its audience's subscriptions (pdf for the CFO, html for ops).
    names = sorted(a.get_filename() for a in message.iter_attachments())
    assert [n.rsplit(".", 1)[1] for n in names] == ["html", "pdf"]
    with plane.db.session() as session:
        rows = session.execute(sa.select(Delivery.recipient, Delivery.state)).all()
    assert [tuple(r) for r in rows] == [("me@example.com", "SENT")]


def test_a_test_run_to_no_one_still_renders_everything(
    plane: Plane, server: FakeSMTPServer
) -> None:
    plane.publish("sales", SUBSCRIBERS, outputs=("html", "pdf", "csv"))
    (tried,) = queue_test_run(plane.db, plane.clock, ALICE, "sales", {}, to=[])
    _complete(plane, [tried.id])
    _deliver(plane, server)
    assert server.messages == []
    with plane.db.session() as session:
        formats = sorted(
            session.scalars(sa.select(Rendition.format).where(Rendition.state == "DONE"))
        )
        assert session.scalar(sa.select(sa.func.count()).select_from(Delivery)) == 0
    assert formats == ["csv", "html", "pdf"]


def test_a_dry_run_renders_the_bytes_its_slot_renders(plane: Plane, server: FakeSMTPServer) -> None:
    schedule = {"cron": "0 7 * * *", "timezone": "Europe/Berlin"}
    plane.publish("sales", SUBSCRIBERS, outputs=("html", "pdf", "xlsx", "csv"), schedule=schedule)
    Materializer(plane.db, plane.clock).tick()  # the schedule starts now
    (dry,) = queue_test_run(plane.db, plane.clock, ALICE, "sales", {}, slot="2026-11-03T07:00")
    _complete(plane, [dry.id])
    plane.clock.set(datetime(2026, 11, 3, 6, 1, tzinfo=UTC))
    Materializer(plane.db, plane.clock).tick()
    with plane.db.session() as session:
        slot_run = session.scalar(sa.select(Run.id).where(Run.slot_key == "2026-11-03T07:00"))
    assert slot_run is not None
    _complete(plane, [slot_run])
    _deliver(plane, server)
    with plane.db.session() as session:
        got = session.execute(
            sa.select(Rendition.run_id, Rendition.format, Rendition.sha256, Rendition.filename)
        ).all()
    by_run: dict[int, dict[str, tuple[str, str]]] = {}
    for run_id, fmt, sha, filename in got:
        by_run.setdefault(run_id, {})[fmt] = (sha, filename)
    assert set(by_run[dry.id]) == {"html", "pdf", "xlsx", "csv"}
    assert by_run[dry.id] == by_run[slot_run]
    # The subscribers got the slot's report; the dry run went to no one.
    assert sorted(r for m in server.messages for r in m.rcpt_tos) == [
        "cfo@example.com",
        "ops@example.com",
    ]


def test_a_test_run_is_no_baseline_and_supersedes_nothing(
    plane: Plane, server: FakeSMTPServer
) -> None:
    plane.publish("sales", SUBSCRIBERS, outputs=("html", "pdf"))
    channels = {"email": _email(server)}
    first = plane.succeed("sales", marker="monday")
    plane.pump(plane.ledger(channels), plane.renders())
    # A real run, then a later test run to ops with other figures; the test run is
    # delivered first, the real one (the same figures as the first) after it.
    plane.clock.advance(timedelta(minutes=5))
    real = run_now(plane.db, plane.clock, ALICE, "sales", {})
    plane.clock.advance(timedelta(minutes=5))
    (tried,) = queue_test_run(plane.db, plane.clock, ALICE, "sales", {}, to=["ops@example.com"])
    queue = RunQueue(plane.db, plane.clock, owner="test-worker")
    leases = {lease.run_id: lease for lease in queue.start_many(queue.claim(10))}
    assert set(leases) == {real, tried.id}
    sha = plane.store.put(executed_notebook(marker="tuesday")).sha256
    queue.succeed(leases[tried.id], artifact_sha256=sha, duration_s=0.1)
    plane.pump(plane.ledger(channels), plane.renders())
    sha = plane.store.put(executed_notebook(marker="monday")).sha256
    queue.succeed(leases[real], artifact_sha256=sha, duration_s=0.1)
    plane.pump(plane.ledger(channels), plane.renders())
    with plane.db.session() as session:
        states = {
            (run_id, to): (state, reason)
            for run_id, to, state, reason in session.execute(
                sa.select(Delivery.run_id, Delivery.recipient, Delivery.state, Delivery.reason)
            )
        }
        kinds = dict(session.execute(sa.select(Run.id, Run.kind)).tuples().all())
    assert kinds[tried.id] == RunKind.test.value
    assert states[(first, "ops@example.com")] == ("SENT", None)
    assert states[(tried.id, "ops@example.com")] == ("SENT", None)
    # ops's baseline is the first real report, not the test's: unchanged, suppressed;
    # and the test run, though newer, superseded nobody's report.
    assert states[(real, "ops@example.com")] == ("SUPPRESSED", "unchanged")
    assert states[(real, "cfo@example.com")] == ("SENT", None)
