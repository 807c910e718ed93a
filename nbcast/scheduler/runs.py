"""A caller's run by its id: the one look-up every face and plane uses, so that
another tenant's run, a run that does not exist and a number no run can have all
read the same ("not found")."""

from __future__ import annotations

from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.errors import UnknownRunError
from nbcast.scheduler.models import Run, RunKind

__all__ = ["MAX_RUN_ID", "dry_run_slot", "own_run", "run_not_found"]

MAX_RUN_ID = 2**63 - 1
"""Run ids are 64-bit: a larger number is no run (and no database error)."""


def run_not_found(run_id: int, tenant: str) -> UnknownRunError:
    """The error for a run id that is not the tenant's (or no run at all)."""
    return UnknownRunError(f"no run {run_id} in tenant {tenant!r}")


def own_run(session: Session, caller: Caller, run_id: int) -> Run:
    """The caller's run ``run_id``; :class:`~nbcast.errors.UnknownRunError` otherwise."""
    from nbcast.tenancy.roles import readable_tenant

    tenant = readable_tenant(session, caller)
    run = None
    if 1 <= run_id <= MAX_RUN_ID:
        run = session.scalar(sa.select(Run).where(Run.id == run_id, Run.tenant_id == tenant.id))
    if run is None:
        raise run_not_found(run_id, caller.tenant)
    return run


def dry_run_slot(kind: str, context: Any) -> str | None:
    """The slot a dry run runs (a test run's stored context names it,
    :mod:`nbcast.scheduler.trial`); None for any other run, or a test run of no slot."""
    if kind != RunKind.test.value or not isinstance(context, dict):
        return None
    slot = context.get("slot_key")
    return slot if isinstance(slot, str) and slot else None
