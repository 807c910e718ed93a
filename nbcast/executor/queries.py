"""What people ask of the execution plane's rows: runs, listed and shown.

Queries take a session and the :class:`~nbcast.access.Caller` and return typed
records; each is scoped to the caller's tenant (a run of another tenant is not
found). They read the scheduler's and the delivery plane's rows where a run's story
needs them, and write nothing.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa

from nbcast.clock import format_instant
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.errors import ScheduleError, UnknownDefinitionError
from nbcast.executor.models import Run, RunState
from nbcast.governance.tenants import get_tenant

__all__ = ["RunInfo", "list_runs"]


@dataclass(frozen=True, kw_only=True)
class RunInfo:
    """A run as listed by ``nbcast runs list``."""

    id: int
    definition: str
    slot_key: str | None
    kind: str
    state: str
    reason: str | None
    fire_at: datetime
    version: int
    parameters: dict[str, Any]
    created_at: datetime
    attempt: int = 0
    artifact_sha256: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "id": self.id,
            "definition": self.definition,
            "slot_key": self.slot_key,
            "kind": self.kind,
            "state": self.state,
            "reason": self.reason,
            "fire_at": format_instant(self.fire_at),
            "version": self.version,
            "parameters": self.parameters,
            "created_at": format_instant(self.created_at),
            "attempt": self.attempt,
            "artifact_sha256": self.artifact_sha256,
        }


def list_runs(
    db: Database,
    tenant: str,
    *,
    definition: str | None = None,
    state: str | None = None,
    limit: int | None = None,
) -> list[RunInfo]:
    """Runs of ``tenant``, oldest fire time first, optionally filtered."""
    with db.session() as session:
        owner = get_tenant(session, tenant)
        query = (
            sa.select(Run, ReportDefinition.name)
            .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
            .where(Run.tenant_id == owner.id)
            .order_by(Run.fire_at, Run.slot_key, Run.id)
        )
        if definition is not None:
            exists = session.scalar(
                sa.select(ReportDefinition.id).where(
                    ReportDefinition.tenant_id == owner.id, ReportDefinition.name == definition
                )
            )
            if exists is None:
                raise UnknownDefinitionError(
                    f"no definition named {definition!r} in tenant {tenant!r}"
                )
            query = query.where(ReportDefinition.name == definition)
        if state is not None:
            wanted = state.upper()
            if wanted not in RunState.__members__:
                raise ScheduleError(
                    f"unknown run state {state!r} (one of " + "|".join(RunState.__members__) + ")"
                )
            query = query.where(Run.state == wanted)
        if limit is not None:
            query = query.limit(limit)
        return [
            RunInfo(
                id=r.id,
                definition=n,
                slot_key=r.slot_key,
                kind=r.kind,
                state=r.state,
                reason=r.reason,
                fire_at=r.fire_at,
                version=r.version,
                parameters=r.parameters,
                created_at=r.created_at,
                attempt=r.attempt,
                artifact_sha256=r.artifact_sha256,
            )
            for r, n in session.execute(query).all()
        ]
