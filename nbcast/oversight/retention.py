"""Retention: how long a tenant keeps its files and its rows, and the pass that
deletes what is past it.

A tenant's **policy** (``tenants.retain_artifacts_days``, ``retain_rows_days``; None
keeps forever) says how many days after a run's fire time its executed notebook and
renditions are kept, and how many days its rows are: the run, its attempts, cancel
requests, warehouse usage, outbox row, renditions, deliveries, delivery attempts,
signed links and their openings. Rows are kept at least as long as files (a run's
files go with its rows). Audit entries are never deleted.

**A pass** over a tenant (:func:`run_retention`) works in transactions of at most
:data:`~nbcast.oversight.retention_plan.BATCH` runs, so a large backlog never holds
one long transaction, in two steps (which runs: :mod:`~nbcast.oversight.retention_plan`):

1. **Files.** For each batch of runs past the artifacts cutoff, the blobs that
   nothing kept refers to and no live signed link names are deleted from the store,
   then the batch's references are cleared (``artifact_sha256`` / ``sha256`` set to
   NULL: the mark that retention took the file), in one transaction with a
   ``retention.deleted`` audit entry (object ``artifacts``: runs, references dropped,
   blobs deleted, bytes freed). A blob is deleted *before* the references are
   cleared: if the store fails, that blob's references stay, the failure is counted
   in the entry and the summary, and the next pass tries again; a blob is never lost
   while anything kept refers to it, and never left behind unreferenced.
2. **Rows.** Runs past the rows cutoff whose references are cleared are deleted,
   one (definition, UTC day of fire time) at a time, several of them per transaction.
   In that transaction, before the rows go: their cost figures are added to
   ``cost_days`` (:func:`nbcast.oversight.cost.fold_costs`), and one audit entry
   ``retention.deleted`` per (definition, day) keeps the count of deleted runs, their
   states, their deliveries, and ``slots_sha256`` — SHA-256 over the sorted
   ``[slot_key, audience, state, reason]`` of the rows
   (:func:`~nbcast.oversight.retention_plan.slots_digest`), so the slot rows'
   existence stays provable. A day of one definition with more than ``BATCH`` runs
   is split into parts, one entry each (``part``: 1, 2, …); runs of a day that were
   kept back (a live link) and go in a later pass get an entry of their own then.

A **dry run** computes the same figures and writes nothing.

``nbcast retention set|show|apply`` are faces over :func:`set_retention`,
:func:`retention_policy` and :func:`apply_retention`; the scheduler service runs
:func:`retention_job` once per UTC day (:mod:`nbcast.oversight.jobs`).

One race is not closed: content deleted in the moment between a pass's last check
and its delete, and stored again by a new run or rendition of identical bytes in that
same moment (the store's ``put`` finds the blob still there and skips the write). The
window is that of one batch's store deletions; a deterministic rendition of an old
run re-rendered while its own old files are being deleted is the only way to hit it.
Two passes at once (the daily job and ``retention apply``, on PostgreSQL) never take
the same runs, but may each drop one of the last two references to a shared blob: the
blob is then left unreferenced in the store (a leak, never a loss).
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, time, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock, format_instant
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.models import Delivery, Rendition
from nbcast.errors import ConfigError
from nbcast.executor.models import RunAttempt
from nbcast.leasing import skip_locked
from nbcast.limits import clip
from nbcast.oversight.cost import fold_costs
from nbcast.oversight.retention_plan import (
    BATCH,
    DeletedSlotRow,
    Policy,
    Reference,
    Tally,
    artifact_candidates,
    check_policy,
    chunks,
    delete_runs,
    references_of,
    row_candidates,
    slots_digest,
)
from nbcast.scheduler.models import Run
from nbcast.tenancy import audit
from nbcast.tenancy.models import Tenant

__all__ = [
    "COUNTS",
    "SYSTEM_ACTOR",
    "Policy",
    "RetentionResult",
    "apply_retention",
    "retention_job",
    "retention_policy",
    "run_retention",
    "set_retention",
]

log = logging.getLogger("nbcast.oversight.retention")

SYSTEM_ACTOR = "system:retention"
"""The actor of the audit entries of the daily pass."""

MAX_FAILURES_LISTED = 5
"""Failed blob deletions named in one audit entry (all are counted)."""


@dataclass(frozen=True, kw_only=True)
class RetentionResult:
    """What a pass over one tenant deleted (or, dry, would delete)."""

    tenant: str
    dry_run: bool
    policy: Policy
    artifacts_cutoff: datetime | None = None
    rows_cutoff: datetime | None = None
    runs: int = 0
    """Run rows deleted."""
    deliveries: int = 0
    """Delivery (ledger) rows deleted with them."""
    artifact_runs: int = 0
    """Runs whose artifact references were dropped."""
    references: int = 0
    """References dropped (runs, attempts, renditions)."""
    artifacts: int = 0
    """Blobs deleted from the store."""
    bytes: int = 0
    """Bytes those blobs held."""
    failed: int = 0
    """Blobs the store failed to delete: kept, with their references, for the next pass."""
    entries: int = 0
    """``retention.deleted`` audit entries written."""
    failures: dict[str, str] = field(default_factory=dict)
    """Some of the failed blobs (a sha256 prefix) and the store's error."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``retention apply --json``)."""
        return {
            "tenant": self.tenant,
            "dry_run": self.dry_run,
            "policy": self.policy.to_json(),
            "artifacts_cutoff": _instant(self.artifacts_cutoff),
            "rows_cutoff": _instant(self.rows_cutoff),
            **{name: getattr(self, name) for name in COUNTS},
            "failures": dict(self.failures),
        }


