"""The slot materializer: every slot of every definition gets exactly one row.

One *pass* (:meth:`Materializer.tick`) does two things:

1. **Sync.** Definitions without scheduler state get a ``schedule_states`` row whose
   watermark is the definition's first publish (or its schedule's ``start``, if
   later): no slot before it is materialized unless a backfill asks for it.
   Definitions whose latest version is newer than the compiled one switch to it;
   the new schedule takes effect after the watermark and nothing before it is
   re-evaluated.
2. **Materialize.** In batches, it claims due definitions (``next_fire_at <= now``,
   not paused) with ``FOR UPDATE SKIP LOCKED`` — so replicas on PostgreSQL never
   work on the same definition at once — and for each one walks every slot after
   the watermark up to now, decides it (:mod:`nbcast.scheduler.policies`) — once per
   slot, for all of the slot's audiences —, inserts its rows, one per audience
   (:func:`~nbcast.scheduler.slots.slot_rows`), with ``INSERT … ON CONFLICT DO
   NOTHING`` on ``UNIQUE(definition_id, slot_key, audience)``, and advances the
   watermark and ``next_fire_at`` **in the same transaction**. A crash anywhere
   before the commit leaves the watermark where it was, so the next pass redoes the
   work; the unique constraint is the last guard against a duplicate.

Runs pin the version whose schedule produced them. A run's ``not_before`` is its
fire time plus a deterministic share of the schedule's ``jitter`` (a hash of the
definition and slot key), so replays compute the same value.

**One definition's failure stays its own.** A definition whose version cannot be
parsed or compiled, whose slots cannot be computed (a date out of range, say) or
whose rows cannot be written is a *poison* item: its failure is recorded on its
``schedule_states`` row (``error``, ``failures``, ``failed_at``), its watermark
stays where it was, and it is tried again at ``next_fire_at`` = now + backoff (30 s,
doubling, at most an hour) — while every other definition of the pass is
materialized as usual. When a batch's write fails, the batch is written again one
definition at a time, each under a savepoint, so only the culprit is held back. A
success clears the error. A new version of the definition is picked up by the next
sync as usual, which is how an author fixes it.

**Bounded passes.** One pass materializes at most
:data:`~nbcast.limits.MAX_SLOTS_PER_PASS` rows of one definition (a scheduler
that was down for a year under a one-minute schedule): that many slots divided by
the definition's audiences, at least one slot; the rest follow in the next
pass, which is due at once. A pass takes each definition at most once: a definition
whose watermark it moved but which is still due is not claimed again by the pass's
later batches or its other threads (on PostgreSQL several drain at once), so the bound
holds per pass however the threads interleave. The misfire policy sees that more slots are due (so
``run_latest`` supersedes every missed slot of the earlier chunks); ``max_catchup``
of ``run_all`` counts per pass.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import Clock
from nbcast.db import Database, insert_many_ignore
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.spec import ScheduleSpec
from nbcast.faults import crash_point
from nbcast.leasing import skip_locked
from nbcast.limits import MAX_SLOTS_PER_PASS
from nbcast.retry import backoff_ceiling
from nbcast.scheduler.models import (
    ACTIVE_STATES,
    CancelReason,
    CancelRequest,
    Run,
    RunKind,
    ScheduleState,
)
from nbcast.scheduler.policies import ActiveRuns, Decision, decide
from nbcast.scheduler.slots import (
    Plan,
    PlanCache,
    PoisonDefinition,
    active_runs,
    due_slots,
    initial_watermark,
    next_fire,
    slot_rows,
    usable,
)

__all__ = ["Materializer", "TickResult", "initial_watermark"]

log = logging.getLogger(__name__)


@dataclass
class TickResult:
    """What one pass did."""

    definitions: int = 0
    slots: int = 0
    inserted: int = 0
    by_state: dict[str, int] = field(default_factory=dict)
    failed: int = 0
    """Definitions whose failure was recorded on them (poison, module docstring)."""

    def add(self, decisions: Iterable[Decision]) -> None:
        """Count ``decisions`` by resulting state."""
        for d in decisions:
            self.slots += 1
            self.by_state[d.state.value] = self.by_state.get(d.state.value, 0) + 1


def failure_backoff(failures: int) -> timedelta:
    """When a definition that failed ``failures`` times in a row is tried again:
    30 s, doubling, at most an hour (deterministic: replicas agree)."""
    return timedelta(seconds=backoff_ceiling(failures, base=30.0, cap=3600.0))


def describe_failure(exc: BaseException) -> str:
    """One bounded line for the ``error`` column."""
    text = " ".join(str(exc).split()) or type(exc).__name__
    if not isinstance(exc, PoisonDefinition):
        text = f"{type(exc).__name__}: {text}"
    return text[:500]


class Materializer:
    """Turns due schedule slots into rows (see the module docstring).

    ``batch`` is how many definitions one transaction claims. ``name`` identifies
    the replica in logs.
    """

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        name: str = "scheduler",
        batch: int = 200,
        threads: int = 2,
    ) -> None:
        self.db = db
        self.clock = clock
        self.name = name
        self.batch = batch
        # On PostgreSQL a pass drains due definitions on several connections at once
        # (SKIP LOCKED keeps them apart), so the database inserts one batch while
        # Python prepares the next. SQLite has one writer, so one thread.
        self.threads = threads if db.dialect == "postgresql" else 1
        self.plans = PlanCache()
        self._synced_through: int | None = None
        self._passed: set[int] = set()
        self._passed_lock = threading.Lock()
        self._incomplete = False

    # -- plans ------------------------------------------------------------------

    # -- sync -------------------------------------------------------------------

    def sync(self) -> int:
        """Create state for new definitions and switch changed ones to their new
        schedule; return how many definitions changed.

        Every publish that matters adds a ``definition_versions`` row, so when the
        newest version id is the one already synced there is nothing to do — one
        index lookup instead of a join over every definition on each pass.
        """
        changed = 0
        with self.db.session() as session:
            newest = session.scalar(sa.select(sa.func.max(DefinitionVersion.id)))
            if newest is not None and newest == self._synced_through:
                return 0
            rows = session.execute(
                _sync_candidates().where(
                    sa.or_(
                        ScheduleState.definition_id.is_(None),
                        ScheduleState.schedule_version < ReportDefinition.latest_version,
                    )
                )
            ).all()
            if not rows:
                self._synced_through = newest
                return 0
        self._incomplete = False
        for start in range(0, len(rows), 1000):  # bounded transactions and IN lists
            with self.db.session() as session:
                changed += self._sync_chunk(session, rows[start : start + 1000])
        if not self._incomplete:  # a definition locked by another replica: look again
            self._synced_through = newest
        return changed

    def sync_definition(self, session: Session, definition_id: int) -> None:
        """Sync one definition inside the caller's transaction (so a command that is
        then refused rolls it back with everything else)."""
        rows = session.execute(_sync_candidates().where(ReportDefinition.id == definition_id)).all()
        if rows:
            self._sync_chunk(session, rows)

    def _sync_chunk(self, session: Session, rows: Sequence[Any]) -> int:
        changed = 0
        plans = self.plans.load(session, [(r.id, r.latest_version) for r in rows])
        fresh = [r for r in rows if r.schedule_version is None]
        if fresh:
            firsts = dict(
                session.execute(
                    sa.select(DefinitionVersion.definition_id, DefinitionVersion.created_at).where(
                        DefinitionVersion.definition_id.in_([r.id for r in fresh]),
                        DefinitionVersion.version == 1,
                    )
                )
                .tuples()
                .all()
            )
            now = self.clock.now()
            states = []
            for r in fresh:
                plan = plans.get((r.id, r.latest_version))
                first = firsts.get(r.id, now)
                fresh_state: dict[str, Any] = {
                    "definition_id": r.id,
                    "tenant_id": plan.tenant_id if plan else r.tenant_id,
                    "schedule_version": r.latest_version,
                    "paused": False,
                    "paused_at": None,
                    "updated_at": now,
                    "updated_by": self.name,
                    "error": None,
                    "failures": 0,
                    "failed_at": None,
                }
                try:
                    plan = usable(plan)
                    watermark = initial_watermark(first, plan.schedule)
                    fresh_state.update(watermark=watermark, next_fire_at=next_fire(plan, watermark))
                except Exception as exc:  # a poison definition: recorded, retried later
                    log.warning("definition %d cannot be scheduled: %s", r.id, exc)
                    fresh_state.update(
                        watermark=first,
                        next_fire_at=now + failure_backoff(1),
                        error=describe_failure(exc),
                        failures=1,
                        failed_at=now,
                    )
                states.append(fresh_state)
            insert_many_ignore(session, ScheduleState, states)
            changed += len(states)
        for r in rows:
            if r.schedule_version is None:
                continue
            state = session.scalar(
                self._lock(sa.select(ScheduleState).where(ScheduleState.definition_id == r.id))
            )
            if state is None:
                self._incomplete = True  # another replica holds it right now
                continue
            if state.schedule_version >= r.latest_version:
                continue  # already switched
            now = self.clock.now()
            state.schedule_version = r.latest_version
            state.updated_at = now
            state.updated_by = self.name
            try:
                state.next_fire_at = next_fire(
                    usable(plans.get((r.id, r.latest_version))), state.watermark
                )
                state.error, state.failures = None, 0
            except Exception as exc:  # the new version is poison: recorded, retried later
                log.warning("definition %d cannot be scheduled: %s", r.id, exc)
                state.failures += 1
                state.error, state.failed_at = describe_failure(exc), now
                state.next_fire_at = now + failure_backoff(state.failures)
            changed += 1
        return changed

    def _lock(self, query: Any) -> Any:
        return skip_locked(self.db.dialect, query)

    # -- materialize ------------------------------------------------------------

    def tick(self, now: datetime | None = None, *, sync: bool = True) -> TickResult:
        """Sync (unless ``sync`` is false), then materialize everything due as of
        ``now`` (default: the clock's time at each batch)."""
        if sync:
            self.sync()
        self._passed = set()
        if self.threads == 1:
            result = TickResult()
            self._drain(now, result)
            return result
        results = [TickResult() for _ in range(self.threads)]
        errors: list[BaseException] = []

        def drain(result: TickResult) -> None:
            try:
                self._drain(now, result)
            except BaseException as exc:
                errors.append(exc)

        workers = [threading.Thread(target=drain, args=(r,)) for r in results]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
        if errors:
            raise errors[0]
        total = TickResult()
        for r in results:
            total.definitions += r.definitions
            total.slots += r.slots
            total.inserted += r.inserted
            total.failed += r.failed
            for state, count in r.by_state.items():
                total.by_state[state] = total.by_state.get(state, 0) + count
        return total

    def _drain(self, now: datetime | None, result: TickResult) -> None:
        while True:
            at = now if now is not None else self.clock.now()
            if self._materialize_batch(at, result) < self.batch:
                return

    def _materialize_batch(self, now: datetime, result: TickResult) -> int:
        # Core statements rather than ORM objects: this is the hot path, and a batch is
        # one claim, one plan lookup, one active-run count, one COPY and one
        # executemany of watermark updates.
        table = ScheduleState.__table__.c
        with self.db.session() as session:
            states = session.execute(
                self._lock(
                    sa.select(
                        table.definition_id,
                        table.schedule_version,
                        table.watermark,
                        table.failures,
                    )
                    .where(table.paused.is_(False), table.next_fire_at <= now)
                    .order_by(table.next_fire_at)
                    .limit(self.batch)
                )
            ).all()
            with self._passed_lock:  # each definition once per pass (module docstring)
                states = [s for s in states if s[0] not in self._passed]
                self._passed.update(s[0] for s in states)
            if not states:
                return 0
            plans = self.plans.load(session, [(s[0], s[1]) for s in states])
            active = active_runs(session, [s[0] for s in states])
            work: list[_Work] = []
            failed: dict[int, tuple[int, BaseException]] = {}
            for definition_id, version, watermark, failures in states:
                try:
                    work.append(
                        self._work(
                            definition_id,
                            usable(plans.get((definition_id, version))),
                            watermark,
                            now,
                            active.get(definition_id, ActiveRuns()),
                        )
                    )
                except Exception as exc:  # a poison definition fails alone
                    failed[definition_id] = (failures, exc)
            failures_of = {s[0]: s[3] for s in states}
            try:
                with session.begin_nested():
                    result.inserted += self._write(session, work, now)
            except Exception as exc:  # one definition's rows broke the batch: find it
                log.warning("a batch write failed (%s); writing one definition at a time", exc)
                kept: list[_Work] = []
                for item in work:
                    try:
                        with session.begin_nested():
                            result.inserted += self._write(session, [item], now)
                        kept.append(item)
                    except Exception as alone:
                        failed[item.definition_id] = (failures_of[item.definition_id], alone)
                work = kept
            for item in work:
                result.add(item.decisions)
            for definition_id, (failures, problem) in failed.items():
                self._record_failure(session, definition_id, failures, problem, now)
            crash_point("after_watermark_update")
            result.definitions += len(states)
            result.failed += len(failed)
        crash_point("after_commit")
        return len(states)

    def _work(
        self,
        definition_id: int,
        plan: Plan,
        watermark: datetime,
        now: datetime,
        active: ActiveRuns,
    ) -> _Work:
        """What one definition's pass writes: its rows and its new watermark."""
        cap = max(1, MAX_SLOTS_PER_PASS // len(plan.audiences))  # rows per pass, bounded
        slots = due_slots(plan, watermark, now, limit=cap + 1)
        more = len(slots) > cap
        slots = slots[:cap]
        outcome = decide(slots, now, plan.schedule or ScheduleSpec(), active, more_due=more)
        rows = slot_rows(definition_id, plan, outcome.items, RunKind.scheduled, now)
        if slots:
            watermark = slots[-1].fire_at
        return _Work(
            definition_id=definition_id,
            rows=rows,
            decisions=outcome.items,
            cancel_active=outcome.cancel_active,
            move={"d": definition_id, "w": watermark, "n": next_fire(plan, watermark), "u": now},
        )

    def _write(self, session: Session, work: list[_Work], now: datetime) -> int:
        """Insert the rows of ``work``, request its cancels, move its watermarks."""
        if not work:
            return 0
        table = ScheduleState.__table__.c
        inserted = self._insert(session, [row for item in work for row in item.rows])
        crash_point("after_runs_insert")
        replaced = [item.definition_id for item in work if item.cancel_active]
        if replaced:
            self._request_cancels(session, replaced, now)
        session.connection().execute(
            sa.update(cast(sa.Table, ScheduleState.__table__))
            .where(table.definition_id == sa.bindparam("d"))
            .values(
                watermark=sa.bindparam("w"),
                next_fire_at=sa.bindparam("n"),
                updated_at=sa.bindparam("u"),
                updated_by=self.name,
                error=None,
                failures=0,
            ),
            [item.move for item in work],
        )
        return inserted

    def _record_failure(
        self, session: Session, definition_id: int, failures: int, exc: BaseException, now: datetime
    ) -> None:
        """Record a poison definition's failure and when to try it again."""
        failures += 1
        log.warning(
            "definition %d failed to materialize (%d in a row): %s",
            definition_id,
            failures,
            describe_failure(exc),
        )
        session.execute(
            sa.update(ScheduleState)
            .where(ScheduleState.definition_id == definition_id)
            .values(
                error=describe_failure(exc),
                failures=failures,
                failed_at=now,
                next_fire_at=now + failure_backoff(failures),
                updated_at=now,
                updated_by=self.name,
            )
        )

    def _insert(self, session: Session, rows: list[dict[str, Any]]) -> int:
        return insert_many_ignore(session, Run, rows)

    def _request_cancels(self, session: Session, definition_ids: list[int], now: datetime) -> None:
        # Runs queued by this very pass are excluded: they are the replacements.
        targets = session.execute(
            sa.select(Run.id, Run.tenant_id).where(
                Run.definition_id.in_(definition_ids),
                Run.state.in_([s.value for s in ACTIVE_STATES]),
                Run.created_at < now,
                Run.kind != RunKind.test.value,  # a test run is not the schedule's to replace
            )
        ).all()
        for run_id, tenant_id in targets:
            session.add(
                CancelRequest(
                    tenant_id=tenant_id,
                    run_id=run_id,
                    reason=CancelReason.replaced,
                    requested_by=self.name,
                    requested_at=now,
                )
            )


@dataclass
class _Work:
    """One definition's share of a pass (see :meth:`Materializer._work`)."""

    definition_id: int
    rows: list[dict[str, Any]]
    decisions: list[Decision]
    cancel_active: bool
    move: dict[str, Any]


def _sync_candidates() -> Any:
    """Published definitions with their scheduler state's compiled version (or None)."""
    return (
        sa.select(
            ReportDefinition.id,
            ReportDefinition.tenant_id,
            ReportDefinition.latest_version,
            ScheduleState.schedule_version,
        )
        .outerjoin(ScheduleState, ScheduleState.definition_id == ReportDefinition.id)
        .where(ReportDefinition.latest_version > 0)
    )
