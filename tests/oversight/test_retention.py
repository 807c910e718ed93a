"""Retention on both back ends, on a fixed clock over a history made by the real planes
(:mod:`tests.oversight.history`): old rows and unreferenced blobs go, kept and
shared-by-hash blobs stay, a live link keeps its run and files, a dry run writes
nothing, the per-day audit entries verify and match what went, the cost figures
survive, a failing store loses nothing, and the daily job runs once a day however
many scheduler replicas run it."""

from __future__ import annotations

import hashlib
import json
import shutil
from collections import defaultdict
from datetime import UTC, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import format_instant
from nbcast.db import Base, Database, import_models
from nbcast.definitions.models import ReportDefinition
from nbcast.errors import AccessDeniedError, ConfigError
from nbcast.oversight.cost import tenant_costs
from nbcast.oversight.jobs import JobRunner
from nbcast.oversight.models import CostDay, OversightJob
from nbcast.oversight.retention import COUNTS, Policy, RetentionResult, run_retention, set_retention
from nbcast.oversight.retention_plan import check_policy
from nbcast.scheduler.models import FINISHED_STATES, Run
from nbcast.tenancy import audit
from nbcast.tenancy.models import AuditEntry, Operator, Tenant
from tests.command import act_as
from tests.members import grant
from tests.oversight.history import (
    SHARED,
    START,
    History,
    live,
    make_history,
    revoke_manual,
    snapshot,
    store_files,
    table_counts,
)

ADMIN = Caller(tenant="default", user="t")
"""The history's publisher: the home's first user, so its operator and admin."""

RUN_TABLES = (
    "run_attempts",
    "run_cancel_requests",
    "warehouse_usage",
    "delivery_outbox",
    "renditions",
    "deliveries",
    "signed_links",
    "link_opens",
)


def _policy(history: History, artifacts: int | None, rows: int | None) -> None:
    set_retention(history.db, history.clock, ADMIN, artifacts_days=artifacts, rows_days=rows)


def _pass(history: History, *, dry_run: bool = False) -> RetentionResult:
    return run_retention(history.db, history.clock, history.plane.store, "default", dry_run=dry_run)


def _counts(result: RetentionResult) -> dict[str, int]:
    return {name: getattr(result, name) for name in COUNTS if name != "entries"}


def _costs(db: Database) -> dict[tuple[Any, int], dict[str, Any]]:
    with db.session() as session:
        tenant_id = session.scalar(sa.select(Tenant.id).where(Tenant.name == "default"))
        assert tenant_id is not None
        totals = tenant_costs(session, tenant_id, START.date(), START.date() + timedelta(days=60))
    return {key: figures.to_json() for key, figures in totals.items()}


def _assert_same_costs(before: dict[Any, Any], after: dict[Any, Any]) -> None:
    assert after.keys() == before.keys()
    for key, figures in before.items():
        assert after[key] == pytest.approx(figures), key


def _expected(
    before: dict[int, dict[str, Any]], now: Any, artifacts_days: int, rows_days: int
) -> tuple[set[int], set[int], set[str], set[str]]:
    """What the policy deletes, computed from the snapshot alone: run ids deleted, run
    ids whose files go, blobs still referred to, blobs no longer referred to."""
    rows_cutoff = now - timedelta(days=rows_days)
    files_cutoff = now - timedelta(days=artifacts_days)
    assert all(r["state"] in FINISHED_STATES for r in before.values())
    deleted = {i for i, r in before.items() if r["fire_at"] < rows_cutoff and not live(r, now)}
    dropped = {
        i
        for i, r in before.items()
        if r["fire_at"] < files_cutoff and not live(r, now) and i not in deleted
    }
    kept = set().union(*(r["shas"] for i, r in before.items() if i not in deleted | dropped))
    kept |= {
        sha
        for r in before.values()
        for sha, expires, revoked in r["links"]
        if revoked is None and expires > now
    }
    every = set().union(*(r["shas"] for r in before.values()))
    return deleted, dropped, kept, every - kept


