"""Opening a signed link (the public endpoint's hot path) on SQLite and PostgreSQL:
what may be opened is recorded exactly once, what may not is refused with its kind
and records nothing — the same rules as ``verify_link``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.artifacts import open_store
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.delivery.link_opens import LinkRefused, open_link
from nbcast.delivery.links import create_link, revoke_link
from nbcast.delivery.models import LinkOpen
from nbcast.delivery.signing import Signer
from tests.delivery.test_links import NEW, OLD, T0, _run


def _opens(db: Database) -> list[tuple[int, str, str]]:
    with db.session() as session:
        rows = session.execute(
            sa.select(LinkOpen.link_id, LinkOpen.network, LinkOpen.user_agent).order_by(LinkOpen.id)
        )
        return [tuple(row) for row in rows]  # type: ignore[misc]


def test_a_link_is_opened_recorded_and_refused_by_the_rules(db: Database, tmp_path: Path) -> None:
    tenant_id, run_id = _run(db, tmp_path)
    signer = Signer([NEW, OLD])
    store = open_store(str(tmp_path / "artifacts"))
    sha = store.put(b"%PDF-1.7 report").sha256
    with db.session() as session:
        made = [
            create_link(
                session,
                signer,
                tenant_id=tenant_id,
                run_id=run_id,
                recipient="cfo@example.com",
                sha256=digest,
                filename="r.pdf",
                media_type="application/pdf",
                now=T0,
                ttl=timedelta(hours=1),
                base_url="https://reports.example.com",
            )
            for digest in (sha, sha, "ef" * 32)
        ]
    good, revoked, missing_file = made
    with db.session() as session:
        assert revoke_link(session, revoked.id, T0)

    def opened(token: str, minutes: int = 1) -> object:
        return open_link(
            db,
            FixedClock(T0 + timedelta(minutes=minutes)),
            signer,
            store,
            token,
            address="203.0.113.77",
            user_agent="Mail\x00Client/1.0",
        )

    link = opened(good.token)
    assert (link.sha256, link.filename, link.media_type) == (sha, "r.pdf", "application/pdf")  # type: ignore[attr-defined]
    assert _opens(db) == [(good.id, "203.0.113.0/24", "Mail Client/1.0")]

    refusals = {
        "tampered": (
            good.token[:-6] + ("A" if good.token[-6] != "A" else "B") + good.token[-5:],
            1,
        ),
        "expired": (good.token, 60),
        "revoked": (revoked.token, 1),
        "file gone": (missing_file.token, 1),
        "another link's digest": (
            signer.sign({"l": revoked.id, "a": "ab" * 8}, purpose="link"),
            1,
        ),
        "no such link": (signer.sign({"l": 10**9, "a": sha[:16]}, purpose="link"), 1),
        "another purpose": (signer.sign({"l": good.id, "a": sha[:16]}, purpose="unsubscribe"), 1),
    }
    kinds = {}
    for name, (token, minutes) in refusals.items():
        with pytest.raises(LinkRefused) as refused:
            opened(token, minutes)
        kinds[name] = refused.value.kind
    assert kinds == {
        "tampered": "forbidden",
        "expired": "gone",
        "revoked": "gone",
        "file gone": "gone",
        "another link's digest": "not_found",
        "no such link": "not_found",
        "another purpose": "forbidden",
    }
    assert len(_opens(db)) == 1  # no refusal recorded anything
    opened(good.token, 59)
    assert [link_id for link_id, _, _ in _opens(db)] == [good.id, good.id]
