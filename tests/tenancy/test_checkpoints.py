"""Signed checkpoints (issue 20, item 5): the two rewrites a hash chain alone cannot
see — a tail cut with the head rolled back, and every hash recomputed after an edit —
are both found against a checkpoint, on both back ends, also when the database's own
checkpoints were removed (the exported file still has them); a forged checkpoint is a
finding, a broken chain is never signed, the oversight job checkpoints at least hourly, and
the command line does all of it with one line per outcome."""

from __future__ import annotations

import json
import os
import stat
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.oversight.jobs import checkpoint_job
from nbcast.tenancy import audit
from nbcast.tenancy.audit import Action
from nbcast.tenancy.checkpoints import (
    AuditKey,
    append_export,
    check_anchors,
    latest_checkpoint,
    load_key,
    make_checkpoints,
    read_export,
)
from nbcast.tenancy.models import AuditEntry, Tenant
from nbcast.tenancy.tenants import ensure_tenant

T0 = datetime(2026, 12, 3, 6, 0, tzinfo=UTC)


def write(db: Database, tenant: str, count: int, start: int = 0) -> None:
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
                details={"n": i},
            )


def tenants(db: Database) -> dict[int, str]:
    with db.session() as session:
        return dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())


def acme_id(db: Database) -> int:
    return next(i for i, name in tenants(db).items() if name == "acme")


def unguarded(db: Database, *statements: str, params: dict[str, object] | None = None) -> None:
    """SQL past the append-only triggers: someone with the database's superuser."""
    with db.engine.begin() as conn:
        if db.dialect == "postgresql":
            conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        for statement in statements:
            conn.execute(sa.text(statement), params or {})


def findings(db: Database, key: AuditKey, exported: Path | None = None) -> audit.Break | None:
    names = tenants(db)
    outside = read_export(exported) if exported else {}
    with db.session() as session:
        _checked, broken = audit.verify(session, names)
        if broken is None:
            broken = check_anchors(session, names, key, outside)
    return broken


@pytest.fixture
def key() -> AuditKey:
    return AuditKey.generate()


@pytest.fixture
def anchored(db: Database, key: AuditKey) -> Database:
    """acme: 5 entries, checkpointed at entry 5; globex: 2 entries, checkpointed."""
    write(db, "acme", 5)
    write(db, "globex", 2)
    made, refused = make_checkpoints(db, FixedClock(T0 + timedelta(hours=1)), key, made_by="t")
    assert ([c.seq for c in made], refused) == ([5, 2], [])
    return db


def cut_tail(db: Database) -> None:
    """Entries 4 and 5 deleted and the head moved back to entry 3: a valid chain."""
    acme = acme_id(db)
    unguarded(
        db,
        f"DELETE FROM audit_log WHERE tenant_id = {acme} AND seq > 3",
        f"UPDATE audit_heads SET seq = 3, hash = (SELECT hash FROM audit_log WHERE "
        f"tenant_id = {acme} AND seq = 3) WHERE tenant_id = {acme}",
    )


def rewrite_everything(db: Database) -> None:
    """Entry 2's actor changed and every hash from there on recomputed, the head too."""
    acme = acme_id(db)
    unguarded(db, f"UPDATE audit_log SET actor = 'mallory' WHERE tenant_id = {acme} AND seq = 2")
    with db.session() as session:
        rows = session.scalars(
            sa.select(AuditEntry).where(AuditEntry.tenant_id == acme).order_by(AuditEntry.seq)
        ).all()
        prev = audit.GENESIS
        fixed = []
        for row in rows:
            encoded = audit.canonical(
                acme, row.seq, row.at, row.actor, row.action, row.object, row.details
            )
            digest = audit.chain_hash(prev, encoded)
            fixed.append((row.seq, prev, digest))
            prev = digest
    for seq, prev_hash, digest in fixed:
        unguarded(
            db,
            f"UPDATE audit_log SET prev_hash = :p, hash = :h WHERE tenant_id = {acme} AND seq = :s",
            params={"p": prev_hash, "h": digest, "s": seq},
        )
    unguarded(db, f"UPDATE audit_heads SET hash = :h WHERE tenant_id = {acme}", params={"h": prev})


def test_a_cut_tail_with_its_head_rolled_back_is_found(anchored: Database, key: AuditKey) -> None:
    cut_tail(anchored)
    with anchored.session() as session:
        assert audit.verify(session, tenants(anchored))[1] is None  # the chain alone holds
    broken = findings(anchored, key)
    assert broken is not None
    assert (broken.tenant, broken.seq) == ("acme", 4)
    assert "cut from its end" in broken.problem


def test_a_consistent_rewrite_of_the_whole_chain_is_found(
    anchored: Database, key: AuditKey
) -> None:
    rewrite_everything(anchored)
    with anchored.session() as session:
        assert audit.verify(session, tenants(anchored))[1] is None
    broken = findings(anchored, key)
    assert broken is not None
    assert (broken.tenant, broken.seq) == ("acme", 5)
    assert "rewritten" in broken.problem


def test_the_exported_file_finds_it_when_the_database_checkpoints_are_gone(
    anchored: Database, key: AuditKey, tmp_path: Path
) -> None:
    with anchored.session() as session:
        stored = [latest_checkpoint(session, i, n) for i, n in tenants(anchored).items()]
    exported = tmp_path / "outside" / "checkpoints.jsonl"
    exported.parent.mkdir()
    assert append_export(exported, [c for c in stored if c is not None]) == 2
    assert stat.S_IMODE(exported.stat().st_mode) == 0o600
    cut_tail(anchored)
    unguarded(anchored, "DELETE FROM audit_checkpoints")
    assert findings(anchored, key) is None  # nothing left in the database to check against
    broken = findings(anchored, key, exported)
    assert broken is not None
    assert "cut from its end" in broken.problem