def _digest(rows: list[tuple[Any, ...]]) -> str:
    lines = sorted(json.dumps(list(row), separators=(",", ":")) for row in rows)
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()


def _run_entries(db: Database) -> list[dict[str, Any]]:
    with db.session() as session:
        rows = session.scalars(
            sa.select(AuditEntry.details)
            .where(AuditEntry.action == audit.Action.retention_deleted.value)
            .order_by(AuditEntry.seq)
        ).all()
    return [d for d in map(json.loads, rows) if d["what"] == "runs"]


def _verify(db: Database) -> None:
    with db.session() as session:
        tenants = dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
        checked, broken = audit.verify(session, tenants)
    assert broken is None
    assert checked > 0


@pytest.mark.slow
def test_retention_deletes_what_the_policy_no_longer_keeps(db: Database, nbcast_home: Path) -> None:
    history = make_history(db, nbcast_home)
    history.clock.advance(timedelta(hours=1))
    _policy(history, 4, 8)
    now = history.clock.now()
    before = snapshot(db)
    tables, files, costs = table_counts(db), store_files(nbcast_home), _costs(db)
    deleted, dropped, kept, doomed = _expected(before, now, 4, 8)
    shared = hashlib.sha256(SHARED).hexdigest()
    # The history has every case: rows and files to go, shared blobs, live links.
    assert deleted
    assert dropped
    assert doomed
    assert history.live_link_run not in deleted | dropped
    assert history.manual_run not in deleted | dropped
    assert shared in kept
    assert any(shared in before[i]["shas"] for i in deleted)
    assert {before[i]["state"] for i in deleted} >= {"SUCCEEDED", "FAILED", "MISSED"}

    dry = _pass(history, dry_run=True)
    assert table_counts(db) == tables, "a dry run writes nothing"
    assert store_files(nbcast_home) == files

    result = _pass(history)
    assert _counts(result) == _counts(dry), "the dry run says what the pass does"
    assert result.runs == len(deleted)
    assert result.artifacts == len(doomed)
    assert result.failed == 0
    assert result.bytes == sum(files[sha] for sha in doomed)
    assert result.deliveries == sum(1 for i in deleted if before[i]["state"] == "SUCCEEDED")
    after = snapshot(db)
    assert after.keys() == before.keys() - deleted
    for run_id, run in after.items():
        expected = set() if run_id in dropped else before[run_id]["shas"]
        assert run["shas"] == expected, run_id
    left = store_files(nbcast_home)
    assert kept <= left.keys(), "a blob something kept refers to is never deleted"
    assert not doomed & left.keys()
    with db.engine.connect() as conn:
        for table in RUN_TABLES:
            stale = conn.execute(
                sa.text(
                    f"SELECT count(*) FROM {table} WHERE run_id IN ({','.join(map(str, deleted))})"
                )
            ).scalar_one()
            assert stale == 0, table
        orphans = conn.execute(
            sa.text(
                "SELECT count(*) FROM delivery_attempts WHERE delivery_id NOT IN "
                "(SELECT id FROM deliveries)"
            )
        ).scalar_one()
        assert orphans == 0

    # One entry per (definition, UTC day), its count and hash those of the rows deleted.
    with db.session() as session:
        names = dict(
            session.execute(sa.select(ReportDefinition.id, ReportDefinition.name)).tuples().all()
        )
    groups: dict[tuple[str, str], list[tuple[Any, ...]]] = defaultdict(list)
    for run_id in deleted:
        run = before[run_id]
        day = run["fire_at"].astimezone(UTC).date().isoformat()
        groups[(names[run["definition_id"]], day)].append(run["slot"])
    entries = _run_entries(db)
    assert {(e["definition"], e["day"]) for e in entries} == groups.keys()
    assert len(entries) == len(groups)
    for entry in entries:
        rows = groups[(entry["definition"], entry["day"])]
        assert entry["runs"] == len(rows)
        assert entry["slots_sha256"] == _digest(rows)
        assert "part" not in entry
    _verify(db)
    # The cost figures of the deleted runs are kept: the report reads the same.
    _assert_same_costs(costs, _costs(db))
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(CostDay)) == len(groups)

    # Nothing more to do the same day; no entry written for nothing.
    entries_before = table_counts(db)["audit_log"]
    again = _pass(history)
    assert _counts(again) == dict.fromkeys(_counts(again), 0)
    assert table_counts(db)["audit_log"] == entries_before

    # Once its link is revoked the manual run goes too: a second entry for its day,
    # and its figures added to the kept ones of that day.
    revoke_manual(history)
    manual = before[history.manual_run]
    third = _pass(history)
    assert third.runs == 1
    assert history.manual_run not in snapshot(db)
    day = manual["fire_at"].astimezone(UTC).date()
    last = _run_entries(db)[-1]
    assert (last["definition"], last["day"], last["runs"]) == ("sales", day.isoformat(), 1)
    assert last["slots_sha256"] == _digest([manual["slot"]])
    with db.session() as session:
        kept_day = session.scalar(
            sa.select(CostDay).where(
                CostDay.day == day, CostDay.definition_id == manual["definition_id"]
            )
        )
        assert kept_day is not None
        assert kept_day.runs == 2
    _assert_same_costs(costs, _costs(db))
    _verify(db)


