"""What people ask of the scheduler: pause, resume, backfill, a manual run, a rerun.

- **Pause** records nothing new until resume. **Resume** first materializes, with the
  normal policies, the slots that fell due before the pause but were not yet
  materialized; then records every slot that fell during the pause SKIPPED
  ``paused``; then carries on from now. All in one transaction.
- **Backfill** materializes the slots whose fire time lies in ``[from, to)`` as runs
  of kind ``backfill``: QUEUED (a DST-gap slot SKIPPED ``dst_gap``), without
  misfire or overlap policy — a backfill is an explicit request to run those slots.
  A slot that already has a row keeps it (``ON CONFLICT DO NOTHING``); the result
  says how many were new. The range must end at or before the watermark: later
  slots belong to the scheduler. Like the scheduler's, a backfill slot has one row
  per audience (:mod:`nbcast.scheduler.slots`); at most
  :data:`~nbcast.limits.MAX_BACKFILL_SLOTS` rows in all.
- **Manual run**: kind ``manual``, no slot, the latest version, one run per
  audience; each run's parameters are the version's, overridden by the validated
  ``-p`` values, overridden by its audience's own (a recipient's scope is not a
  manual run's to change); not subject to overlap.
- **Rerun**: kind ``rerun``, a finished run again with its version, parameters,
  context, audience and row filter (:func:`rerun_run`).

Each takes the :class:`~nbcast.access.Caller`, acts in its tenant only, needs the
``author`` role there (:mod:`nbcast.tenancy.roles`) and leaves an audit entry in
the transaction of the change (:mod:`nbcast.tenancy.audit`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import date, datetime
from itertools import islice
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.clock import Clock
from nbcast.db import Database, insert_many_ignore
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.parameters import schema_from_json, validate_parameters
from nbcast.definitions.queries import definition_row, version_row
from nbcast.definitions.transitions import range_bound
from nbcast.errors import ConflictError, ScheduleError, UnknownDefinitionError
from nbcast.limits import MAX_BACKFILL_SLOTS
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import ACTIVE_STATES, Run, RunKind, RunState, ScheduleState
from nbcast.scheduler.policies import ActiveRuns, Decision, SlotReason, decide
from nbcast.scheduler.runs import own_run
from nbcast.scheduler.slots import (
    EPSILON,
    active_runs,
    due_slots,
    manual_rows,
    next_fire,
    slot_rows,
    usable,
)
from nbcast.tenancy import audit
from nbcast.tenancy.roles import Role, require

__all__ = ["backfill", "pause", "rerun_run", "resume", "run_now", "run_now_all"]


def _definition(
    session: Session, caller: Caller, name: str, doing: str, now: datetime
) -> ReportDefinition:
    """The caller's definition ``name`` (another tenant's is "not found"), if the
    caller may change it (an author)."""
    require(session, caller, Role.author, doing, now)
    return definition_row(session, caller, name)


def _audit(
    session: Session,
    caller: Caller,
    tenant_id: int,
    action: audit.Action,
    obj: str,
    now: datetime,
    **details: Any,
) -> None:
    audit.record(
        session, tenant_id, actor=caller.user, action=action, obj=obj, at=now, details=details
    )


def _state(
    db: Database, session: Session, materializer: Materializer, definition: ReportDefinition
) -> ScheduleState:
    # Brought up to date in this transaction: a refused command writes nothing.
    materializer.sync_definition(session, definition.id)
    query = sa.select(ScheduleState).where(ScheduleState.definition_id == definition.id)
    if db.dialect == "postgresql":
        query = query.with_for_update()
    state = session.scalar(query)
    if state is None:
        raise ScheduleError(
            f"{definition.name!r} has no scheduler state yet; run `nbcast scheduler tick` once"
        )
    return state


def pause(db: Database, clock: Clock, caller: Caller, name: str) -> bool:
    """Pause definition ``name``; False if it was already paused."""
    by = caller.user
    materializer = Materializer(db, clock, name=by)
    now = clock.now()
    with db.session() as session:
        definition = _definition(session, caller, name, "pausing a report", now)
        state = _state(db, session, materializer, definition)
        if state.paused:
            return False
        state.paused, state.paused_at = True, now
        state.updated_at, state.updated_by = now, by
        _audit(
            session,
            caller,
            definition.tenant_id,
            audit.Action.definition_paused,
            f"definition:{definition.name}",
            now,
        )
        return True


@dataclass(frozen=True)
class ResumeResult:
    """How many slots resume recorded: normally decided, and SKIPPED ``paused``."""

    caught_up: int
    skipped_paused: int


def resume(db: Database, clock: Clock, caller: Caller, name: str) -> ResumeResult | None:
    """Resume definition ``name`` (module docstring); None if it was not paused."""
    by = caller.user
    materializer = Materializer(db, clock, name=by)
    now = clock.now()
    with db.session() as session:
        definition = _definition(session, caller, name, "resuming a report", now)
        state = _state(db, session, materializer, definition)
        if not state.paused:
            return None
        plan = usable(
            materializer.plans.load(session, [(definition.id, state.schedule_version)]).get(
                (definition.id, state.schedule_version)
            )
        )
        paused_at = state.paused_at or now
        before = (
            due_slots(plan, state.watermark, min(paused_at, now))
            if paused_at > state.watermark
            else []
        )
        active = active_runs(session, [definition.id]).get(definition.id, ActiveRuns())
        outcome = decide(before, now, plan.schedule, active) if before and plan.schedule else None
        rows = slot_rows(
            definition.id, plan, outcome.items if outcome else [], RunKind.scheduled, now
        )
        watermark = before[-1].fire_at if before else state.watermark
        during = due_slots(plan, watermark, now)
        skipped = [Decision(s, RunState.SKIPPED, SlotReason.paused) for s in during]
        rows += slot_rows(definition.id, plan, skipped, RunKind.scheduled, now)
        insert_many_ignore(session, Run, rows)
        if during:
            watermark = during[-1].fire_at
        state.watermark = watermark
        state.next_fire_at = next_fire(plan, watermark)
        state.paused, state.paused_at = False, None
        state.updated_at, state.updated_by = now, by
        _audit(
            session,
            caller,
            definition.tenant_id,
            audit.Action.definition_resumed,
            f"definition:{definition.name}",
            now,
            caught_up=len(before),
            skipped_paused=len(during),
        )
        return ResumeResult(len(before), len(during))


@dataclass(frozen=True)
class BackfillResult:
    """Slots in the range, and how many rows were new."""

    slots: int
    inserted: int


def backfill(
    db: Database,
    clock: Clock,
    caller: Caller,
    name: str,
    start: datetime | date,
    end: datetime | date,
) -> BackfillResult:
    """Materialize ``[start, end)`` of ``name``'s schedule as backfill runs. A bare
    date is the start of that day in the schedule's zone
    (:func:`~nbcast.definitions.transitions.range_bound`)."""
    materializer = Materializer(db, clock, name=caller.user)
    now = clock.now()
    with db.session() as session:
        definition = _definition(session, caller, name, "backfilling a report", now)
        state = _state(db, session, materializer, definition)
        plan = usable(
            materializer.plans.load(session, [(definition.id, state.schedule_version)]).get(
                (definition.id, state.schedule_version)
            )
        )
        if plan.compiled is None:
            raise ScheduleError(f"{name!r} has no schedule to backfill")
        start, end = range_bound(start, plan.zone), range_bound(end, plan.zone)
        if start >= end:
            raise ScheduleError("backfill: --from must be before --to")
        if end > state.watermark + EPSILON:
            raise ScheduleError(
                f"backfill: --to {end.isoformat()} is after {name!r}'s watermark "
                f"{state.watermark.isoformat()}; later slots are the scheduler's"
            )
        cap = max(1, MAX_BACKFILL_SLOTS // len(plan.audiences))  # rows, bounded
        slots = list(islice(plan.compiled.slots(start, end), cap + 1))
        if len(slots) > cap:
            per = f" ({len(plan.audiences)} audiences each)" if len(plan.audiences) > 1 else ""
            raise ScheduleError(f"backfill: more than {cap:,} slots{per} in the range; narrow it")
        decisions = [
            Decision(s, RunState.QUEUED)
            if s.reason is None
            else Decision(s, RunState.SKIPPED, s.reason)
            for s in slots
        ]
        rows = slot_rows(definition.id, plan, decisions, RunKind.backfill, now)
        inserted = insert_many_ignore(session, Run, rows)
        _audit(
            session,
            caller,
            definition.tenant_id,
            audit.Action.backfill_requested,
            f"definition:{definition.name}",
            now,
            start=start.isoformat(),
            end=end.isoformat(),
            slots=len(slots),
            inserted=inserted,
        )
        return BackfillResult(len(slots), inserted)


def run_now(
    db: Database,
    clock: Clock,
    caller: Caller,
    name: str,
    parameters: dict[str, Any],
    *,
    at: datetime | None = None,
) -> int:
    """Queue manual runs of ``name``'s latest version (:func:`run_now_all`); return
    the id of the first: the base audience's, when the definition has one."""
    return run_now_all(db, clock, caller, name, parameters, at=at)[0]


