"""Trying a report without sending it: test runs and dry runs of a slot.

- A **test run** (``nbcast run NAME --test``) is a run of kind ``test`` of the latest
  version (or of ``version``), one per audience like a manual run, with the same
  parameters a manual run now would get (the version's, then ``-p`` values, then the
  audience's own) and the same period (now, and the interval of the slot that holds
  it). It is executed and rendered like any run, and delivered only to
  the addresses it was asked for (``to``; by default the caller's own address, when
  the caller is a member with one; none at all otherwise — the renditions are still
  made, and shown in the run's detail). Its message says ``TEST`` in the subject and
  in a banner above the report; the rendered files themselves are the report's own.
- A **dry run** of a slot (``--slot KEY`` or ``--at INSTANT`` with ``--test``) runs
  exactly what that slot will run — or ran: the version (the latest, or ``version``),
  each audience's parameters with bindings resolved for the slot's period, its row
  filter and the slot's context — built by :func:`nbcast.scheduler.slots.slot_rows`,
  the function that makes the scheduler's own rows, so the two cannot drift (a test
  compares them). ``--at`` names the slot that fires at that instant or the first
  after it that runs. ``recipient`` (``--as``) keeps only the audience of the
  subscriptions to
  that recipient: "what the CFO gets on Monday". ``-p`` values are refused with a slot:
  the slot decides them. A slot the schedule skips (a DST gap) is refused: it never
  runs.

A test run counts for nothing but itself: the scheduler's overlap policy does not see
it, the SLA monitor does not count it, delivery neither supersedes with it nor takes
its content as the ``only_if: changed`` baseline, and the runs list shows its kind
(``test``). Its context says ``test: true`` (:func:`nbcast.context`), the only thing
in which a dry run's context differs from its slot's. Like a manual run it needs the
``author`` role and leaves an ``run.requested`` audit entry (with ``test`` and the
addresses).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.definitions.compiler import Slot, SlotStatus
from nbcast.definitions.parameters import schema_from_json, validate_parameters
from nbcast.definitions.queries import definition_row, version_row
from nbcast.errors import (
    ConfigError,
    ParameterValueError,
    ScheduleError,
    UnknownDefinitionError,
)
from nbcast.limits import WALL_TIME_MAX, WALL_TIME_MIN, clip
from nbcast.scheduler.models import Run, RunKind, RunState
from nbcast.scheduler.policies import Decision
from nbcast.scheduler.slots import Plan, PlanCache, manual_rows, slot_rows, usable
from nbcast.tenancy import audit
from nbcast.tenancy.members import EMAIL
from nbcast.tenancy.models import User
from nbcast.tenancy.roles import Role, require

__all__ = ["MAX_TEST_ADDRESSES", "TestRun", "find_slot", "queue_test_run"]

MAX_TEST_ADDRESSES = 10
"""A test run goes to at most this many addresses."""

_SLOT_SEARCH = timedelta(days=2)
"""A slot key is a local wall time: its instant lies within this of the key read as UTC."""


@dataclass(frozen=True)
class TestRun:
    """One queued test run: its id, audience, the slot it dry-runs and its addresses."""

    __test__ = False  # not a pytest class

    id: int
    definition: str
    version: int
    audience: str
    slot_key: str | None
    to: tuple[str, ...]

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "definition": self.definition,
            "version": self.version,
            "kind": RunKind.test.value,
            "state": RunState.QUEUED.value,
            "audience": self.audience,
            "slot_key": self.slot_key,
            "to": list(self.to),
        }


def queue_test_run(
    db: Database,
    clock: Clock,
    caller: Caller,
    name: str,
    parameters: dict[str, Any],
    *,
    to: Sequence[str] | None = None,
    slot: str | None = None,
    at: datetime | None = None,
    recipient: str | None = None,
    version: int | None = None,
) -> list[TestRun]:
    """Queue test runs of ``name`` (module docstring); return them, base audience first.

    ``slot`` or ``at`` make it a dry run of that slot (module docstring).
    """
    now = clock.now()
    if at is not None and (at.tzinfo is None or at.utcoffset() is None):
        raise ScheduleError("--at must carry an offset")
    addresses = _addresses(to)
    with db.session() as session:
        require(session, caller, Role.author, "running a report", now)
        definition = definition_row(session, caller, name)
        stored = version_row(session, definition, version)
        if stored is None:
            what = "no published version" if version is None else f"no version {version}"
            raise UnknownDefinitionError(f"{definition.name!r} has {what}")
        plan = usable(
            PlanCache()
            .load(session, [(definition.id, stored.version)])
            .get((definition.id, stored.version))
        )
        if addresses is None:
            addresses = _own_address(session, definition.tenant_id, caller)
        wanted = _audiences(plan, recipient)
        if slot is not None or at is not None:
            if parameters:
                raise ParameterValueError(
                    ("a dry run of a slot runs what the slot would: -p cannot change it",)
                )
            found = find_slot(plan, slot=slot, at=at)
            rows = dry_run_rows(definition.id, plan, found, now)
            slot_key: str | None = found.key
        else:
            given = validate_parameters(
                schema_from_json(stored.parameter_schema), parameters, bindings=True
            )
            rows = [
                {**row, "context": {**row["context"], "test": True} if row["context"] else None}
                for row in manual_rows(definition.id, plan, given, now, now, RunKind.test)
            ]
            slot_key = None
        runs = []
        for row in rows:
            if row["audience"] not in wanted:
                continue
            run = Run(**{**row, "test_to": list(addresses)})
            session.add(run)
            runs.append(run)
        session.flush()
        for run in runs:
            audit.record(
                session,
                definition.tenant_id,
                actor=caller.user,
                action=audit.Action.run_requested,
                obj=f"run:{run.id}",
                at=now,
                details={
                    "definition": definition.name,
                    "version": stored.version,
                    "parameters": run.parameters,
                    "test": True,
                    "to": list(addresses),
                    **({"slot": slot_key} if slot_key else {}),
                    **({"audience": run.audience} if run.audience else {}),
                },
            )
        return [
            TestRun(run.id, definition.name, stored.version, run.audience, slot_key, addresses)
            for run in runs
        ]


def dry_run_rows(definition_id: int, plan: Plan, slot: Slot, now: datetime) -> list[dict[str, Any]]:
    """The rows of a dry run of ``slot``: the scheduler's own rows for it
    (:func:`~nbcast.scheduler.slots.slot_rows`), made test runs — no slot of their own
    (the slot's row may exist or come), not serial, due now, ``test`` in the context."""
    rows = slot_rows(definition_id, plan, [Decision(slot, RunState.QUEUED)], RunKind.scheduled, now)
    return [
        {
            **row,
            "kind": RunKind.test.value,
            "slot_key": None,
            "fire_at": now,
            "serial": False,
            "not_before": now,
            "created_at": now,
            "context": {**row["context"], "test": True} if row["context"] else None,
        }
        for row in rows
    ]


def find_slot(plan: Plan, *, slot: str | None = None, at: datetime | None = None) -> Slot:
    """The slot of ``plan``'s schedule with key ``slot``, or the first firing at or
    after ``at``; :class:`~nbcast.errors.ScheduleError` when there is none, or when
    the schedule skips it."""
    schedule = plan.compiled
    if schedule is None:
        raise ScheduleError("the definition has no schedule: a test run has no slot to dry-run")
    found: Slot | None = None
    if slot is not None:
        wall = _wall(slot)
        for candidate in schedule.slots(wall - _SLOT_SEARCH, wall + _SLOT_SEARCH):
            if candidate.key == slot:
                found = candidate
                break
        if found is None:
            raise ScheduleError(f"the schedule has no slot {clip(slot)}")
    else:
        assert at is not None
        low = WALL_TIME_MIN.replace(tzinfo=UTC)
        high = WALL_TIME_MAX.replace(tzinfo=UTC)
        if not low <= at <= high:
            raise ScheduleError(f"--at {at.isoformat()} is out of range")
        upcoming = schedule.slots(at, min(at + timedelta(days=3660), high))
        found = next((s for s in upcoming if s.status is not SlotStatus.skipped), None)
        if found is None:
            raise ScheduleError(f"the schedule fires no slot at or after {at.isoformat()}")
    if found.status is SlotStatus.skipped:
        raise ScheduleError(
            f"slot {found.key} is skipped by the schedule ({found.reason}): it never runs"
        )
    return found


def _wall(key: str) -> datetime:
    """A slot key's wall time, read as UTC (only to bound the search)."""
    text = key.split("~", 1)[0].rstrip("Z")
    try:
        wall = datetime.fromisoformat(text)
    except ValueError:
        raise ScheduleError(
            f"slot {clip(key)} is not a slot key (YYYY-MM-DDTHH:MM, as `nbcast runs list` shows)"
        ) from None
    if wall.tzinfo is not None and not key.endswith("Z"):
        raise ScheduleError(f"slot {clip(key)}: a slot key is a wall time, without an offset")
    wall = wall.replace(tzinfo=None)
    if not WALL_TIME_MIN + _SLOT_SEARCH <= wall <= WALL_TIME_MAX - _SLOT_SEARCH:
        raise ScheduleError(f"slot {clip(key)} is out of range")
    return wall.replace(tzinfo=UTC)


def _addresses(to: Sequence[str] | None) -> tuple[str, ...] | None:
    """The addresses asked for, checked (None: none given, the caller's own applies)."""
    if to is None:
        return None
    seen: list[str] = []
    for address in to:
        text = address.strip()
        if not EMAIL.fullmatch(text):
            raise ConfigError(f"--to {clip(address)} is not an email address")
        if text not in seen:
            seen.append(text)
    if len(seen) > MAX_TEST_ADDRESSES:
        raise ConfigError(f"a test run goes to at most {MAX_TEST_ADDRESSES} addresses")
    return tuple(seen)


def _own_address(session: Session, tenant_id: int, caller: Caller) -> tuple[str, ...]:
    """The caller's own address, when the caller is a member with one."""
    email = session.scalar(
        sa.select(User.email).where(User.tenant_id == tenant_id, User.name == caller.user)
    )
    return (email,) if email else ()


def _audiences(plan: Plan, recipient: str | None) -> set[str]:
    """The audiences to try: all, or the one of ``recipient``'s subscriptions."""
    if recipient is None:
        return {audience.key for audience in plan.audiences}
    wanted = recipient.strip().casefold()
    keys = {sub.audience for sub in plan.spec.subscriptions if sub.to.strip().casefold() == wanted}
    if not keys:
        raise ConfigError(f"--as {clip(recipient)}: no subscription goes to that recipient")
    if len(keys) > 1:
        raise ConfigError(
            f"--as {clip(recipient)}: that recipient has subscriptions in {len(keys)} audiences"
        )
    return keys