def test_a_failing_store_loses_nothing_and_the_next_pass_finishes(
    db: Database, nbcast_home: Path
) -> None:
    history = make_history(db, nbcast_home, days=7, html=False)
    history.clock.advance(timedelta(days=3))
    _policy(history, 2, 2)
    before = snapshot(db)
    deleted, _, kept, doomed = _expected(before, history.clock.now(), 2, 2)
    unique = history.unique_runs[0]
    assert unique in deleted
    with db.session() as session:
        sha = session.scalar(sa.select(Run.artifact_sha256).where(Run.id == unique))
    assert sha is not None
    assert sha in doomed, "its executed notebook is its own"
    store = history.plane.store
    path = store.path(sha)
    content = path.read_bytes()
    path.unlink()
    (path / "in-the-way").mkdir(parents=True)  # unlink() fails: a directory is there

    first = _pass(history)
    assert first.failed == 1
    assert sha[:16] in first.failures
    assert first.artifacts == len(doomed) - 1
    after = snapshot(db)
    assert unique in after
    assert sha in after[unique]["shas"], "its references stay"
    assert after.keys() == before.keys() - (deleted - {unique})
    with db.session() as session:
        details = [
            json.loads(d)
            for d in session.scalars(
                sa.select(AuditEntry.details).where(AuditEntry.object == "artifacts")
            )
        ]
    assert sum(d["failed"] for d in details) == 1
    assert kept <= store_files(nbcast_home).keys()

    shutil.rmtree(path)  # the store works again
    assert store.put(content).sha256 == sha
    second = _pass(history)
    assert (second.failed, second.artifacts, second.runs) == (0, 1, 1)
    assert not store.exists(sha)
    assert snapshot(db).keys() == before.keys() - deleted
    _verify(db)


def test_a_blob_another_tenant_refers_to_is_kept(db: Database, nbcast_home: Path) -> None:
    history = make_history(db, nbcast_home, days=3, html=False)
    grant(db, "globex", "t", "admin")
    history.plane.publish("kpi", [], tenant="globex")
    other = history.plane.succeed("kpi", notebook=SHARED, tenant="globex")
    history.clock.advance(timedelta(days=120))  # every link of the history is dead
    _policy(history, 1, 1)
    runs = len(snapshot(db)) - 1
    assert _pass(history).runs == runs
    left = snapshot(db)
    assert set(left) == {other}, "every run of tenant default went"
    assert history.plane.store.exists(hashlib.sha256(SHARED).hexdigest())
    assert left[other]["shas"] >= {hashlib.sha256(SHARED).hexdigest()}