def run_now_all(
    db: Database,
    clock: Clock,
    caller: Caller,
    name: str,
    parameters: dict[str, Any],
    *,
    at: datetime | None = None,
) -> list[int]:
    """Queue a manual run of ``name``'s latest version for each of its audiences; return
    their ids, in audience order (the base audience first).

    ``parameters`` override the version's (each may be a slot binding); an audience's
    own parameters override both (module docstring). The runs' period is ``at``
    (default: now) and the interval of the slot that holds it
    (:func:`nbcast.scheduler.period.manual_period`); bindings are resolved against it.
    """
    now = clock.now()
    if at is not None and (at.tzinfo is None or at.utcoffset() is None):
        raise ScheduleError("--at must carry an offset")
    with db.session() as session:
        definition = _definition(session, caller, name, "running a report", now)
        version = version_row(session, definition)
        if version is None:
            raise UnknownDefinitionError(f"{name!r} has no published version")
        plan = usable(
            Materializer(db, clock)
            .plans.load(session, [(definition.id, version.version)])
            .get((definition.id, version.version))
        )
        schema = schema_from_json(version.parameter_schema)
        given = validate_parameters(schema, parameters, bindings=True)
        runs = [Run(**row) for row in manual_rows(definition.id, plan, given, at or now, now)]
        session.add_all(runs)
        session.flush()
        for run in runs:
            details: dict[str, Any] = {"audience": run.audience} if run.audience else {}
            _audit(
                session,
                caller,
                definition.tenant_id,
                audit.Action.run_requested,
                f"run:{run.id}",
                now,
                definition=definition.name,
                version=version.version,
                parameters=run.parameters,
                **details,
            )
        return [run.id for run in runs]


