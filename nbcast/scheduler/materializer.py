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
   the watermark up to now, decides it (:mod:`nbcast.scheduler.policies`), inserts
   the rows with ``INSERT … ON CONFLICT DO NOTHING`` on ``UNIQUE(definition_id,
   slot_key)``, and advances the watermark and ``next_fire_at`` **in the same
   transaction**. A crash anywhere before the commit leaves the watermark where it
   was, so the next pass redoes the work; the unique constraint is the last guard
   against a duplicate.

Runs pin the version whose schedule produced them. A run's ``not_before`` is its
fire time plus a deterministic share of the schedule's ``jitter`` (a hash of the
definition and slot key), so replays compute the same value.
"""

from __future__ import annotations

import hashlib
import logging
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast
from zoneinfo import ZoneInfo

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import Clock
from nbcast.db import Database, insert_many_ignore
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.parameters import schema_from_json
from nbcast.definitions.spec import OverlapPolicy, ReportSpec, ScheduleSpec, parse_spec
from nbcast.executor.models import ACTIVE_STATES, CancelRequest, Run, RunKind, RunState
from nbcast.faults import crash_point
from nbcast.scheduler.compiler import CompiledSchedule, Slot, compile_schedule
from nbcast.scheduler.models import ScheduleState
from nbcast.scheduler.policies import ActiveRuns, Decision, decide

__all__ = ["Materializer", "TickResult", "initial_watermark"]

log = logging.getLogger(__name__)
_EPSILON = timedelta(microseconds=1)


@dataclass
class TickResult:
    """What one pass did."""

    definitions: int = 0
    slots: int = 0
    inserted: int = 0
    by_state: dict[str, int] = field(default_factory=dict)

    def add(self, decisions: Iterable[Decision]) -> None:
        """Count ``decisions`` by resulting state."""
        for d in decisions:
            self.slots += 1
            self.by_state[d.state.value] = self.by_state.get(d.state.value, 0) + 1


@dataclass(frozen=True)
class _Plan:
    """A compiled version: its spec, schedule and schema-checked parameters."""

    version_id: int
    version: int
    tenant_id: int
    spec: ReportSpec
    schedule: ScheduleSpec | None
    compiled: CompiledSchedule | None


def initial_watermark(first_publish: datetime, schedule: ScheduleSpec | None) -> datetime:
    """Where a new definition's materialization starts (module docstring)."""
    if schedule is None or schedule.start is None or schedule.every is not None:
        return first_publish
    start = schedule.start.replace(tzinfo=ZoneInfo(schedule.timezone))
    # The watermark is exclusive; a slot exactly at ``start`` must be materialized.
    return max(first_publish, start.astimezone(first_publish.tzinfo) - _EPSILON)


