"""Definitions as people list them: each with its latest version's schedule, the
scheduler's view of it (pause, next fire, a recorded failure) and its newest run — a
read model over the definitions, scheduling and execution planes.

Scoped to the caller's tenant like every query (another tenant's definition is not
found), keyset-paginated, writing nothing; URL recipients are masked but for admins
(:mod:`nbcast.definitions.recipients`).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
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
from nbcast.executor.records import instant_json
from nbcast.limits import clip
from nbcast.records import flattened, internal
from nbcast.scheduler.models import Run, ScheduleState
from nbcast.scheduler.upcoming import UpcomingFire, upcoming
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.roles import readable_tenant

__all__ = [
    "DETAIL_STATE",
    "NEXT_FIRES",
    "DefinitionDetail",
    "DefinitionRecord",
    "LastRun",
    "get_definition",
    "get_definition_detail",
    "list_definitions",
    "next_fires",
]

NEXT_FIRES = 3
"""The upcoming slots a definition's list entry and detail show."""


@dataclass(frozen=True, kw_only=True)
class LastRun:
    """A definition's newest run."""

    state: str
    reason: str | None
    fire_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {"state": self.state, "reason": self.reason, "fire_at": instant_json(self.fire_at)}


@dataclass(frozen=True, kw_only=True)
class DefinitionRecord:
    """A definition as listed: its latest version's schedule and the scheduler's view
    of it."""

    id: int = internal()
    name: str
    latest_version: int
    schedule: str
    """'<cron or every …> (<zone>)' or 'manual'."""
    cron: str | None
    every: str | None
    timezone: str
    source_path: str
    """The file the definition is bound to, relative to the server's root folder
    ('outside-root:<file name>' for one outside it), or 'api:<name>' for a notebook
    published as JSON; never an absolute path of the server."""
    created_at: datetime
    updated_at: datetime
    paused: bool
    next_fire_at: datetime | None
    schedule_error: str | None
    """Why the scheduler could not materialize it lately (it is retried with backoff)."""
    failures: int
    last_run: LastRun | None
    next_fires: list[UpcomingFire]
    """Its next slots (none: it runs on request, or its schedule no longer compiles)."""
    block: dict[str, Any] = internal()
    """The latest version's ``nbcast`` block (URL recipients masked but for admins)."""
    next_fires_error: str | None = internal(default=None)
    """Why its schedule gives no next fires (it no longer compiles), for the pages; the
    scheduler records the same failure as ``schedule_error`` when it next looks."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "name": self.name,
            "latest_version": self.latest_version,
            "schedule": self.schedule,
            "cron": self.cron,
            "every": self.every,
            "timezone": self.timezone,
            "source_path": self.source_path,
            "created_at": format_instant(self.created_at),
            "updated_at": format_instant(self.updated_at),
            "paused": self.paused,
            "next_fire_at": instant_json(self.next_fire_at),
            "schedule_error": self.schedule_error,
            "failures": self.failures,
            "last_run": None if self.last_run is None else self.last_run.to_json(),
            "next_fires": [f.to_json() for f in self.next_fires],
        }


def _schedule_fields(block: dict[str, Any]) -> tuple[str, str, str | None, str | None]:
    """The list's view of a stored block's schedule: its summary ('<cron or every …>
    (<zone>)' or 'manual'), zone, cron and every."""
    found = block.get("schedule")
    schedule: dict[str, Any] = found if isinstance(found, dict) else {}
    zone = str(schedule.get("timezone", "UTC"))
    cron, every = schedule.get("cron"), schedule.get("every")
    cron = cron if isinstance(cron, str) else None
    every = str(every) if every is not None else None
    what = cron or (f"every {every}" if every is not None else "")
    return (f"{what} ({zone})" if what else "manual"), zone, cron, every


def _records(
    session: Session, tenant: Tenant, query: Any, shown: Disclosure, now: datetime
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
        summary, zone, cron, every = _schedule_fields(v.spec)
        fires, fires_error = next_fires(v.spec, now)
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
                cron=cron,
                every=every,
                timezone=zone,
                block=shown.block(v.spec),
                paused=bool(state and state.paused),
                next_fire_at=state.next_fire_at if state else None,
                schedule_error=state.error if state else None,
                failures=state.failures if state else 0,
                last_run=None
                if run is None
                else LastRun(state=run.state, reason=run.reason, fire_at=run.fire_at),
                next_fires=fires,
                next_fires_error=fires_error,
            )
        )
    return records