def rerun_run(db: Database, clock: Clock, caller: Caller, run_id: int) -> int:
    """Queue run ``run_id`` again; return the new run's id.

    The rerun (kind ``rerun``, ``rerun_of`` the original) executes the same version
    with the same literal parameters, the same frozen context — slot, nominal time,
    data interval — and the same audience and row filter, so it reports what the
    original reported, to the same recipients (or should have: a
    FAILED, CANCELLED, SKIPPED or MISSED slot can be rerun as well). It has no slot of
    its own (the slot's row stays the original's) and, like a manual run, is not held
    back by the overlap policy. Its deliveries are never superseded or stale. A run
    still queued or running is a :class:`~nbcast.errors.ConflictError`; another
    tenant's, :class:`~nbcast.errors.UnknownRunError`.
    """
    now = clock.now()
    with db.session() as session:
        require(session, caller, Role.author, "rerunning a run", now)
        original = own_run(session, caller, run_id)
        if RunState(original.state) in ACTIVE_STATES:
            raise ConflictError(
                f"run {run_id} is {original.state}: cancel it first, or wait for it to end"
            )
        rerun = Run(
            tenant_id=original.tenant_id,
            definition_id=original.definition_id,
            version_id=original.version_id,
            version=original.version,
            kind=RunKind.rerun.value,
            slot_key=None,
            fire_at=now,
            state=RunState.QUEUED.value,
            reason=None,
            parameters=dict(original.parameters),
            context=dict(original.context) if original.context is not None else None,
            # Same recipients, same data: a rerun of a scoped run stays scoped.
            audience=original.audience,
            row_filter=dict(original.row_filter) if original.row_filter else None,
            rerun_of=original.id,
            serial=False,
            not_before=now,
            created_at=now,
        )
        session.add(rerun)
        session.flush()
        _audit(
            session,
            caller,
            original.tenant_id,
            audit.Action.run_rerun,
            f"run:{rerun.id}",
            now,
            rerun_of=original.id,
        )
        return rerun.id
