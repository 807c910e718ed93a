"""One run in full (``nbcast runs show``, the run page, ``GET /runs/{id}``): its
context, its attempts and why each ended (the failing cell and line,
:mod:`nbcast.executor.failures`), its executed notebook, and what the delivery plane
made of it (renditions, deliveries, the newest openings of its signed links) — a read
model over the scheduling, execution and delivery planes. The record's fields are its
JSON: the API's ``RunDetail`` component is derived from them.

Scoped to the caller's tenant (another tenant's run is "not found"); writes nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.artifacts import ArtifactStore
from nbcast.clock import format_instant
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.link_opens import OpenRecord, opens_of_run
from nbcast.delivery.queries import (
    DeliveryRecord,
    RenditionRecord,
    deliveries_of_run,
    renditions_of_run,
)
from nbcast.executor.failures import ErrorInfo, describe_error, read_notebook
from nbcast.executor.models import RunAttempt
from nbcast.executor.queries import run_context
from nbcast.executor.records import AttemptRecord, instant_json
from nbcast.scheduler.models import CancelRequest, Run, RunState
from nbcast.scheduler.runs import MAX_RUN_ID, run_not_found
from nbcast.tenancy.roles import readable_tenant

__all__ = ["LINK_OPENS_SHOWN", "NOTEBOOKS_READ", "RunDetail", "get_run"]

LINK_OPENS_SHOWN = 100
"""The newest openings of a run's signed links that its detail lists."""

NOTEBOOKS_READ = 5
"""Executed notebooks :func:`get_run` reads to find failing lines: the latest failed
attempts' (earlier ones get their line from the traceback alone)."""


@dataclass(frozen=True, kw_only=True)
class RunDetail:
    """Everything about one run (``nbcast runs show``): its context, its attempts and
    why they ended, its executed notebook, and what the delivery plane made of it."""

    id: int
    tenant: str
    definition: str
    version: int
    slot_key: str | None
    kind: str
    fire_at: datetime
    state: str
    reason: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    not_before: datetime
    """When it may be claimed (a retry's backoff)."""
    parameters: dict[str, Any]
    attempt: int
    notebook_sha256: str | None
    """The executed notebook's sha256: the run's, else its latest attempt's."""
    error: ErrorInfo | None
    """Why it failed (or why its last attempt did), as far as it is known."""
    cancel_requested_at: datetime | None = None
    cancel_requested_by: str | None = None
    context: dict[str, Any] | None = None
    """The period it covers (:mod:`nbcast.scheduler.period`)."""
    rerun_of: int | None = None
    """The run a ``rerun`` repeats."""
    test_to: list[str] | None = None
    """A test run's addresses (``[]``: no one); None for every other kind."""
    attempts: list[AttemptRecord]
    renditions: list[RenditionRecord]
    """The delivery plane's renditions of the run (:mod:`nbcast.delivery.queries`)."""
    deliveries: list[DeliveryRecord]
    """The delivery ledger's rows of the run, one per recipient and channel."""
    link_opens: list[OpenRecord]
    """The openings of the run's signed links, newest first (at most
    :data:`LINK_OPENS_SHOWN`)."""
    link_opens_more: bool
    """Whether older openings exist than those listed."""

    @property
    def next_try_at(self) -> datetime | None:
        """When a run waiting for a retry may be claimed again (None otherwise)."""
        return self.not_before if self.state == RunState.QUEUED and self.attempt else None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "id": self.id,
            "tenant": self.tenant,
            "definition": self.definition,
            "version": self.version,
            "slot_key": self.slot_key,
            "kind": self.kind,
            "fire_at": format_instant(self.fire_at),
            "state": self.state,
            "reason": self.reason,
            "created_at": format_instant(self.created_at),
            "started_at": instant_json(self.started_at),
            "finished_at": instant_json(self.finished_at),
            "not_before": format_instant(self.not_before),
            "parameters": self.parameters,
            "context": self.context,
            "rerun_of": self.rerun_of,
            "test_to": self.test_to,
            "attempt": self.attempt,
            "notebook_sha256": self.notebook_sha256,
            "error": self.error.to_json() if self.error is not None else None,
            "cancel_requested_at": instant_json(self.cancel_requested_at),
            "cancel_requested_by": self.cancel_requested_by,
            "attempts": [a.to_json() for a in self.attempts],
            "renditions": [r.to_json() for r in self.renditions],
            "deliveries": [d.to_json() for d in self.deliveries],
            "link_opens": [o.to_json() for o in self.link_opens],
            "link_opens_more": self.link_opens_more,
        }