def list_definitions(
    session: Session,
    caller: Caller,
    *,
    limit: int | None = None,
    after: str | None = None,
    now: datetime | None = None,
) -> Page[DefinitionRecord]:
    """The caller's definitions by name, a page at a time, each with its next fires
    after ``now`` (default: the current time)."""
    tenant = readable_tenant(session, caller)
    size = page_limit(limit)
    query = sa.select(ReportDefinition).order_by(ReportDefinition.name).limit(size + 1)
    if after is not None:
        (last_name,) = decode_cursor(after, [str])
        query = query.where(ReportDefinition.name > last_name)
    records = _records(session, tenant, query, disclosure(session, caller), _now(now))
    more = len(records) > size
    records = records[:size]
    cursor = encode_cursor(records[-1].name) if more and records else None
    return Page(records, cursor)


def get_definition(
    session: Session, caller: Caller, name: str, *, now: datetime | None = None
) -> DefinitionRecord:
    """The caller's definition called ``name``, with its next fires after ``now``
    (default: the current time)."""
    tenant = readable_tenant(session, caller)
    records = _records(
        session,
        tenant,
        sa.select(ReportDefinition).where(ReportDefinition.name == name),
        disclosure(session, caller),
        _now(now),
    )
    if not records:
        raise UnknownDefinitionError(
            f"no definition named {clip(name)} in tenant {caller.tenant!r}"
        )
    return records[0]


def _now(now: datetime | None) -> datetime:
    return now if now is not None else datetime.now(UTC)


def next_fires(
    block: dict[str, Any], now: datetime, count: int = NEXT_FIRES
) -> tuple[list[UpcomingFire], str | None]:
    """The next ``count`` slots of a version's schedule — none for a report that runs on
    request — and, when the schedule no longer compiles, why (the scheduler records the
    same failure on the definition)."""
    schedule = block.get("schedule")
    if not isinstance(schedule, dict):
        return [], None
    try:
        spec = compile_schedule_block(schedule)
        return ([] if spec is None else upcoming(spec, now, count)), None
    except NbcastError as exc:
        return [], str(exc)


DETAIL_STATE = (
    "paused",
    "next_fire_at",
    "schedule_error",
    "failures",
    "last_run",
    "latest_version",
    "schedule",
    "timezone",
    "next_fires",
)
"""The keys of a definition's state that its detail shows beside the version's."""


@dataclass(frozen=True, kw_only=True)
class DefinitionDetail:
    """One version (the latest unless asked) with the definition's schedule, state and
    next fire times: what ``nbcast definitions show --json`` prints and ``GET
    /definitions/{name}`` answers — one record, so the two cannot differ."""

    version: VersionInfo = flattened()
    record: DefinitionRecord = flattened(only=DETAIL_STATE)

    def to_json(self) -> dict[str, Any]:
        """The version's JSON, then the definition's state (:data:`DETAIL_STATE`)."""
        state = self.record.to_json()
        return {**self.version.to_json(), **{key: state[key] for key in DETAIL_STATE}}


def get_definition_detail(
    session: Session, caller: Caller, name: str, version: int | None = None, *, now: datetime
) -> DefinitionDetail:
    """Version ``version`` (default: the latest) of the caller's definition ``name``,
    with the definition's state and its next fires as of ``now``."""
    info = get_version(session, caller, name, version)
    return DefinitionDetail(version=info, record=get_definition(session, caller, name, now=now))
