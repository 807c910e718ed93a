"""What people ask about report definitions: lists, one definition, its versions.

Queries take a ``Session`` and a :class:`~nbcast.access.Caller` and return typed
records, scoped to the caller's tenant: a definition of another tenant is not found
(:class:`~nbcast.errors.UnknownDefinitionError`), never returned. They read the
scheduler's rows (pause, next fire, a recorded failure) and the last run of each
definition, and write nothing.

Subscriptions' URL recipients (webhooks) are masked for everyone but the tenant's
admins, in the ``nbcast`` block and in the stored notebook alike
(:mod:`nbcast.definitions.recipients`): records hold what the caller may see, so a
version's diff, its export and every face show the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.clock import format_instant
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.definitions.parameters import Parameter, schema_from_json
from nbcast.definitions.recipients import Disclosure, disclosure
from nbcast.definitions.spec import ReportSpec, parse_spec
from nbcast.errors import UnknownDefinitionError
from nbcast.governance.models import Tenant, User
from nbcast.governance.roles import readable_tenant
from nbcast.limits import clip

__all__ = [
    "DefinitionRecord",
    "VersionInfo",
    "definition_row",
    "get_definition",
    "get_version",
    "list_definitions",
    "list_versions",
]


@dataclass(frozen=True, kw_only=True)
class VersionInfo:
    """One published version, as read back: its ``block`` and ``notebook_json`` as
    the caller may see them (URL recipients masked but for admins)."""

    definition: str
    version: int
    sha256: str
    author: str
    message: str
    created_at: datetime
    schema: tuple[Parameter, ...]
    block: dict[str, Any]
    notebook_json: str

    @property
    def notebook(self) -> dict[str, Any]:
        """The stored (normalized) notebook."""
        return dict(json.loads(self.notebook_json))

    @property
    def spec(self) -> ReportSpec:
        """The parsed ``nbcast`` block of this version."""
        return parse_spec(self.block, self.schema)

    def to_json(self, *, with_notebook: bool = False) -> dict[str, Any]:
        """The JSON form (the notebook itself only when asked for)."""
        data: dict[str, Any] = {
            "definition": self.definition,
            "version": self.version,
            "sha256": self.sha256,
            "author": self.author,
            "message": self.message,
            "created_at": format_instant(self.created_at),
            "parameters": [
                {"name": p.name, "type": p.type, "default": p.default, "help": p.help}
                for p in self.schema
            ],
            "nbcast": self.block,
        }
        if with_notebook:
            data["notebook"] = self.notebook
        return data


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


def definition_row(session: Session, caller: Caller, name: str) -> ReportDefinition:
    """The caller's definition called ``name``; UnknownDefinitionError otherwise."""
    tenant = readable_tenant(session, caller)
    definition = session.scalar(
        sa.select(ReportDefinition).where(
            ReportDefinition.tenant_id == tenant.id, ReportDefinition.name == name
        )
    )
    if definition is None:
        raise UnknownDefinitionError(
            f"no definition named {clip(name)} in tenant {caller.tenant!r}"
        )
    return definition


def _schedule_summary(block: dict[str, Any]) -> tuple[str, str]:
    schedule = block.get("schedule") or {}
    zone = str(schedule.get("timezone", "UTC"))
    what = schedule.get("cron") or (f"every {schedule['every']}" if "every" in schedule else "")
    return (f"{what} ({zone})" if what else "manual"), zone


def _records(
    session: Session, tenant: Tenant, query: Any, shown: Disclosure
) -> list[DefinitionRecord]:
    from nbcast.executor.models import Run  # reads of the executor's rows
    from nbcast.scheduler.models import ScheduleState  # and of the scheduler's

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


def _info(
    definition: ReportDefinition, version: DefinitionVersion, author: str, shown: Disclosure
) -> VersionInfo:
    return VersionInfo(
        definition=definition.name,
        version=version.version,
        sha256=version.sha256,
        author=author,
        message=version.message,
        created_at=version.created_at,
        schema=schema_from_json(version.parameter_schema),
        block=shown.block(version.spec),
        notebook_json=shown.notebook_json(version.notebook_json, version.spec),
    )


def get_version(
    session: Session, caller: Caller, name: str, version: int | None = None
) -> VersionInfo:
    """Version ``version`` (default: the latest) of the caller's definition ``name``."""
    definition = definition_row(session, caller, name)
    number = definition.latest_version if version is None else version
    row = session.execute(
        sa.select(DefinitionVersion, User.name)
        .join(User, User.id == DefinitionVersion.author_id)
        .where(
            DefinitionVersion.definition_id == definition.id,
            DefinitionVersion.version == number,
        )
    ).first()
    if row is None:
        raise UnknownDefinitionError(
            f"definition {clip(name)} has no version {clip(number)} (latest is "
            f"{definition.latest_version})"
        )
    return _info(definition, row[0], row[1], disclosure(session, caller))


def list_versions(session: Session, caller: Caller, name: str) -> list[VersionInfo]:
    """Every version of the caller's definition ``name``, oldest first."""
    definition = definition_row(session, caller, name)
    rows = session.execute(
        sa.select(DefinitionVersion, User.name)
        .join(User, User.id == DefinitionVersion.author_id)
        .where(DefinitionVersion.definition_id == definition.id)
        .order_by(DefinitionVersion.version)
    ).all()
    shown = disclosure(session, caller)
    return [_info(definition, version, author, shown) for version, author in rows]