def test_the_daily_job_runs_once_a_day_with_two_replicas(db: Database, nbcast_home: Path) -> None:
    history = make_history(db, nbcast_home, days=6, html=False)
    _policy(history, 2, 3)
    replicas = [JobRunner(db, history.clock, owner=name, frequent={}) for name in ("a", "b")]
    runs_by_day = []
    for _ in range(3):
        history.clock.advance(timedelta(days=1))
        ran = [replica.step() for replica in replicas + replicas]
        runs_by_day.append([("retention" in done) for done in ran])
        with db.session() as session:
            job = session.get(OversightJob, "retention")
            assert job is not None
            assert job.last_day == history.clock.now().date()
            assert job.lease_owner is None
        entries = _run_entries(db)
        assert len({(e["definition"], e["day"]) for e in entries}) == len(entries)
    assert [sum(day) for day in runs_by_day] == [1, 1, 1]
    assert runs_by_day[0][0], "the first replica to step on a day runs it"
    rows_cutoff = history.clock.now() - timedelta(days=3)
    assert all(
        r["fire_at"] >= rows_cutoff or live(r, history.clock.now()) for r in snapshot(db).values()
    )
    _verify(db)


def test_small_batches_split_a_day_into_parts_and_delete_the_same(
    db: Database, nbcast_home: Path
) -> None:
    history = make_history(db, nbcast_home, days=4, html=False)
    revoke_manual(history)
    history.clock.advance(timedelta(days=120))  # every link dead: everything goes
    _policy(history, 1, 1)
    before = snapshot(db)
    dry = _pass(history, dry_run=True)
    result = run_retention(db, history.clock, history.plane.store, "default", batch=1)
    assert _counts(result) == _counts(dry)
    assert snapshot(db) == {}
    with db.session() as session:
        details = [
            json.loads(d)
            for d in session.scalars(
                sa.select(AuditEntry.details)
                .where(AuditEntry.action == "retention.deleted")
                .order_by(AuditEntry.seq)
            )
        ]
    assert all(d["runs"] == 1 for d in details), "one run per transaction"
    manual = before[history.manual_run]
    day = manual["fire_at"].astimezone(UTC).date().isoformat()
    parts = [
        d for d in details if d["what"] == "runs" and (d["definition"], d["day"]) == ("sales", day)
    ]
    assert [d["part"] for d in parts] == [1, 2]
    scheduled = next(
        r
        for i, r in before.items()
        if i != history.manual_run
        and r["definition_id"] == manual["definition_id"]
        and r["fire_at"].date() == manual["fire_at"].date()
    )
    assert {d["slots_sha256"] for d in parts} == {
        _digest([manual["slot"]]),
        _digest([scheduled["slot"]]),
    }
    others = [d for d in details if d["what"] == "runs" and d not in parts]
    assert others
    assert all("part" not in d for d in others)
    _verify(db)