def test_a_forged_or_altered_checkpoint_is_a_finding(anchored: Database, key: AuditKey) -> None:
    acme = acme_id(anchored)
    other = AuditKey.generate()
    unguarded(
        anchored,
        f"UPDATE audit_checkpoints SET signature = :s WHERE tenant_id = {acme}",
        params={"s": other.sign(b"anything")},
    )
    broken = findings(anchored, key)
    assert broken is not None
    assert "forged or altered" in broken.problem


def test_a_broken_chain_is_never_signed(db: Database, key: AuditKey) -> None:
    write(db, "acme", 3)
    unguarded(
        db, f"UPDATE audit_log SET actor = 'mallory' WHERE tenant_id = {acme_id(db)} AND seq = 2"
    )
    made, refused = make_checkpoints(db, FixedClock(T0), key, made_by="t")
    assert (made, refused) == ([], ["acme"])


def test_the_checkpoint_job_signs_at_least_hourly_while_the_log_grows(
    db: Database, key: AuditKey, tmp_path: Path
) -> None:
    exported = tmp_path / "checkpoints.jsonl"
    clock = FixedClock(T0 + timedelta(hours=1))
    write(db, "acme", 2)
    assert checkpoint_job(db, clock, key=key, export=exported)["made"] == 1
    write(db, "acme", 1, start=2)
    clock.advance(timedelta(minutes=59))
    assert checkpoint_job(db, clock, key=key, export=exported)["made"] == 0  # too soon
    clock.advance(timedelta(minutes=1))
    assert checkpoint_job(db, clock, key=key, export=exported)["made"] == 1
    clock.advance(timedelta(hours=5))
    assert checkpoint_job(db, clock, key=key, export=exported)["made"] == 0  # nothing new
    lines = [json.loads(line) for line in exported.read_text().splitlines()]
    assert [(c["tenant"], c["seq"]) for c in lines] == [("acme", 2), ("acme", 3)]


def test_replicas_checkpointing_one_head_record_it_once(db: Database, key: AuditKey) -> None:
    """Two replicas that read the same head sign it twice: one row is kept."""
    from nbcast.db import insert_ignore
    from nbcast.tenancy.models import AuditCheckpoint

    write(db, "acme", 2)
    clock = FixedClock(T0 + timedelta(hours=1))
    (first,), _ = make_checkpoints(db, clock, key, made_by="replica-1")
    row = {k: v for k, v in first.to_json().items() if k != "tenant"}
    row.update(made_at=first.made_at, made_by="replica-2")
    with db.session() as session:
        session.execute(insert_ignore(AuditCheckpoint, [row], db.dialect))
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(AuditCheckpoint)) == 1
    assert make_checkpoints(db, clock, key, made_by="replica-2")[0] == []


def test_the_home_key_is_made_private_and_a_readable_one_is_refused(tmp_path: Path) -> None:
    from nbcast.errors import ConfigError

    key = load_key(tmp_path, {}, create=True)
    assert key is not None
    assert key.can_sign
    path = tmp_path / "audit-key.pem"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    again = load_key(tmp_path, {}, create=False)
    assert again is not None
    assert again.key_id == key.key_id
    os.chmod(path, 0o644)
    with pytest.raises(ConfigError, match="readable by others"):
        load_key(tmp_path, {}, create=False)
    public = AuditKey.from_pem(key.public_pem())
    assert not public.can_sign
    assert public.key_id == key.key_id


# -- the command line ------------------------------------------------------------------


def test_the_command_line_checkpoints_exports_and_verifies(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tests.command import act_as

    monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
    home = Path(os.environ["NBCAST_HOME"])
    outside = tmp_path / "outside.jsonl"
    assert (
        act_as(capsys, monkeypatch, "boss", "tenants", "create", "acme", "--admin", "ada")[0] == 0
    )
    db = Database.open(f"sqlite:///{home / 'nbcast.db'}")
    write(db, "acme", 3, start=100)  # entries 3 to 5 of acme
    code, out, _ = act_as(capsys, monkeypatch, "boss", "audit", "checkpoint", "--all-tenants",
                          "--export", str(outside))  # fmt: skip
    assert code == 0
    assert "checkpoint: tenant acme at entry" in out
    code, out, _ = act_as(capsys, monkeypatch, "boss", "audit", "verify", "--all-tenants",
                          "--checkpoints", str(outside))  # fmt: skip
    assert (code, out.startswith("audit log intact")) == (0, True)
    public = tmp_path / "public.pem"
    public.write_text(act_as(capsys, monkeypatch, "boss", "audit", "public-key")[1])
    (home / "audit-key.pem").rename(tmp_path / "moved-away.pem")  # an auditor: public half only
    cut_tail(db)
    unguarded(db, "DELETE FROM audit_checkpoints")
    db.dispose()
    with pytest.raises(SystemExit) as exited:  # a finding: exit 1
        act_as(capsys, monkeypatch, "boss", "audit", "verify", "--all-tenants",
               "--checkpoints", str(outside), "--public-key", str(public))  # fmt: skip
    assert exited.value.code == 1
    out = capsys.readouterr().out
    assert out.startswith("audit log BROKEN: tenant acme: entry")
    assert "cut from its end" in out
    assert len(out.strip().splitlines()) == 1