COUNTS = (
    "runs",
    "deliveries",
    "artifact_runs",
    "references",
    "artifacts",
    "bytes",
    "failed",
    "entries",
)
"""The counted fields of :class:`RetentionResult`."""


def _instant(value: datetime | None) -> str | None:
    return format_instant(value) if value is not None else None


def _describe(exc: BaseException) -> str:
    return clip(f"{type(exc).__name__}: {exc}", 120)


class _Pass:
    """One pass over one tenant (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        store: ArtifactStore,
        tenant: Tenant,
        *,
        actor: str,
        dry_run: bool,
        batch: int = BATCH,
    ) -> None:
        if not 1 <= batch <= 10_000:
            raise ConfigError("a retention batch is 1 to 10,000 runs")
        self.batch = batch
        self.db = db
        self.clock = clock
        self.store = store
        self.tenant_id = tenant.id
        self.tenant = tenant.name
        self.policy = Policy.of(tenant)
        self.actor = actor
        self.dry_run = dry_run
        self.now = clock.now()
        self.counts: Counter[str] = Counter()
        self.failures: dict[str, str] = {}

    def run(self) -> RetentionResult:
        artifacts_cutoff = self.policy.artifacts_cutoff(self.now)
        rows_cutoff = self.policy.rows_cutoff(self.now)
        if artifacts_cutoff is not None:
            self._files(artifacts_cutoff)
        if rows_cutoff is not None:
            self._rows(rows_cutoff)
        return RetentionResult(
            tenant=self.tenant,
            dry_run=self.dry_run,
            policy=self.policy,
            artifacts_cutoff=artifacts_cutoff,
            rows_cutoff=rows_cutoff,
            failures=dict(list(self.failures.items())[:MAX_FAILURES_LISTED]),
            **{name: self.counts[name] for name in COUNTS},
        )

    def _lock(self, query: Any) -> Any:
        """``query`` ``FOR UPDATE SKIP LOCKED`` on PostgreSQL when deleting (two passes
        at once never take the same runs)."""
        return query if self.dry_run else skip_locked(self.db.dialect, query)

    # -- 1. files ---------------------------------------------------------------------

    def _files(self, cutoff: datetime) -> None:
        tally = Tally(accumulate=self.dry_run)
        last = 0
        while True:
            with self.db.session() as session:
                ids = list(
                    session.scalars(
                        self._lock(
                            sa.select(Run.id)
                            .where(*artifact_candidates(self.tenant_id, cutoff, self.now))
                            .where(Run.id > last)
                            .order_by(Run.id)
                            .limit(self.batch)
                        )
                    )
                )
                if not ids:
                    return
                last = ids[-1]
                refs = references_of(session, ids)
                doomed = tally.decide(session, refs, self.now)
                if self.dry_run:
                    self._count_blobs(doomed)
                    self.counts["artifact_runs"] += len(ids)
                    self.counts["references"] += len(refs)
                    continue
                self._drop(session, ids, refs, doomed, cutoff)

    def _count_blobs(self, shas: Sequence[str]) -> None:
        for sha in shas:
            try:
                size = self.store.size(sha)
            except Exception as exc:  # the store is away: a dry run says so and goes on
                self.counts["failed"] += 1
                self.failures.setdefault(sha[:16], _describe(exc))
                continue
            if size is not None:
                self.counts["artifacts"] += 1
                self.counts["bytes"] += size

    def _drop(
        self,
        session: Session,
        ids: list[int],
        refs: list[Reference],
        doomed: list[str],
        cutoff: datetime,
    ) -> None:
        """Delete ``doomed`` blobs, then clear the batch's references (but those of a
        blob the store failed to delete), in ``session``'s transaction."""
        deleted = freed = 0
        failed: dict[str, str] = {}
        for sha in doomed:
            try:
                size = self.store.size(sha)
                if self.store.delete(sha):
                    deleted += 1
                    freed += size or 0
            except Exception as exc:  # one blob's failure is recorded; the rest go on
                failed[sha] = _describe(exc)
                log.warning("retention: could not delete artifact %s: %s", sha, failed[sha])
        kept = [r for r in refs if r.sha256 not in failed]
        by_table: dict[str, list[int]] = {}
        for ref in kept:
            by_table.setdefault(ref.table, []).append(ref.row_id)
        columns = {
            "runs": (Run, Run.id, "artifact_sha256"),
            "run_attempts": (RunAttempt, RunAttempt.id, "artifact_sha256"),
            "renditions": (Rendition, Rendition.id, "sha256"),
        }
        for table, row_ids in by_table.items():
            model, key, column = columns[table]
            for chunk in chunks(row_ids):
                session.execute(sa.update(model).where(key.in_(chunk)).values({column: None}))
        runs = len({r.run_id for r in kept})
        if kept or failed:
            audit.record(
                session,
                self.tenant_id,
                actor=self.actor,
                action=audit.Action.retention_deleted,
                obj="artifacts",
                at=self.clock.now(),
                details={
                    "what": "artifacts",
                    "artifacts_cutoff": format_instant(cutoff),
                    "runs": runs,
                    "references": len(kept),
                    "artifacts": deleted,
                    "bytes": freed,
                    "failed": len(failed),
                    "failures": {
                        sha[:16]: text for sha, text in sorted(failed.items())[:MAX_FAILURES_LISTED]
                    },
                },
            )
            self.counts["entries"] += 1
        self.counts["artifact_runs"] += runs
        self.counts["references"] += len(kept)
        self.counts["artifacts"] += deleted
        self.counts["bytes"] += freed
        self.counts["failed"] += len(failed)
        for sha, text in failed.items():
            self.failures.setdefault(sha[:16], text)

    # -- 2. rows ----------------------------------------------------------------------

    def _rows(self, cutoff: datetime) -> None:
        candidates = row_candidates(self.tenant_id, cutoff, self.now, assume_cleared=self.dry_run)
        with self.db.session() as session:
            names = dict(
                session.execute(
                    sa.select(ReportDefinition.id, ReportDefinition.name).where(
                        ReportDefinition.tenant_id == self.tenant_id
                    )
                )
                .tuples()
                .all()
            )
        since: datetime | None = None
        while True:
            with self.db.session() as session:
                query = sa.select(sa.func.min(Run.fire_at)).where(*candidates)
                if since is not None:
                    query = query.where(Run.fire_at >= since)
                first = session.scalar(query)
            if first is None:
                return
            start = datetime.combine(first.astimezone(UTC).date(), time(0), tzinfo=UTC)
            since = start + timedelta(days=1)
            self._day(candidates, start, since, names)

    def _day(
        self,
        candidates: list[sa.ColumnElement[bool]],
        start: datetime,
        end: datetime,
        names: dict[int, str],
    ) -> None:
        """Delete one UTC day's runs, definition by definition, whole definitions per
        transaction up to ``batch`` runs (a larger one in parts)."""
        in_day = [*candidates, Run.fire_at >= start, Run.fire_at < end]
        with self.db.session() as session:
            definitions = sorted(
                session.scalars(sa.select(Run.definition_id).where(*in_day).distinct())
            )
        after = dict.fromkeys(definitions, 0)
        parts = dict.fromkeys(definitions, 0)
        pending = list(definitions)
        while pending:
            with self.db.session() as session:
                used = 0
                while pending:
                    definition = pending[0]
                    rows = session.execute(
                        self._lock(
                            sa.select(Run.id, Run.slot_key, Run.audience, Run.state, Run.reason)
                            .where(*in_day, Run.definition_id == definition)
                            .where(Run.id > after[definition])
                            .order_by(Run.id)
                            .limit(self.batch + 1)
                        )
                    ).all()
                    if not rows:
                        pending.pop(0)
                        continue
                    piece = rows[: self.batch]
                    if used and used + len(piece) > self.batch:
                        break  # the next transaction starts with this definition
                    split = len(rows) > self.batch or parts[definition] > 0
                    parts[definition] += 1
                    after[definition] = piece[-1].id
                    self._delete(
                        session,
                        definition,
                        names.get(definition, f"#{definition}"),
                        start,
                        piece,
                        part=parts[definition] if split else None,
                    )
                    used += len(piece)
                    if len(rows) <= self.batch:
                        pending.pop(0)
                    if used >= self.batch:
                        break

    def _delete(
        self,
        session: Session,
        definition_id: int,
        definition: str,
        day: datetime,
        rows: Sequence[Any],
        *,
        part: int | None,
    ) -> None:
        ids = [int(r.id) for r in rows]
        deliveries = sum(
            int(
                session.scalar(
                    sa.select(sa.func.count()).select_from(Delivery).where(Delivery.run_id.in_(c))
                )
                or 0
            )
            for c in chunks(ids)
        )
        self.counts["runs"] += len(ids)
        self.counts["deliveries"] += deliveries
        if self.dry_run:
            return
        slots = [DeletedSlotRow(r.slot_key, r.audience, r.state, r.reason) for r in rows]
        details: dict[str, Any] = {
            "what": "runs",
            "definition": definition,
            "day": day.date().isoformat(),
            "runs": len(ids),
            "slots_sha256": slots_digest(slots),
            "states": dict(sorted(Counter(r.state for r in rows).items())),
            "deliveries": deliveries,
            "rows_cutoff": format_instant(self.policy.rows_cutoff(self.now) or self.now),
        }
        if part is not None:
            details["part"] = part
        audit.record(
            session,
            self.tenant_id,
            actor=self.actor,
            action=audit.Action.retention_deleted,
            obj=f"definition:{definition}",
            at=self.clock.now(),
            details=details,
        )
        self.counts["entries"] += 1
        fold_costs(session, self.tenant_id, ids)
        delete_runs(session, ids)


