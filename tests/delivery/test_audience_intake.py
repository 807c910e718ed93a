"""Recipient-scoped runs are delivered only to their own recipients (the intake makes
ledger rows for the subscriptions of the run's audience), and supersession stays per
recipient, on SQLite and PostgreSQL."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.audiences import BASE, audience_key
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.intake import consume_outbox
from nbcast.delivery.models import Delivery
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now_all
from nbcast.scheduler.models import Run
from tests.delivery.plane import Plane, executed_notebook, receipts

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
K_EMEA = audience_key({"region": "EMEA"}, {"region": "EMEA"})
K_APAC = audience_key({"region": "APAC"}, {"region": "APAC"})


def scoped(channel: str, to: str, region: str) -> dict[str, Any]:
    scope = {"region": region}
    return {"channel": channel, "to": to, "parameters": scope, "row_filter": scope}


SUBSCRIPTIONS = [
    scoped("email", "emea@example.com", "EMEA"),
    scoped("link", "emea@example.com", "EMEA"),
    scoped("link", "emea-deputy@example.com", "EMEA"),
    scoped("link", "apac@example.com", "APAC"),
    {"channel": "link", "to": "ops@example.com"},
]


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    return Plane(db, FixedClock(T0), tmp_path)


def _runs(plane: Plane) -> dict[str, int]:
    """The runs of the latest ``run_now_all``, by audience."""
    ids = run_now_all(plane.db, plane.clock, Caller(tenant="default", user="t"), "sales", {})
    with plane.db.session() as session:
        rows = session.execute(sa.select(Run.audience, Run.id).where(Run.id.in_(ids))).all()
    return {audience: run_id for audience, run_id in rows}


def _complete(plane: Plane, run_ids: set[int]) -> None:
    """Complete exactly ``run_ids`` through the executor's queue."""
    queue = RunQueue(plane.db, plane.clock, owner="test-worker")
    done: set[int] = set()
    while leases := [lease for lease in queue.claim(20) if lease.run_id in run_ids - done]:
        for lease in queue.start_many(leases):
            sha = plane.store.put(executed_notebook()).sha256
            queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)
            done.add(lease.run_id)
    assert done == run_ids


def test_each_run_goes_to_its_own_audience_only(plane: Plane) -> None:
    plane.publish("sales", SUBSCRIPTIONS)
    runs = _runs(plane)
    assert set(runs) == {BASE, K_EMEA, K_APAC}
    _complete(plane, set(runs.values()))
    with plane.db.session() as session:
        assert consume_outbox(session, plane.clock.now()) == 3
        assert consume_outbox(session, plane.clock.now()) == 0
        rows = session.execute(
            sa.select(Delivery.run_id, Delivery.channel, Delivery.recipient)
        ).all()
    by_run: dict[int, set[tuple[str, str]]] = {}
    for run_id, channel, recipient in rows:
        by_run.setdefault(run_id, set()).add((channel, recipient))
    assert by_run == {
        runs[K_EMEA]: {
            ("email", "emea@example.com"),
            ("link", "emea@example.com"),
            ("link", "emea-deputy@example.com"),
        },
        runs[K_APAC]: {("link", "apac@example.com")},
        runs[BASE]: {("link", "ops@example.com")},
    }


def test_supersession_is_per_recipient_across_audiences(plane: Plane) -> None:
    plane.publish("sales", SUBSCRIPTIONS[2:])
    older = _runs(plane)
    _complete(plane, set(older.values()))
    plane.clock.advance(timedelta(hours=1))
    newer = _runs(plane)
    _complete(plane, {newer[K_EMEA]})  # APAC's and the base's newer runs are not done yet
    with plane.db.session() as session:
        consume_outbox(session, plane.clock.now())
        session.execute(
            sa.update(Delivery)
            .where(Delivery.run_id.in_(list(older.values())))
            .values(not_before=plane.clock.now() + timedelta(minutes=30))
        )  # every older delivery is late: EMEA's newer report goes out first
    plane.pump(plane.ledger({"link": LinkChannel()}), plane.renders())
    got = {(r["run_id"], r["recipient"]): (r["state"], r["reason"]) for r in receipts(plane)}
    assert got == {
        (newer[K_EMEA], "emea-deputy@example.com"): ("SENT", None),
        (older[K_EMEA], "emea-deputy@example.com"): ("SUPPRESSED", "superseded"),
        # Nobody else received a newer slot: their older reports are still sent.
        (older[K_APAC], "apac@example.com"): ("SENT", None),
        (older[BASE], "ops@example.com"): ("SENT", None),
    }
