"""Definitions as people list them: each with its latest version's schedule, the
scheduler's view of it (pause, next fire, a recorded failure) and its newest run — a
read model over the definitions, scheduling and execution planes.

Scoped to the caller's tenant like every query (another tenant's definition is not
found), keyset-paginated, writing nothing; URL recipients are masked but for admins
(:mod:`nbcast.definitions.recipients`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.clock import format_instant
from nbcast.definitions.compiled import compile_schedule_block
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.queries import VersionInfo, get_version
from nbcast.definitions.recipients import Disclosure, disclosure
from nbcast.errors import NbcastError, UnknownDefinitionError
from nbcast.limits import clip
from nbcast.scheduler.models import Run, ScheduleState
from nbcast.scheduler.upcoming import upcoming
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.roles import readable_tenant

__all__ = [
    "NEXT_FIRES",
    "DefinitionDetail",
    "DefinitionRecord",
    "get_definition",
    "get_definition_detail",
    "list_definitions",
    "next_fires_json",
]

NEXT_FIRES = 3
"""The upcoming slots a definition's list entry and detail show."""


@dataclass(frozen=True, kw_only=True)
class DefinitionRecord:
    """A definition, its latest version's schedule, and the scheduler's view of it."""

    id: int
    name: str
    source_path: str
    latest_version: int
    created_at: datetime
    updated_at: datetime
    schedule: str
    """A summary: the cron or ``every …`` and the zone, or ``manual``."""
    timezone: str
    block: dict[str, Any]
    """The latest version's ``nbcast`` block (URL recipients masked but for admins)."""
    paused: bool = False
    next_fire_at: datetime | None = None
    schedule_error: str | None = None
    """Why the scheduler could not materialize it lately (it is retried with backoff)."""
    failures: int = 0
    last_run_state: str | None = None
    last_run_reason: str | None = None
    last_run_fire_at: datetime | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""

        def at(value: datetime | None) -> str | None:
            return format_instant(value) if value is not None else None

        return {
            "name": self.name,
            "latest_version": self.latest_version,
            "schedule": self.schedule,
            "timezone": self.timezone,
            "source_path": self.source_path,
            "created_at": format_instant(self.created_at),
            "updated_at": format_instant(self.updated_at),
            "paused": self.paused,
            "next_fire_at": at(self.next_fire_at),
            "schedule_error": self.schedule_error,
            "failures": self.failures,
            "last_run": None
            if self.last_run_state is None
            else {
                "state": self.last_run_state,
                "reason": self.last_run_reason,
                "fire_at": at(self.last_run_fire_at),
            },
        }


def _schedule_summary(block: dict[str, Any]) -> tuple[str, str]:
    schedule = block.get("schedule") or {}
    zone = str(schedule.get("timezone", "UTC"))
    what = schedule.get("cron") or (f"every {schedule['every']}" if "every" in schedule else "")
    return (f"{what} ({zone})" if what else "manual"), zone


def _records(
    session: Session, tenant: Tenant, query: Any, shown: Disclosure
) -> list[DefinitionRecord]:

    rows = session.execute(
        query.add_columns(DefinitionVersion, ScheduleState)
        .join(
            DefinitionVersion,
            sa.and_(
                DefinitionVersion.definition_id == ReportDefinition.id,
                DefinitionVersion.version == ReportDefinition.latest_version,
            ),
        )
        .outerjoin(ScheduleState, ScheduleState.definition_id == ReportDefinition.id)
        .where(ReportDefinition.tenant_id == tenant.id)
    ).all()
    ids = [d.id for d, _, _ in rows]
    last: dict[int, Any] = {}
    if ids:
        # The newest run of each definition: one indexed look-up per definition of the page.
        newest = (
            sa.select(Run.state, Run.reason, Run.fire_at)
            .where(Run.definition_id == sa.bindparam("d"), Run.tenant_id == tenant.id)
            .order_by(Run.fire_at.desc(), Run.id.desc())
            .limit(1)
        )
        for definition_id in ids:
            last[definition_id] = session.execute(newest, {"d": definition_id}).first()
    records = []
    for d, v, state in rows:
        summary, zone = _schedule_summary(v.spec)
        run = last.get(d.id)
        records.append(
            DefinitionRecord(
                id=d.id,
                name=d.name,
                source_path=d.source_path,
                latest_version=d.latest_version,
                created_at=d.created_at,
                updated_at=v.created_at,
                schedule=summary,
                timezone=zone,
                block=shown.block(v.spec),
                paused=bool(state and state.paused),
                next_fire_at=state.next_fire_at if state else None,
                schedule_error=state.error if state else None,
                failures=state.failures if state else 0,
                last_run_state=run.state if run else None,
                last_run_reason=run.reason if run else None,
                last_run_fire_at=run.fire_at if run else None,
            )
        )
    return records