def _jitter(schedule: ScheduleSpec, definition_id: int, key: str) -> timedelta:
    if not schedule.jitter:
        return timedelta(0)
    digest = hashlib.sha256(f"{definition_id}/{key}".encode()).digest()
    share = int.from_bytes(digest[:8], "big") / 2**64
    return timedelta(seconds=int(schedule.jitter.total_seconds() * share))


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
        self._plans: dict[int, _Plan] = {}
        self._synced_through: int | None = None
        self._incomplete = False

    # -- plans ------------------------------------------------------------------

    def plan(
        self,
        version_id: int,
        version: int,
        tenant_id: int,
        block: dict[str, Any],
        schema: list[dict[str, Any]],
    ) -> _Plan:
        """The compiled form of one stored version (cached by version id)."""
        cached = self._plans.get(version_id)
        if cached is not None:
            return cached
        spec = parse_spec(block, schema_from_json(schema))
        compiled = compile_schedule(spec.schedule) if spec.schedule else None
        plan = _Plan(version_id, version, tenant_id, spec, spec.schedule, compiled)
        if len(self._plans) > 100_000:
            self._plans.clear()
        self._plans[version_id] = plan
        return plan

    def _plan_rows(
        self, session: Session, keys: Sequence[tuple[int, int]]
    ) -> dict[tuple[int, int], _Plan]:
        """Plans for (definition_id, version) pairs, loading uncached versions at once."""
        plans: dict[tuple[int, int], _Plan] = {}
        wanted = set(keys)
        ids = sorted({definition_id for definition_id, _ in wanted})
        for start in range(0, len(ids), 1000):  # bounded IN lists
            # A plain IN on definition_id uses the index; a row-value IN does not.
            rows = session.execute(
                sa.select(
                    DefinitionVersion.id,
                    DefinitionVersion.definition_id,
                    DefinitionVersion.version,
                    DefinitionVersion.tenant_id,
                    DefinitionVersion.spec,
                    DefinitionVersion.parameter_schema,
                ).where(
                    DefinitionVersion.definition_id.in_(ids[start : start + 1000]),
                    DefinitionVersion.version.in_({v for _, v in wanted}),
                )
            ).all()
            for r in rows:
                if (r.definition_id, r.version) in wanted:
                    plans[(r.definition_id, r.version)] = self.plan(
                        r.id, r.version, r.tenant_id, r.spec, r.parameter_schema
                    )
        return plans

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
                sa.select(
                    ReportDefinition.id,
                    ReportDefinition.latest_version,
                    ScheduleState.schedule_version,
                )
                .outerjoin(ScheduleState, ScheduleState.definition_id == ReportDefinition.id)
                .where(
                    sa.or_(
                        ScheduleState.definition_id.is_(None),
                        ScheduleState.schedule_version < ReportDefinition.latest_version,
                    )
                )
                .where(ReportDefinition.latest_version > 0)
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

    def _sync_chunk(self, session: Session, rows: Sequence[Any]) -> int:
        changed = 0
        plans = self._plan_rows(session, [(r.id, r.latest_version) for r in rows])
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
                plan = plans[(r.id, r.latest_version)]
                watermark = initial_watermark(firsts[r.id], plan.schedule)
                states.append(
                    {
                        "definition_id": r.id,
                        "tenant_id": plan.tenant_id,
                        "schedule_version": r.latest_version,
                        "watermark": watermark,
                        "next_fire_at": _next(plan, watermark),
                        "paused": False,
                        "paused_at": None,
                        "updated_at": now,
                        "updated_by": self.name,
                    }
                )
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
            plan = plans[(r.id, r.latest_version)]
            state.schedule_version = r.latest_version
            state.next_fire_at = _next(plan, state.watermark)
            state.updated_at = self.clock.now()
            state.updated_by = self.name
            changed += 1
        return changed

    def _lock(self, query: Any) -> Any:
        if self.db.dialect == "postgresql":
            return query.with_for_update(skip_locked=True)
        return query

    # -- materialize ------------------------------------------------------------

    def tick(self, now: datetime | None = None, *, sync: bool = True) -> TickResult:
        """Sync (unless ``sync`` is false), then materialize everything due as of
        ``now`` (default: the clock's time at each batch)."""
        if sync:
            self.sync()
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
                    sa.select(table.definition_id, table.schedule_version, table.watermark)
                    .where(table.paused.is_(False), table.next_fire_at <= now)
                    .order_by(table.next_fire_at)
                    .limit(self.batch)
                )
            ).all()
            if not states:
                return 0
            plans = self._plan_rows(session, [(s[0], s[1]) for s in states])
            active = self._active(session, [s[0] for s in states])
            rows: list[dict[str, Any]] = []
            replaced: list[int] = []
            moves: list[dict[str, Any]] = []
            for definition_id, version, watermark in states:
                plan = plans[(definition_id, version)]
                slots = _due(plan, watermark, now)
                outcome = decide(
                    slots,
                    now,
                    plan.schedule or ScheduleSpec(),
                    active.get(definition_id, ActiveRuns()),
                )
                rows.extend(_rows(definition_id, plan, outcome.items, RunKind.scheduled, now))
                if outcome.cancel_active:
                    replaced.append(definition_id)
                result.add(outcome.items)
                if slots:
                    watermark = slots[-1].fire_at
                moves.append(
                    {"d": definition_id, "w": watermark, "n": _next(plan, watermark), "u": now}
                )
            result.inserted += self._insert(session, rows)
            crash_point("after_runs_insert")
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
                ),
                moves,
            )
            crash_point("after_watermark_update")
            result.definitions += len(states)
        crash_point("after_commit")
        return len(states)

    def _insert(self, session: Session, rows: list[dict[str, Any]]) -> int:
        return insert_many_ignore(session, Run, rows)

    def _active(self, session: Session, ids: list[int]) -> dict[int, ActiveRuns]:
        counts: dict[int, ActiveRuns] = {}
        rows = session.execute(
            sa.select(Run.definition_id, Run.state, sa.func.count())
            .where(Run.definition_id.in_(ids), Run.state.in_([s.value for s in ACTIVE_STATES]))
            .group_by(Run.definition_id, Run.state)
        ).all()
        for definition_id, state, count in rows:
            current = counts.get(definition_id, ActiveRuns())
            if state == RunState.QUEUED:
                current = ActiveRuns(current.queued + count, current.started)
            else:
                current = ActiveRuns(current.queued, current.started + count)
            counts[definition_id] = current
        return counts

    def _request_cancels(self, session: Session, definition_ids: list[int], now: datetime) -> None:
        # Runs queued by this very pass are excluded: they are the replacements.
        targets = session.execute(
            sa.select(Run.id, Run.tenant_id).where(
                Run.definition_id.in_(definition_ids),
                Run.state.in_([s.value for s in ACTIVE_STATES]),
                Run.created_at < now,
            )
        ).all()
        for run_id, tenant_id in targets:
            session.add(
                CancelRequest(
                    tenant_id=tenant_id,
                    run_id=run_id,
                    reason="replaced",
                    requested_by=self.name,
                    requested_at=now,
                )
            )


def _next(plan: _Plan, watermark: datetime) -> datetime | None:
    return plan.compiled.next_fire_after(watermark) if plan.compiled else None


def _due(plan: _Plan, watermark: datetime, now: datetime) -> list[Slot]:
    if plan.compiled is None:
        return []
    return list(plan.compiled.slots(watermark + _EPSILON, now + _EPSILON))


def _rows(
    definition_id: int, plan: _Plan, decisions: Iterable[Decision], kind: RunKind, now: datetime
) -> list[dict[str, Any]]:
    schedule = plan.schedule or ScheduleSpec()
    return [
        {
            "tenant_id": plan.tenant_id,
            "definition_id": definition_id,
            "version_id": plan.version_id,
            "version": plan.version,
            "kind": kind.value,
            "slot_key": d.slot.key,
            "fire_at": d.slot.fire_at,
            "state": d.state.value,
            "reason": d.reason,
            "parameters": plan.spec.parameters,
            "serial": kind is RunKind.backfill or schedule.overlap is not OverlapPolicy.allow,
            "not_before": d.slot.fire_at + _jitter(schedule, definition_id, d.slot.key),
            "created_at": now,
        }
        for d in decisions
    ]
