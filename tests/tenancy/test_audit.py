"""The audit log: entries are appended with the change that made them (and vanish with
its rollback), chained per tenant, refused UPDATE/DELETE/TRUNCATE on PostgreSQL, and
``verify`` names the first entry broken by an edit, a deletion, an insertion or a
reordering done directly in SQL, on both back ends."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
import sqlalchemy as sa

from nbcast.db import Database
from nbcast.tenancy import audit
from nbcast.tenancy.audit import Action
from nbcast.tenancy.models import AuditEntry, AuditHead, Tenant
from nbcast.tenancy.tenants import ensure_tenant

T0 = datetime(2026, 11, 2, 6, 0, tzinfo=UTC)


def _tenants(db: Database) -> dict[int, str]:
    with db.session() as session:
        return dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())


def _write(db: Database, tenant: str, count: int, start: int = 0) -> None:
    for i in range(start, start + count):
        with db.session() as session:
            owner = ensure_tenant(session, tenant)
            audit.record(
                session,
                owner.id,
                actor="alice",
                action=Action.definition_paused,
                obj=f"definition:report-{i}",
                at=T0 + timedelta(minutes=i),
                details={"n": i, "note": "ünïcode ✓"},
            )


@pytest.fixture
def chain(db: Database) -> Iterator[Database]:
    """Five entries for tenant acme, three for globex (interleaved)."""
    _write(db, "acme", 3)
    _write(db, "globex", 2)
    _write(db, "acme", 2, start=3)
    _write(db, "globex", 1, start=2)
    return db


def _unguarded(db: Database, *statements: str) -> None:
    """Run SQL past the append-only trigger, as someone with the database's keys would."""
    with db.engine.begin() as conn:
        if db.dialect == "postgresql":
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        for statement in statements:
            conn.execute(sa.text(statement))


def _acme(db: Database) -> int:
    return next(i for i, name in _tenants(db).items() if name == "acme")


def test_entries_chain_per_tenant_and_verify(chain: Database) -> None:
    with chain.session() as session:
        checked, broken = audit.verify(session, _tenants(chain))
    assert broken is None
    assert checked == 8
    with chain.session() as session:
        records = list(audit.entries(session, _acme(chain), "acme"))
    assert [r.seq for r in records] == [1, 2, 3, 4, 5]
    assert records[0].prev_hash == audit.GENESIS
    assert all(b.prev_hash == a.hash for a, b in itertools.pairwise(records))
    assert records[1].details == {"n": 1, "note": "ünïcode ✓"}
    assert records[4].at == T0 + timedelta(minutes=4)
    with chain.session() as session:
        head = session.get(AuditHead, _acme(chain))
        assert head is not None
        assert (head.seq, head.hash) == (5, records[-1].hash)


def test_a_rolled_back_change_leaves_no_entry(db: Database) -> None:
    with pytest.raises(RuntimeError), db.session() as session:
        tenant = ensure_tenant(session, "acme")
        audit.record(session, tenant.id, actor="a", action=Action.definition_paused, obj="d", at=T0)
        raise RuntimeError("the change failed")
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(AuditEntry)) == 0
    _write(db, "acme", 1)
    with db.session() as session:
        assert session.scalars(sa.select(AuditEntry.seq)).all() == [1]


@pytest.mark.parametrize(
    ("tamper", "seq", "problem"),
    [
        (
            ["UPDATE audit_log SET details = '{\"n\": 99}' WHERE seq = 3 AND tenant_id = {acme}"],
            3,
            "edited",
        ),
        (
            ["UPDATE audit_log SET actor = 'mallory' WHERE seq = 2 AND tenant_id = {acme}"],
            2,
            "edited",
        ),
        (["DELETE FROM audit_log WHERE seq = 2 AND tenant_id = {acme}"], 2, "missing"),
        (
            [  # an entry moved to the end of the chain: entry 2 missing where it was
                "UPDATE audit_log SET seq = 100 WHERE seq = 2 AND tenant_id = {acme}",
            ],
            2,
            "missing",
        ),
        (
            [  # two entries swap places (their seq numbers)
                "UPDATE audit_log SET seq = -2 WHERE seq = 2 AND tenant_id = {acme}",
                "UPDATE audit_log SET seq = 2 WHERE seq = 4 AND tenant_id = {acme}",
                "UPDATE audit_log SET seq = 4 WHERE seq = -2 AND tenant_id = {acme}",
            ],
            2,
            "previous hash",
        ),
        (
            [  # an entry inserted in the middle: the later ones renumbered to make room
                "UPDATE audit_log SET seq = seq + 1000 WHERE seq >= 3 AND tenant_id = {acme}",
                "UPDATE audit_log SET seq = seq - 999 WHERE seq >= 1000 AND tenant_id = {acme}",
                "INSERT INTO audit_log (tenant_id, seq, at, actor, action, object, details, "
                "prev_hash, hash) SELECT tenant_id, 3, at, 'mallory', action, object, details, "
                "hash, hash FROM audit_log WHERE seq = 2 AND tenant_id = {acme}",
            ],
            3,
            "edited",
        ),
        (
            [  # a forged entry appended past the end, without its head
                "INSERT INTO audit_log (tenant_id, seq, at, actor, action, object, details, "
                "prev_hash, hash) SELECT tenant_id, 6, at, 'mallory', action, object, details, "
                "hash, hash FROM audit_log WHERE seq = 5 AND tenant_id = {acme}",
            ],
            6,
            "edited",
        ),
        (["DELETE FROM audit_log WHERE seq = 5 AND tenant_id = {acme}"], 5, "head says"),
    ],
    ids=[
        "edit_details",
        "edit_actor",
        "delete",
        "move",
        "reorder",
        "insert",
        "append_forged",
        "truncate_end",
    ],
)
def test_verify_names_the_first_broken_entry(
    chain: Database, tamper: list[str], seq: int, problem: str
) -> None:
    acme = _acme(chain)
    _unguarded(chain, *(s.replace("{acme}", str(acme)) for s in tamper))
    with chain.session() as session:
        checked, broken = audit.verify(session, _tenants(chain))
    assert broken is not None
    assert (broken.tenant, broken.seq) == ("acme", seq)
    assert problem in broken.problem
    assert checked == seq - 1  # the entries before it still hold
    with chain.session() as session:  # the other tenant's chain is untouched
        globex = {i: n for i, n in _tenants(chain).items() if n == "globex"}
        assert audit.verify(session, globex) == (3, None)


@pytest.mark.postgres
def test_postgres_refuses_update_delete_and_truncate(pg_url: str) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    _write(db, "acme", 2)
    for statement in (
        "UPDATE audit_log SET actor = 'mallory'",
        "DELETE FROM audit_log",
        "TRUNCATE audit_log",
    ):
        with pytest.raises(sa.exc.DBAPIError, match="append-only"), db.engine.begin() as conn:
            conn.execute(sa.text(statement))
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(AuditEntry)) == 2
        assert audit.verify(session, _tenants(db)) == (2, None)
    db.dispose()
