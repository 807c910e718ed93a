"""Misfire and overlap decisions: which due slots run, and why the others don't.

A pure function of the due slots, the instant of materialization, the schedule's
policies and the definition's active runs, so it is tested exhaustively without a
database (``tests/scheduler/test_policies.py``).

Order of decisions for the slots due at one materialization (fire time ≤ now):

1. A slot the compiler marked skipped (a DST gap) is SKIPPED ``dst_gap``.
2. **Misfire.** A slot is *missed* when it is materialized later than its fire time
   plus ``grace``.

   - ``run_latest``: the newest due slot is a candidate to run (missed or not);
     every earlier missed slot is MISSED ``superseded``.
   - ``run_all``: missed slots are candidates oldest first, up to ``max_catchup``;
     the newer missed ones beyond the cap are MISSED ``catchup_cap``.
   - ``skip``: every missed slot is MISSED ``misfire``.

   Slots still within grace are always candidates.
3. **Overlap**, over the candidates in fire order. A definition is *active* while
   it has a run QUEUED, LEASED or RUNNING — counting runs queued earlier in the same
   materialization, so catch-up goes through the overlap policy too (combine
   ``run_all`` with ``buffer_all`` to run every missed slot, one after another).

   - ``skip``: a candidate that finds the definition active is SKIPPED ``overlap``.
   - ``allow``: every candidate is QUEUED.
   - ``buffer_one``: QUEUED if no run of the definition is waiting in QUEUED
     (one may be leased or running); otherwise SKIPPED ``overlap``.
   - ``buffer_all``: every candidate is QUEUED; the executor runs a definition's
     ``buffer_all`` runs one at a time.
   - ``replace``: the newest candidate is QUEUED and every active run gets a cancel
     request (the executor honours it); earlier candidates of the same
     materialization are SKIPPED ``overlap``, since they would be replaced at once.

Every slot gets exactly one decision.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from nbcast.definitions.compiler import Slot, SlotReason, SlotStatus
from nbcast.definitions.spec import MisfirePolicy, OverlapPolicy, ScheduleSpec
from nbcast.scheduler.models import RunState

__all__ = ["ActiveRuns", "Decision", "SlotReason", "decide"]


@dataclass(frozen=True, slots=True)
class ActiveRuns:
    """How many of the definition's runs are waiting (QUEUED) and under way."""

    queued: int = 0
    started: int = 0
    """LEASED or RUNNING."""

    @property
    def any(self) -> bool:
        """Whether the definition counts as active for overlap."""
        return self.queued + self.started > 0


@dataclass(frozen=True, slots=True)
class Decision:
    """What becomes of one slot."""

    slot: Slot
    state: RunState
    reason: str | None = None


@dataclass(frozen=True, slots=True)
class Decisions:
    """The decisions for a batch of due slots, and whether active runs are replaced."""

    items: list[Decision]
    cancel_active: bool = False


def decide(
    slots: Sequence[Slot],
    now: datetime,
    schedule: ScheduleSpec,
    active: ActiveRuns,
    *,
    more_due: bool = False,
) -> Decisions:
    """Decide every due slot in ``slots`` (in fire order) as the module docstring says.

    ``more_due`` says that later slots are due too but are decided in a later chunk
    (a pass is bounded): then no slot here is the newest due one, so ``run_latest``
    supersedes every missed slot of this chunk.
    """
    decisions: dict[int, Decision] = {}
    runnable = [i for i, s in enumerate(slots) if s.status is SlotStatus.scheduled]
    for i, slot in enumerate(slots):
        if slot.status is not SlotStatus.scheduled:
            decisions[i] = Decision(slot, RunState.SKIPPED, slot.reason or SlotReason.dst_gap)

    candidates: list[int] = []
    latest = runnable[-1] if runnable and not more_due else None
    caught_up = 0
    for i in runnable:
        slot = slots[i]
        missed = now > slot.fire_at + schedule.grace
        if not missed:
            candidates.append(i)
        elif schedule.misfire is MisfirePolicy.run_latest:
            if i == latest:
                candidates.append(i)
            else:
                decisions[i] = Decision(slot, RunState.MISSED, SlotReason.superseded)
        elif schedule.misfire is MisfirePolicy.run_all:
            if caught_up < schedule.max_catchup:
                caught_up += 1
                candidates.append(i)
            else:
                decisions[i] = Decision(slot, RunState.MISSED, SlotReason.catchup_cap)
        else:
            decisions[i] = Decision(slot, RunState.MISSED, SlotReason.misfire)

    cancel_active = False
    queued, started = active.queued, active.started
    overlap = schedule.overlap
    for n, i in enumerate(candidates):
        slot = slots[i]
        is_active = queued + started > 0
        if overlap is OverlapPolicy.allow or overlap is OverlapPolicy.buffer_all:
            run = True
        elif overlap is OverlapPolicy.skip:
            run = not is_active
        elif overlap is OverlapPolicy.buffer_one:
            run = queued == 0
        else:  # replace
            run = n == len(candidates) - 1
            cancel_active = cancel_active or (run and active.any)
        if run:
            queued += 1
            decisions[i] = Decision(slot, RunState.QUEUED)
        else:
            decisions[i] = Decision(slot, RunState.SKIPPED, SlotReason.overlap)
    return Decisions([decisions[i] for i in range(len(slots))], cancel_active)