def list_definitions(
    session: Session, caller: Caller, *, limit: int | None = None, after: str | None = None
) -> Page[DefinitionRecord]:
    """The caller's definitions by name, a page at a time."""
    tenant = readable_tenant(session, caller)
    size = page_limit(limit)
    query = sa.select(ReportDefinition).order_by(ReportDefinition.name).limit(size + 1)
    if after is not None:
        (last_name,) = decode_cursor(after, [str])
        query = query.where(ReportDefinition.name > last_name)
    records = _records(session, tenant, query, disclosure(session, caller))
    more = len(records) > size
    records = records[:size]
    cursor = encode_cursor(records[-1].name) if more and records else None
    return Page(records, cursor)


def get_definition(session: Session, caller: Caller, name: str) -> DefinitionRecord:
    """The caller's definition called ``name``."""
    tenant = readable_tenant(session, caller)
    records = _records(
        session,
        tenant,
        sa.select(ReportDefinition).where(ReportDefinition.name == name),
        disclosure(session, caller),
    )
    if not records:
        raise UnknownDefinitionError(
            f"no definition named {clip(name)} in tenant {caller.tenant!r}"
        )
    return records[0]


def next_fires_json(
    block: dict[str, Any], now: datetime, count: int = NEXT_FIRES
) -> list[dict[str, Any]]:
    """The next ``count`` slots of a version's schedule as JSON (none: manual, or a
    schedule that no longer compiles — the scheduler records that one's error)."""
    schedule = block.get("schedule")
    if not isinstance(schedule, dict):
        return []
    try:
        spec = compile_schedule_block(schedule)
        return [] if spec is None else [f.to_json() for f in upcoming(spec, now, count)]
    except NbcastError:
        return []


@dataclass(frozen=True, kw_only=True)
class DefinitionDetail:
    """One version of a definition with the definition's state: what ``nbcast
    definitions show --json`` prints and ``GET /definitions/{name}`` answers (schema
    ``DefinitionDetail``) — one record, so the two cannot differ."""

    version: VersionInfo
    record: DefinitionRecord
    next_fires: list[dict[str, Any]]

    def to_json(self) -> dict[str, Any]:
        """The version's JSON, then the definition's state."""
        status = self.record.to_json()
        return {
            **self.version.to_json(),
            "paused": self.record.paused,
            "next_fire_at": status["next_fire_at"],
            "schedule_error": self.record.schedule_error,
            "failures": self.record.failures,
            "last_run": status["last_run"],
            "latest_version": self.record.latest_version,
            "schedule": self.record.schedule,
            "timezone": self.record.timezone,
            "next_fires": self.next_fires,
        }


def get_definition_detail(
    session: Session, caller: Caller, name: str, version: int | None = None, *, now: datetime
) -> DefinitionDetail:
    """Version ``version`` (default: the latest) of the caller's definition ``name``,
    with the definition's state and its next fires as of ``now``."""
    info = get_version(session, caller, name, version)
    record = get_definition(session, caller, name)
    return DefinitionDetail(
        version=info, record=record, next_fires=next_fires_json(record.block, now)
    )