def run_retention(
    db: Database,
    clock: Clock,
    store: ArtifactStore,
    tenant: str,
    *,
    actor: str = SYSTEM_ACTOR,
    dry_run: bool = False,
    batch: int = BATCH,
) -> RetentionResult:
    """One pass over ``tenant`` by its policy, at most ``batch`` runs per transaction
    (unchecked: for the commands below, the daily job and tests)."""
    with db.session() as session:
        row = session.scalar(sa.select(Tenant).where(Tenant.name == tenant))
        if row is None:
            raise ConfigError(f"no tenant {clip(tenant)}")
    return _Pass(db, clock, store, row, actor=actor, dry_run=dry_run, batch=batch).run()


# -- the commands ---------------------------------------------------------------------

_FIELDS = {"artifacts_days": "retain_artifacts_days", "rows_days": "retain_rows_days"}


def retention_policy(session: Session, caller: Caller, now: datetime | None = None) -> Policy:
    """The caller's tenant's policy (any member)."""
    from nbcast.tenancy.roles import Role, require

    tenant = require(session, caller, Role.viewer, "reading the retention policy", now).tenant
    return Policy.of(tenant)


def set_retention(db: Database, clock: Clock, caller: Caller, **changes: int | None) -> Policy:
    """Change the caller's tenant's policy (its admins): ``artifacts_days`` and/or
    ``rows_days``, each a number of days or None (forever), checked together with what
    is not changed (:func:`~nbcast.oversight.retention_plan.check_policy`); audited
    ``retention.changed`` with the policy before and after."""
    from nbcast.tenancy.roles import Role, require

    unknown = set(changes) - set(_FIELDS)
    if unknown:
        raise ConfigError(f"unknown retention setting {clip(sorted(unknown)[0])}")
    if not changes:
        raise ConfigError("name --artifacts-days, --rows-days or both")
    now = clock.now()
    with db.session() as session:
        tenant = require(session, caller, Role.admin, "changing retention", now).tenant
        before = Policy.of(tenant)
        after = Policy(**{**before.to_json(), **changes})
        check_policy(after)
        tenant.retain_artifacts_days = after.artifacts_days
        tenant.retain_rows_days = after.rows_days
        audit.record(
            session,
            tenant.id,
            actor=caller.user,
            action=audit.Action.retention_changed,
            obj=f"tenant:{tenant.name}",
            at=now,
            details={"from": before.to_json(), "to": after.to_json()},
        )
        return after


