"""Signed links and unsubscribe tokens: signing with key rotation, expiry,
revocation, forgery, and one-click unsubscribes recorded once."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.links import create_link, revoke_link, verify_link
from nbcast.delivery.models import Unsubscription
from nbcast.delivery.signing import Signer, load_signer, parse_keys
from nbcast.delivery.unsubscribe import is_unsubscribed, unsubscribe_token, use_token
from nbcast.errors import ConfigError, LinkError
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

T0 = datetime(2026, 11, 2, 8, 0, tzinfo=UTC)
OLD = ("k1", "first-secret-0123456789")
NEW = ("k2", "second-secret-0123456789")


def test_tokens_verify_across_a_key_rotation() -> None:
    before = Signer([OLD])
    token = before.sign({"x": 1}, purpose="link")
    rotated = Signer([NEW, OLD])  # new current key; the old one still verifies
    assert rotated.verify(token, purpose="link") == {"x": 1}
    fresh = rotated.sign({"x": 2}, purpose="link")
    assert fresh.startswith("k2.")
    with pytest.raises(LinkError, match="unknown or retired key"):
        Signer([NEW]).verify(token, purpose="link")  # the old key retired
    with pytest.raises(LinkError, match="signature"):
        rotated.verify(token, purpose="unsubscribe")  # made for another purpose
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    with pytest.raises(LinkError, match="signature"):
        rotated.verify(forged, purpose="link")
    with pytest.raises(LinkError, match="malformed"):
        rotated.verify("no-dot-here", purpose="link")


def test_signer_configuration_is_checked(tmp_path: Path) -> None:
    assert parse_keys("a:0123456789abcdefg, b:0123456789abcdefh") == [
        ("a", "0123456789abcdefg"),
        ("b", "0123456789abcdefh"),
    ]
    with pytest.raises(ConfigError):
        Signer([("k", "short")])
    with pytest.raises(ConfigError):
        Signer([("bad id!", "0123456789abcdefg")])
    with pytest.raises(ConfigError):
        parse_keys("no-colon")
    embedded = load_signer(tmp_path, environ={})
    assert (tmp_path / "signing-keys.json").stat().st_mode & 0o777 == 0o600
    again = load_signer(tmp_path, environ={})  # the same key on every start
    assert again.verify(embedded.sign({"a": 1}, purpose="p"), purpose="p") == {"a": 1}


def _run(db: Database, tmp_path: Path) -> tuple[int, int]:
    path = make_notebook(tmp_path / "r.ipynb", nbcast={"name": "r"})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    run_id = run_now(db, FixedClock(T0), Caller(tenant="default", user="t"), "r", {})
    with db.session() as session:
        return ensure_tenant(session, "default").id, run_id


def _run_at_0017(db: Database, tmp_path: Path) -> tuple[int, int]:
    """A run in a home at migration 0017 (its ``runs`` has the columns of then)."""
    path = make_notebook(tmp_path / "r.ipynb", nbcast={"name": "r"})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    with db.engine.begin() as conn:
        conn.exec_driver_sql(
            "INSERT INTO runs (tenant_id, definition_id, version_id, version, kind, audience,"
            " fire_at, state, parameters, serial, not_before, created_at, attempt)"
            " SELECT v.tenant_id, v.definition_id, v.id, v.version, 'manual', '',"
            " '2026-11-02 08:00:00.000000', 'QUEUED', '{}', 0, '2026-11-02 08:00:00.000000',"
            " '2026-11-02 08:00:00.000000', 0 FROM definition_versions v"
        )
        tenant_id, run_id = conn.exec_driver_sql("SELECT tenant_id, id FROM runs").one()
    return tenant_id, run_id


def test_a_link_expires_and_can_be_revoked(db: Database, tmp_path: Path) -> None:
    tenant_id, run_id = _run(db, tmp_path)
    signer = Signer([NEW, OLD])
    with db.session() as session:
        issued = create_link(
            session,
            signer,
            tenant_id=tenant_id,
            run_id=run_id,
            recipient="cfo@example.com",
            sha256="ab" * 32,
            filename="r.pdf",
            media_type="application/pdf",
            now=T0,
            ttl=timedelta(hours=1),
            base_url="https://reports.example.com/",
        )
        other = create_link(
            session,
            signer,
            tenant_id=tenant_id,
            run_id=run_id,
            recipient="cfo@example.com",
            sha256="cd" * 32,
            filename="r.xlsx",
            media_type="application/vnd.ms-excel",
            now=T0,
            ttl=timedelta(hours=1),
            base_url="https://reports.example.com",
        )
    assert issued.url == f"https://reports.example.com/nbcast/links/{issued.token}"
    with db.session() as session:
        link = verify_link(session, signer, issued.token, T0 + timedelta(minutes=59))
        assert (link.filename, link.sha256) == ("r.pdf", "ab" * 32)
        with pytest.raises(LinkError, match="expired"):
            verify_link(session, signer, issued.token, T0 + timedelta(hours=1))
        assert revoke_link(session, other.id, T0)
        assert not revoke_link(session, other.id, T0)  # already revoked
    with db.session() as session:
        with pytest.raises(LinkError, match="revoked"):
            verify_link(session, signer, other.token, T0 + timedelta(minutes=1))
        # A token naming another link's id with this link's digest is refused.
        swapped = signer.sign({"l": other.id, "a": "ab" * 8}, purpose="link")
        with pytest.raises(LinkError, match="does not exist"):
            verify_link(session, signer, swapped, T0)
        with pytest.raises(LinkError, match="positive lifetime"):
            create_link(
                session,
                signer,
                tenant_id=tenant_id,
                run_id=run_id,
                recipient="x",
                sha256="ab" * 32,
                filename="r.pdf",
                media_type="application/pdf",
                now=T0,
                ttl=timedelta(0),
                base_url="https://x",
            )


def test_one_click_unsubscribe_is_recorded_once(db: Database, tmp_path: Path) -> None:
    tenant_id, _ = _run(db, tmp_path)
    signer = Signer([NEW])
    token = unsubscribe_token(
        signer, tenant_id=tenant_id, scope="r", channel="email", recipient="cfo@example.com"
    )
    with db.session() as session:
        assert not is_unsubscribed(
            session, tenant_id=tenant_id, scope="r", channel="email", recipient="cfo@example.com"
        )
        named = use_token(session, signer, token, T0)
        use_token(session, signer, token, T0)  # a second click changes nothing
    assert named["recipient"] == "cfo@example.com"
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Unsubscription)) == 1
        assert is_unsubscribed(
            session, tenant_id=tenant_id, scope="r", channel="email", recipient="cfo@example.com"
        )
        assert not is_unsubscribed(
            session, tenant_id=tenant_id, scope="r", channel="slack", recipient="cfo@example.com"
        )
        with pytest.raises(LinkError):
            use_token(session, signer, token.replace("k2.", "k1."), T0)


def test_a_token_of_a_tenant_that_no_longer_exists_is_refused(db: Database, tmp_path: Path) -> None:
    _run(db, tmp_path)
    signer = Signer([NEW])
    token = unsubscribe_token(
        signer, tenant_id=999_999, scope="r", channel="email", recipient="cfo@example.com"
    )
    with db.session() as session, pytest.raises(LinkError, match="no longer exists"):
        use_token(session, signer, token, T0)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Unsubscription)) == 0


def _link(session: object, signer: Signer, tenant_id: int, run_id: int, name: str) -> object:
    return create_link(
        session,  # type: ignore[arg-type]
        signer,
        tenant_id=tenant_id,
        run_id=run_id,
        recipient="cfo@example.com",
        sha256="cd" * 32,  # one file: only the id tells the links apart
        filename=name,
        media_type="application/pdf",
        now=T0,
        ttl=timedelta(days=7),
        base_url="https://reports.example.com/",
    )


def test_a_deleted_links_id_is_never_given_again(tmp_path: Path) -> None:
    """SQLite (item 13 of issue 20): an old token must not come to name a new link once
    the newest links are deleted. A home upgraded from before keeps its links and
    their openings (migration 0018 rebuilds the table AUTOINCREMENT)."""
    from nbcast.delivery.models import LinkOpen, SignedLink

    url = f"sqlite:///{tmp_path / 'nbcast.db'}"
    db = Database.open(url, upgrade=False)
    db.upgrade("0017")
    tenant_id, run_id = _run_at_0017(db, tmp_path)
    signer = Signer([NEW])
    with db.session() as session:
        first, _second, newest = (
            _link(session, signer, tenant_id, run_id, f"{n}.pdf") for n in "abc"
        )
        session.add(
            LinkOpen(
                tenant_id=tenant_id, link_id=first.id, run_id=run_id, opened_at=T0,
                network="127.0.0.0/24", user_agent="test",
            )
        )  # fmt: skip
    db.dispose()
    db = Database.open(url)  # to head
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(SignedLink)) == 3
        assert session.scalar(sa.select(LinkOpen.link_id)) == first.id
        session.execute(sa.delete(SignedLink).where(SignedLink.id == newest.id))
    with db.session() as session:
        fresh = _link(session, signer, tenant_id, run_id, "d.pdf")
    assert fresh.id > newest.id
    with db.session() as session, pytest.raises(LinkError, match="does not exist"):
        verify_link(session, signer, newest.token, T0)
    db.dispose()
