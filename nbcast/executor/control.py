"""Requests people make of the execution plane: cancelling a run.

**One way to cancel.** A cancel is a row in ``run_cancel_requests``, never an update of
the run by whoever asks: :func:`cancel_run` writes the request (in one transaction,
scoped to the caller's tenant), and the worker — the only writer of a run after the
scheduler — honours it (:mod:`nbcast.executor.leases`):

- a QUEUED run (new, or waiting for a retry) is never claimed again, and the next step
  of any worker ends it CANCELLED (``Reaper.cancel_queued``);
- a LEASED or RUNNING run is told at its worker's next heartbeat (every third of the
  lease), which stops its kernel; the attempt ends CANCELLED and so does the run. If
  that worker died, the reaper returns the run to the queue when its lease expires,
  and it is then ended as a queued one.

The scheduler's ``replace`` overlap policy asks the same way, with its own request
rows. A run that has already finished cannot be cancelled.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import Clock, format_instant
from nbcast.db import Database
from nbcast.errors import RunFinishedError
from nbcast.scheduler.models import ACTIVE_STATES, CancelReason, CancelRequest, RunState
from nbcast.scheduler.runs import own_run

__all__ = ["CANCEL_REASON", "CancelResult", "cancel_run"]

CANCEL_REASON = CancelReason.cancel
"""The ``reason`` of a request made by a person (the scheduler's says ``replaced``)."""


@dataclass(frozen=True, kw_only=True)
class CancelResult:
    """What :func:`cancel_run` did."""

    run_id: int
    state: RunState
    """The run's state when the request was made (it is not changed by the request)."""
    requested_at: datetime
    requested_by: str
    already_requested: bool
    """A request was already pending: nothing new was written."""

    @property
    def next_step(self) -> str:
        """What happens next, in words for people."""
        if self.state is RunState.QUEUED:
            return "the next step of a worker (nbcast worker) ends it CANCELLED"
        return "its worker stops it at the next heartbeat and records it CANCELLED"

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "run_id": self.run_id,
            "state": self.state.value,
            "cancel": "requested",
            "requested_at": format_instant(self.requested_at),
            "requested_by": self.requested_by,
            "already_requested": self.already_requested,
            "next": self.next_step,
        }


def cancel_run(db: Database, clock: Clock, caller: Caller, run_id: int) -> CancelResult:
    """Ask for run ``run_id`` to be cancelled (module docstring): a request row, once.

    Raises :class:`~nbcast.errors.UnknownRunError` when the run is not the caller's
    tenant's ("not found", nothing written), :class:`~nbcast.errors.RunFinishedError`
    when it has already finished.
    """
    from nbcast.tenancy import audit
    from nbcast.tenancy.roles import Role, require

    now = clock.now()
    with db.session() as session:
        require(session, caller, Role.author, "cancelling a run", now)
        run = own_run(session, caller, run_id)
        state = RunState(run.state)
        if state not in ACTIVE_STATES:
            raise RunFinishedError(f"run {run_id} has already finished: it is {state.value}")
        pending = session.execute(
            sa.select(CancelRequest.requested_at, CancelRequest.requested_by)
            .where(CancelRequest.run_id == run_id)
            .order_by(CancelRequest.id)
            .limit(1)
        ).first()
        if pending is not None:
            return CancelResult(
                run_id=run_id,
                state=state,
                requested_at=pending.requested_at,
                requested_by=pending.requested_by,
                already_requested=True,
            )
        session.add(
            CancelRequest(
                tenant_id=run.tenant_id,
                run_id=run_id,
                reason=CANCEL_REASON,
                requested_by=caller.user,
                requested_at=now,
            )
        )
        audit.record(
            session,
            run.tenant_id,
            actor=caller.user,
            action=audit.Action.run_cancel_requested,
            obj=f"run:{run_id}",
            at=now,
            details={"state": state.value},
        )
    return CancelResult(
        run_id=run_id,
        state=state,
        requested_at=now,
        requested_by=caller.user,
        already_requested=False,
    )