def apply_retention(
    db: Database,
    clock: Clock,
    caller: Caller,
    store: ArtifactStore,
    *,
    dry_run: bool = False,
    every_tenant: bool = False,
) -> list[RetentionResult]:
    """A pass over the caller's tenant (its admins), or over every tenant with a
    policy (operators, ``every_tenant``); ``dry_run`` writes nothing."""
    from nbcast.tenancy.roles import Role, require, require_operator

    now = clock.now()
    with db.session() as session:
        if every_tenant:
            require_operator(session, caller, "applying retention to every tenant", now)
            names = _tenants_with_policy(session)
        else:
            names = [require(session, caller, Role.admin, "applying retention", now).tenant.name]
    return [
        run_retention(db, clock, store, name, actor=caller.user, dry_run=dry_run) for name in names
    ]


def _tenants_with_policy(session: Session) -> list[str]:
    return list(
        session.scalars(
            sa.select(Tenant.name)
            .where(
                sa.or_(
                    Tenant.retain_artifacts_days.is_not(None), Tenant.retain_rows_days.is_not(None)
                )
            )
            .order_by(Tenant.name)
        )
    )


def retention_job(db: Database, clock: Clock, store: ArtifactStore | None = None) -> dict[str, Any]:
    """The daily pass over every tenant with a policy (the store: the settings' own,
    ``NBCAST_ARTIFACTS`` or the home's); one tenant's failure is logged and the others
    go on. Returns the totals."""
    with db.session() as session:
        names = _tenants_with_policy(session)
    if names and store is None:
        from nbcast.artifacts import open_store
        from nbcast.config import load_settings

        store = open_store(load_settings().artifacts_location)
    totals: Counter[str] = Counter()
    for name in names:
        assert store is not None
        try:
            result = run_retention(db, clock, store, name)
        except Exception:
            totals["tenants_failed"] += 1
            log.exception("retention of tenant %s failed; the next pass tries again", name)
            continue
        for key in ("runs", "deliveries", "artifacts", "bytes", "failed"):
            totals[key] += getattr(result, key)
    return {"tenants": len(names), **dict(totals)}
