"""Requests people make of the execution plane: cancelling a run."""

from __future__ import annotations

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.errors import ExecutionError
from nbcast.executor.models import CancelRequest, Run, RunState
from nbcast.governance.tenants import get_tenant

__all__ = ["cancel_run"]


def cancel_run(db: Database, clock: Clock, tenant: str, run_id: int, *, by: str) -> str:
    """Cancel run ``run_id``: a QUEUED run at once, a leased or running one through a
    cancel request its worker honours at its next heartbeat. Returns what happened."""
    now = clock.now()
    with db.session() as session:
        owner = get_tenant(session, tenant)
        run = session.scalar(sa.select(Run).where(Run.id == run_id, Run.tenant_id == owner.id))
        if run is None:
            raise ExecutionError(f"no run {run_id} in tenant {tenant!r}")
        if run.state == RunState.QUEUED:
            session.execute(
                sa.update(Run)
                .where(Run.id == run_id, Run.state == "QUEUED")
                .values(state=RunState.CANCELLED.value, reason="cancelled", finished_at=now)
            )
            return "cancelled"
        if run.state in (RunState.LEASED, RunState.RUNNING):
            session.add(
                CancelRequest(
                    tenant_id=owner.id,
                    run_id=run_id,
                    reason="cancel",
                    requested_by=by,
                    requested_at=now,
                )
            )
            return "cancel requested"
        raise ExecutionError(f"run {run_id} is already {run.state}")