def get_run(
    session: Session, caller: Caller, run_id: int, *, artifacts: ArtifactStore | None = None
) -> RunDetail:
    """Run ``run_id`` of the caller's tenant, in full (module docstring).

    ``artifacts`` is the artifact store (``nbcast.artifacts.open_store(<home>/
    artifacts)``): with it, a failing line's text is read from the executed notebook;
    without it, from the traceback. Raises :class:`~nbcast.errors.ExecutionError`
    ("no run …") for a run that is not the tenant's.
    """
    tenant = readable_tenant(session, caller)
    found = None
    if 1 <= run_id <= MAX_RUN_ID:
        found = session.execute(
            sa.select(Run, ReportDefinition.name)
            .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
            .where(Run.id == run_id, Run.tenant_id == tenant.id)
        ).first()
    if found is None:
        raise run_not_found(run_id, caller.tenant)
    run, definition = found.tuple()
    rows = list(
        session.scalars(
            sa.select(RunAttempt)
            .where(RunAttempt.run_id == run.id, RunAttempt.tenant_id == tenant.id)
            .order_by(RunAttempt.attempt)
        )
    )
    readable = {
        a.attempt for a in [a for a in rows if a.error and a.artifact_sha256][-NOTEBOOKS_READ:]
    }
    notebooks: dict[str, dict[str, Any] | None] = {}

    def notebook(sha256: str | None) -> dict[str, Any] | None:
        if sha256 is None:
            return None
        if sha256 not in notebooks:
            notebooks[sha256] = read_notebook(artifacts, sha256)
        return notebooks[sha256]

    attempts = [
        AttemptRecord(
            attempt=a.attempt,
            outcome=a.outcome,
            worker=a.worker,
            host=a.host,
            engine=a.engine,
            started_at=a.started_at,
            ended_at=a.ended_at,
            duration_s=a.duration_s,
            kernel_start_s=a.kernel_start_s,
            artifact_sha256=a.artifact_sha256,
            error=describe_error(
                a.error, notebook(a.artifact_sha256) if a.attempt in readable else None
            ),
        )
        for a in rows
    ]
    latest = rows[-1] if rows else None
    sha256 = run.artifact_sha256 or (latest.artifact_sha256 if latest else None)
    error = None
    if run.error:
        same = latest is not None and latest.error == run.error
        error = describe_error(run.error, notebook(sha256) if same else None)
    opens = opens_of_run(session, caller, run.id, limit=LINK_OPENS_SHOWN + 1)
    cancel = session.execute(
        sa.select(CancelRequest.requested_at, CancelRequest.requested_by)
        .where(CancelRequest.run_id == run.id, CancelRequest.tenant_id == tenant.id)
        .order_by(CancelRequest.id)
        .limit(1)
    ).first()
    return RunDetail(
        id=run.id,
        tenant=tenant.name,
        definition=definition,
        version=run.version,
        slot_key=run.slot_key,
        kind=run.kind,
        fire_at=run.fire_at,
        state=run.state,
        reason=run.reason,
        created_at=run.created_at,
        started_at=run.started_at,
        finished_at=run.finished_at,
        not_before=run.not_before,
        parameters=run.parameters,
        attempt=run.attempt,
        notebook_sha256=sha256,
        error=error,
        cancel_requested_at=cancel.requested_at if cancel else None,
        cancel_requested_by=cancel.requested_by if cancel else None,
        context=run_context(run, tenant.name),
        rerun_of=run.rerun_of,
        test_to=run.test_to,
        attempts=attempts,
        renditions=renditions_of_run(session, caller, run.id),
        deliveries=deliveries_of_run(session, caller, run.id),
        link_opens=opens[:LINK_OPENS_SHOWN],
        link_opens_more=len(opens) > LINK_OPENS_SHOWN,
    )
