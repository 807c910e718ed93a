"""Every state change of the command layer and the delivery plane leaves its audit
entry, and the chain still verifies — on both back ends, the signed-link opening
included (hashed by the database on PostgreSQL, by Python on SQLite)."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from pathlib import Path

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.commands import revoke_link, unsubscribe_recipient
from nbcast.delivery.link_opens import open_link
from nbcast.delivery.models import SignedLink
from nbcast.executor.control import cancel_run
from nbcast.scheduler.control import backfill, pause, resume, run_now
from nbcast.scheduler.materializer import Materializer
from nbcast.tenancy import audit
from nbcast.tenancy.members import add_member, set_role
from nbcast.tenancy.models import AuditEntry, Tenant
from nbcast.tenancy.tenants import change_quota
from nbcast.testing.smtp import smtp_server
from tests.delivery.plane import SIGNER, Plane

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
ALICE = Caller(tenant="default", user="t")


def _actions(db: Database) -> list[tuple[str, str, str]]:
    with db.session() as session:
        rows = session.execute(
            sa.select(AuditEntry.action, AuditEntry.actor, AuditEntry.object).order_by(
                AuditEntry.tenant_id, AuditEntry.seq
            )
        ).all()
    return [tuple(r) for r in rows]  # type: ignore[misc]


def test_the_trail_covers_every_kind_of_change_and_verifies(db: Database, tmp_path: Path) -> None:
    plane = Plane(db, FixedClock(T0), tmp_path)
    clock = plane.clock
    with smtp_server() as server:
        plane.publish(
            "sales",
            [
                {"channel": "email", "to": "cfo@example.com"},
                {"channel": "email", "to": "gone@example.com"},
                {"channel": "link", "to": "ops@example.com"},
            ],
            schedule={"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        )
        plane.publish(  # a second version with another schedule
            "sales",
            [
                {"channel": "email", "to": "cfo@example.com"},
                {"channel": "email", "to": "gone@example.com"},
                {"channel": "link", "to": "ops@example.com"},
            ],
            schedule={"cron": "0 6 * * *", "timezone": "Europe/Berlin"},
        )
        Materializer(db, clock).tick()
        unsubscribe_recipient(
            db, clock, ALICE, report="sales", channel="email", recipient="gone@example.com"
        )
        add_member(db, clock, ALICE, "bob", "viewer")
        set_role(db, clock, ALICE, "bob", "author")
        change_quota(db, clock, ALICE, "default", max_concurrent_runs=2)
        pause(db, clock, ALICE, "sales")
        clock.advance(timedelta(days=1))
        resume(db, clock, ALICE, "sales")
        backfill(db, clock, ALICE, "sales", date(2026, 10, 28), date(2026, 10, 30))
        queued = run_now(db, clock, ALICE, "sales", {})
        cancel_run(db, clock, ALICE, queued)
        plane.succeed("sales")
        channels = {
            "email": EmailChannel(server.host, server.port, sender="r@example.com", timeout=5),
            "link": LinkChannel(),
        }
        plane.pump(plane.ledger(channels), plane.renders())
    with db.session() as session:
        link = session.scalar(sa.select(SignedLink))
        assert link is not None
        link_id = link.id
    token = SIGNER.sign({"l": link_id, "a": link.sha256[:16]}, purpose="link")
    open_link(
        db,
        clock,
        SIGNER,
        LocalArtifactStore(tmp_path / "artifacts"),
        token,
        address="203.0.113.7",
        user_agent="Mozilla/5.0 (X11; Linux) — ünïcode",
    )
    revoke_link(db, clock, ALICE, link_id)

    actions = [a for a, _, _ in _actions(db)]
    for expected in (
        "operator.granted",  # the home's first user
        "role.granted",  # ... who claims the tenant, and bob's promotion
        "definition.published",
        "schedule.changed",
        "subscription.unsubscribed",
        "user.added",
        "quota.changed",
        "definition.paused",
        "definition.resumed",
        "backfill.requested",
        "run.requested",
        "run.cancel_requested",
        "delivery.sent",
        "delivery.suppressed",  # the unsubscribed recipient
        "link.created",
        "link.opened",
        "link.revoked",
    ):
        assert expected in actions, expected
    assert actions.count("definition.published") == 2
    assert ("link.opened", "link", f"link:{link_id}") in _actions(db)
    with db.session() as session:
        tenants = dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
        checked, broken = audit.verify(session, tenants)
        assert broken is None, str(broken)
        assert checked == len(actions)
        (opened,) = [r for r in audit.entries(session, 1, "default") if r.action == "link.opened"]
    assert opened.details == {"network": "203.0.113.0/24"}  # never the user agent
