"""The delivery plane's queries and commands on SQLite and PostgreSQL: typed records,
keyset pages, and the caller's tenant enforced inside each function — a run, a link
or a token of another tenant is not found, and nothing is written."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.channels.link import LinkChannel
from nbcast.delivery.commands import (
    retry_failed_deliveries,
    revoke_link,
    unsubscribe_recipient,
    unsubscribe_with_token,
)
from nbcast.delivery.models import Delivery, DeliveryReason, DeliveryState, Unsubscription
from nbcast.delivery.queries import (
    deliveries_of_run,
    list_deliveries,
    list_links,
    renditions_of_run,
)
from nbcast.delivery.unsubscribe import unsubscribe_token
from nbcast.errors import (
    ConfigError,
    LinkError,
    NotFoundError,
    UnknownDefinitionError,
)
from tests.delivery.plane import SIGNER, Plane
from tests.members import grant

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
ACME = Caller(tenant="acme", user="a")
GLOBEX = Caller(tenant="globex", user="g")


@pytest.fixture
def plane(db: Database, tmp_path: Path) -> Plane:
    """The plane, whose publisher t is an author in both tenants, as are a (acme) and
    g (globex): each may act on their own tenant's deliveries, none on the other's."""
    for caller in (ACME, GLOBEX):
        grant(db, caller.tenant, "t")
        grant(db, caller.tenant, caller.user)
    return Plane(db, FixedClock(T0), tmp_path)


def _delivered(plane: Plane, tenant: str, recipients: list[str]) -> int:
    plane.publish("sales", [{"channel": "link", "to": r} for r in recipients], tenant=tenant)
    run_id = plane.succeed("sales", tenant=tenant)
    plane.pump(plane.ledger({"link": LinkChannel()}), plane.renders())
    return run_id


def _counts(plane: Plane) -> dict[str, int]:
    with plane.db.engine.connect() as conn:
        return {
            table: conn.execute(sa.text(f"SELECT count(*) FROM {table}")).scalar_one()
            for table in ("deliveries", "unsubscriptions", "signed_links")
        }


def test_a_runs_deliveries_and_renditions_are_typed_records(plane: Plane) -> None:
    run_id = _delivered(plane, "acme", ["a@example.com", "b@example.com"])
    with plane.db.session() as session:
        rows = deliveries_of_run(session, ACME, run_id)
        [html] = renditions_of_run(session, ACME, run_id)
    assert [(r.recipient, r.state, r.reason, r.attempts) for r in rows] == [
        ("a@example.com", DeliveryState.SENT, None, 1),
        ("b@example.com", DeliveryState.SENT, None, 1),
    ]
    assert rows[0].report == "sales"
    assert rows[0].receipt is not None
    assert len(rows[0].receipt["links"]) == 1
    as_json = rows[0].to_json()
    assert as_json["sent_at"] == "2026-11-02T08:00:00Z"
    assert as_json["state"] == "SENT"
    assert (html.format, html.variant, html.state.value) == ("html", "", "DONE")
    assert html.sha256 is not None
    assert html.size
    assert html.media_type == "text/html"


def test_lists_are_newest_first_in_keyset_pages(plane: Plane) -> None:
    _delivered(plane, "acme", [f"u{i}@example.com" for i in range(5)])
    seen: list[int] = []
    after = None
    with plane.db.session() as session:
        while True:
            page = list_deliveries(session, ACME, limit=2, after=after)
            seen += [r.id for r in page.items]
            if page.next_after is None:
                break
            after = page.next_after
        assert len(list_links(session, ACME, limit=3).items) == 3
        assert list_deliveries(session, ACME, state="failed").items == []
        assert len(list_deliveries(session, ACME, definition="sales").items) == 5
        with pytest.raises(ConfigError, match="unknown delivery state"):
            list_deliveries(session, ACME, state="LOST")
        with pytest.raises(UnknownDefinitionError):
            list_deliveries(session, ACME, definition="costs")
        with pytest.raises(ConfigError, match="after"):
            list_deliveries(session, ACME, after="not-a-cursor")
    assert seen == sorted(seen, reverse=True)
    assert len(seen) == 5


def test_another_tenants_rows_are_not_found_and_nothing_is_written(plane: Plane) -> None:
    run_id = _delivered(plane, "acme", ["a@example.com"])
    _delivered(plane, "globex", ["g@example.com"])
    with plane.db.session() as session:
        session.execute(sa.update(Delivery).values(state="FAILED", reason="refused"))
        [link] = list_links(session, ACME).items
        assert [r.recipient for r in list_deliveries(session, GLOBEX).items] == ["g@example.com"]
        for query in (deliveries_of_run, renditions_of_run):
            with pytest.raises(NotFoundError, match=f"no run {run_id} in tenant 'globex'"):
                query(session, GLOBEX, run_id)
        with pytest.raises(NotFoundError):
            list_deliveries(session, GLOBEX, run_id=run_id)
        with pytest.raises(NotFoundError):
            list_links(session, GLOBEX, run_id=run_id)
    before = _counts(plane)
    with pytest.raises(NotFoundError):
        retry_failed_deliveries(plane.db, plane.clock, GLOBEX, run_id)
    assert not revoke_link(plane.db, plane.clock, GLOBEX, link.id)
    assert not revoke_link(plane.db, plane.clock, GLOBEX, 2**70)  # no such row, no error
    token = unsubscribe_token(
        SIGNER, tenant_id=_tenant_id(plane, "acme"), scope="*", channel="link", recipient="x"
    )
    with pytest.raises(LinkError, match="another tenant"):
        unsubscribe_with_token(plane.db, plane.clock, GLOBEX, token, source="cli", signer=SIGNER)
    assert _counts(plane) == before
    with plane.db.session() as session:
        assert {r.state for r in list_deliveries(session, ACME).items} == {DeliveryState.FAILED}
        assert list_links(session, ACME).items[0].revoked_at is None
    # The tenant's own caller may.
    assert retry_failed_deliveries(plane.db, plane.clock, ACME, run_id) == 1
    assert revoke_link(plane.db, plane.clock, ACME, link.id)
    with plane.db.session() as session:
        [row] = deliveries_of_run(session, ACME, run_id)
    assert (row.state, row.reason) == (DeliveryState.PENDING, DeliveryReason.retry_requested)


def test_unsubscribing_by_name_and_by_token(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "email", "to": "cfo@example.com"}], tenant="acme")
    done = unsubscribe_recipient(
        plane.db, plane.clock, ACME, report="sales", channel="email", recipient="CFO@Example.com"
    )
    assert (done.tenant, done.scope, done.recipient, done.source) == (
        "acme",
        "sales",
        "cfo@example.com",  # as the email channel compares addresses
        "cli",
    )
    with pytest.raises(ConfigError, match=r"--channel: 'fax' is not one of email\|slack"):
        unsubscribe_recipient(
            plane.db, plane.clock, ACME, report="sales", channel="fax", recipient="x"
        )
    with pytest.raises(ConfigError, match="--to is at most 512"):
        unsubscribe_recipient(
            plane.db, plane.clock, ACME, report="*", channel="email", recipient="x" * 513
        )
    token = unsubscribe_token(
        SIGNER, tenant_id=_tenant_id(plane, "acme"), scope="*", channel="email", recipient="b@x.io"
    )
    public = unsubscribe_with_token(
        plane.db, plane.clock, None, token, source="one-click", signer=SIGNER
    )
    assert (public.tenant, public.scope, public.source) == ("acme", "*", "one-click")
    again = unsubscribe_with_token(plane.db, plane.clock, ACME, token, source="cli", signer=SIGNER)
    assert again.recipient == "b@x.io"
    with plane.db.session() as session:
        recorded = session.execute(
            sa.select(
                Unsubscription.scope, Unsubscription.recipient, Unsubscription.source
            ).order_by(Unsubscription.id)
        ).all()
    assert [tuple(r) for r in recorded] == [
        ("sales", "cfo@example.com", "cli"),
        ("*", "b@x.io", "one-click"),  # recorded once: unsubscribing twice is idempotent
    ]


def test_unsubscribing_from_a_report_that_does_not_exist_is_refused(plane: Plane) -> None:
    plane.publish("sales", [{"channel": "email", "to": "cfo@example.com"}], tenant="acme")
    plane.publish("costs", [{"channel": "email", "to": "cfo@example.com"}], tenant="globex")
    before = _counts(plane)
    for report in ("nope", "costs", "Sales"):  # unknown, another tenant's, another case
        with pytest.raises(UnknownDefinitionError, match="--report: no definition named"):
            unsubscribe_recipient(
                plane.db, plane.clock, ACME, report=report, channel="email", recipient="x@y"
            )
    assert _counts(plane) == before
    everything = unsubscribe_recipient(
        plane.db, plane.clock, ACME, report="*", channel="email", recipient="x@y"
    )
    assert everything.scope == "*"
    assert _counts(plane)["unsubscriptions"] == before["unsubscriptions"] + 1


def _tenant_id(plane: Plane, name: str) -> int:
    with plane.db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT id FROM tenants WHERE name = :n"), {"n": name}
            ).scalar_one()
        )