def test_cli_uses_the_configured_store_with_a_tenant_option(
    db: Database,
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``--tenant`` keeps the rest of the settings: NBCAST_ARTIFACTS names the store
    retention deletes from (not the home's default folder)."""
    elsewhere = tmp_path / "elsewhere"
    history = make_history(db, elsewhere, days=3, html=False)
    history.clock.advance(timedelta(days=120))
    _policy(history, 1, 1)
    monkeypatch.setenv("NBCAST_ARTIFACTS", str(elsewhere / "artifacts"))
    monkeypatch.setenv("NBCAST_CLOCK", f"fixed:{format_instant(history.clock.now())}")
    files = store_files(elsewhere)
    code, out, err = act_as(
        capsys, monkeypatch, "t", "--tenant", "default", "retention", "apply", "--json"
    )
    assert (code, err) == (0, "")
    (done,) = json.loads(out)
    assert done["artifacts"] > 0
    assert len(store_files(elsewhere)) == len(files) - done["artifacts"]


def test_every_table_that_refers_to_a_run_is_emptied_by_retention() -> None:
    """A table added later with a foreign key to a run, a delivery or a link must be
    added to ``delete_runs`` (or retention would fail on the key)."""
    import_models()
    referring = {
        table.name
        for table in Base.metadata.sorted_tables
        for key in table.foreign_keys
        if key.column.table.name in {"runs", "deliveries", "signed_links"}
    }
    assert referring == {*RUN_TABLES, "delivery_attempts"} - {"runs"}


@pytest.mark.parametrize(
    ("artifacts", "rows", "message"),
    [
        pytest.param(0, None, "1 to 36,500", id="zero_days"),
        pytest.param(36_501, None, "1 to 36,500", id="past_a_century"),
        pytest.param(10, 5, "at least artifacts-days", id="rows_before_files"),
        pytest.param(None, 5, "at least artifacts-days", id="files_forever_rows_not"),
        pytest.param(True, None, "whole number", id="a_boolean"),
    ],
)
def test_policies_are_checked(artifacts: Any, rows: Any, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        check_policy(Policy(artifacts_days=artifacts, rows_days=rows))


def test_only_an_admin_changes_the_policy_and_it_is_audited(db: Database) -> None:
    from nbcast.clock import FixedClock

    clock = FixedClock(START)
    grant(db, "default", "admin", "admin")
    grant(db, "default", "viewer", "viewer")
    with db.session() as session:  # an operator exists: nobody is bootstrapped
        session.add(Operator(name="root", granted_at=START, granted_by="test"))
    tables = table_counts(db)
    with pytest.raises(AccessDeniedError, match="needs the admin role"):
        set_retention(db, clock, Caller(tenant="default", user="viewer"), artifacts_days=3)
    with pytest.raises(ConfigError):
        set_retention(db, clock, Caller(tenant="default", user="admin"), rows_days=3)
    assert table_counts(db) == tables
    policy = set_retention(
        db, clock, Caller(tenant="default", user="admin"), artifacts_days=3, rows_days=30
    )
    assert policy == Policy(artifacts_days=3, rows_days=30)
    with db.session() as session:
        entry = session.scalars(
            sa.select(AuditEntry).where(AuditEntry.action == "retention.changed")
        ).one()
        assert json.loads(entry.details) == {
            "from": {"artifacts_days": None, "rows_days": None},
            "to": {"artifacts_days": 3, "rows_days": 30},
        }
        assert entry.actor == "admin"


def test_the_store_deletes_idempotently_and_says_sizes(tmp_path: Path) -> None:
    from nbcast.artifacts import FsspecArtifactStore, LocalArtifactStore

    for store in (
        LocalArtifactStore(tmp_path / "store"),
        FsspecArtifactStore(f"memory://retention-{tmp_path.name}"),
    ):
        ref = store.put(b"twelve bytes")
        assert store.size(ref.sha256) == 12
        assert store.delete(ref.sha256)
        assert not store.exists(ref.sha256)
        assert store.size(ref.sha256) is None
        assert not store.delete(ref.sha256), "deleting what is gone is a no-op"
        with pytest.raises(ConfigError):
            store.delete("../../etc/passwd")


# -- the command line -------------------------------------------------------------------


@pytest.fixture
def old_history(
    db: Database, use_db: str, nbcast_home: Path, monkeypatch: pytest.MonkeyPatch
) -> History:
    """Three days of history, a policy that deletes all of it, the CLI's clock 30 days
    later; ``ann`` an admin (not an operator), ``val`` a viewer."""
    history = make_history(db, nbcast_home, days=3, html=False)
    history.clock.advance(timedelta(days=30))
    _policy(history, 1, 2)
    grant(db, "default", "ann", "admin")
    grant(db, "default", "val", "viewer")
    monkeypatch.setenv("NBCAST_CLOCK", f"fixed:{format_instant(history.clock.now())}")
    return history


REFUSED: list[tuple[str, str, list[str], str]] = [
    ("set_nothing", "ann", ["set"], "name --artifacts-days"),
    ("zero_days", "ann", ["set", "--artifacts-days", "0"], "1 to 36,500"),
    ("too_many", "ann", ["set", "--artifacts-days", "36501"], "1 to 36,500"),
    ("not_a_number", "ann", ["set", "--rows-days", "abc"], "not a number"),
    ("negative", "ann", ["set", "--rows-days", "-5"], ""),
    ("exponent", "ann", ["set", "--rows-days", "1e3"], "not a number"),
    ("rows_zero", "ann", ["set", "--rows-days", "0"], "1 to 36,500"),
    ("rows_first", "ann", ["set", "--artifacts-days", "5", "--rows-days", "3"], "at least"),
    ("files_forever", "ann", ["set", "--artifacts-days", "forever"], "at least"),
    ("admin_all_tenants", "ann", ["apply", "--all-tenants"], "operators"),
    ("unknown_option", "ann", ["apply", "--bogus"], "No such option"),
    ("viewer_apply", "val", ["apply"], "needs the admin role"),
    ("viewer_dry_run", "val", ["apply", "--dry-run"], "needs the admin role"),
    ("viewer_set", "val", ["set", "--artifacts-days", "5"], "needs the admin role"),
    ("stranger_apply", "stranger", ["apply"], "has no role"),
    ("stranger_show", "stranger", ["show"], "has no role"),
]


def test_cli_refuses_bad_input_and_viewers_writing_nothing(
    old_history: History,
    db: Database,
    nbcast_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Each refusal: exit 2, one ``error:`` line, not a row or a blob changed (one
    history for all the cases: a refused apply would have deleted all of it)."""
    for case, user, argv, message in REFUSED:
        tables, files = table_counts(db), store_files(nbcast_home)
        code, out, err = act_as(capsys, monkeypatch, user, "retention", *argv)
        lines = err.strip().splitlines()
        assert (code, out, len(lines)) == (2, "", 1), case
        assert lines[0].startswith("error: "), case
        assert message in lines[0], (case, lines[0])
        assert table_counts(db) == tables, case
        assert store_files(nbcast_home) == files, case


def test_cli_set_show_and_apply(
    old_history: History,
    db: Database,
    nbcast_home: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    code, out, _ = act_as(
        capsys, monkeypatch, "ann", "retention", "set", "--artifacts-days", "2", "--rows-days", "3"
    )
    assert code == 0
    assert "artifacts 2 days, rows 3 days" in out
    code, out, _ = act_as(capsys, monkeypatch, "val", "retention", "show", "--json")
    assert (code, json.loads(out)) == (
        0,
        {"tenant": "default", "artifacts_days": 2, "rows_days": 3},
    )
    with db.session() as session:
        changed = session.scalars(
            sa.select(AuditEntry).where(AuditEntry.action == "retention.changed")
        ).all()
    assert [e.actor for e in changed] == ["t", "ann"]

    tables, files = table_counts(db), store_files(nbcast_home)
    code, out, err = act_as(capsys, monkeypatch, "ann", "retention", "apply", "--dry-run", "--json")
    assert (code, err) == (0, "")
    (dry,) = json.loads(out)
    assert dry["dry_run"] is True
    assert dry["runs"] > 0
    assert dry["artifacts"] > 0
    assert table_counts(db) == tables
    assert store_files(nbcast_home) == files
    code, out, err = act_as(capsys, monkeypatch, "ann", "retention", "apply", "--dry-run")
    assert (code, err) == (0, "")
    assert "would be deleted" in out
    assert table_counts(db) == tables

    code, out, err = act_as(capsys, monkeypatch, "ann", "retention", "apply", "--json")
    assert (code, err) == (0, "")
    (done,) = json.loads(out)
    for name in ("runs", "deliveries", "artifact_runs", "references", "artifacts", "bytes"):
        assert done[name] == dry[name], name
    assert table_counts(db)["runs"] == tables["runs"] - done["runs"]
    assert len(store_files(nbcast_home)) == len(files) - done["artifacts"]
    with db.session() as session:
        actors = set(
            session.scalars(
                sa.select(AuditEntry.actor).where(AuditEntry.action == "retention.deleted")
            )
        )
    assert actors == {"ann"}
    # An operator applies it to every tenant with a policy.
    code, out, err = act_as(capsys, monkeypatch, "t", "retention", "apply", "--all-tenants")
    assert (code, err) == (0, "")
    assert "default" in out
