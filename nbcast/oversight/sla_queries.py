"""What people ask about SLA misses: the reads behind ``nbcast sla list``, ``GET
/nbcast/api/v1/sla`` and the status pages.

Every query takes a session and the :class:`~nbcast.access.Caller`, reads through
:func:`~nbcast.tenancy.roles.readable_tenant` (any role of the tenant: SLA misses
are a viewer's to read) and writes nothing; a definition of another tenant is "not
found". Lists are newest fire time first and keyset-paginated on ``(fire_at, id)``
(:class:`~nbcast.access.Page`), one range of the ``(tenant_id, fire_at)`` index
whatever the page.

An alert's recipient that is a URL (a webhook's, from ``NBCAST_SLA_TO``) is masked
for everyone but the tenant's admins, and so are the URLs in its error
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
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.recipients import Disclosure, disclosure
from nbcast.errors import ConfigError, UnknownDefinitionError
from nbcast.limits import clip
from nbcast.oversight.models import SlaMiss
from nbcast.scheduler.models import Run, RunKind
from nbcast.tenancy.roles import readable_tenant

__all__ = ["SlaAlertRecord", "SlaMissRecord", "list_misses", "miss_counts"]


@dataclass(frozen=True, kw_only=True)
class SlaAlertRecord:
    """The alert about a miss, sent to the definition's owner."""

    state: str
    """One of :class:`~nbcast.oversight.sla.AlertState`."""
    channel: str | None
    to: str | None
    """As the caller may see it: a URL is masked but for the tenant's admins."""
    attempts: int
    alerted_at: datetime | None
    error: dict[str, Any] | None

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "state": self.state,
            "channel": self.channel,
            "to": self.to,
            "attempts": self.attempts,
            "alerted_at": None if self.alerted_at is None else format_instant(self.alerted_at),
            "error": self.error,
        }


@dataclass(frozen=True, kw_only=True)
class SlaMissRecord:
    """A slot not delivered within its definition's ``sla.delivered_within``, and the
    alert sent to the definition's owner."""

    id: int
    definition: str
    slot_key: str
    """The slot's key (its local wall time)."""
    fire_at: datetime
    deadline: datetime
    detected_at: datetime
    state: str
    """The slot's run state when the miss was found (SKIPPED, MISSED, FAILED, RUNNING,
    SUCCEEDED without a timely delivery, …)."""
    reason: str | None
    run_id: int | None
    """The slot's first run (the base audience's, if it has one)."""
    alert: SlaAlertRecord

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``nbcast sla list --json``, the API's ``SlaMiss``)."""
        return {
            "id": self.id,
            "definition": self.definition,
            "slot": self.slot_key,
            "fire_at": format_instant(self.fire_at),
            "deadline": format_instant(self.deadline),
            "detected_at": format_instant(self.detected_at),
            "state": self.state,
            "reason": self.reason,
            "run": self.run_id,
            "alert": self.alert.to_json(),
        }


def _aware(value: datetime | None, name: str) -> datetime | None:
    if value is not None and (value.tzinfo is None or value.utcoffset() is None):
        raise ConfigError(f"{name} must carry a UTC offset")
    return value


def _definition_id(session: Session, tenant_id: int, tenant: str, name: str) -> int:
    found = session.scalar(
        sa.select(ReportDefinition.id).where(
            ReportDefinition.tenant_id == tenant_id, ReportDefinition.name == name
        )
    )
    if found is None:
        raise UnknownDefinitionError(f"no definition named {clip(name)} in tenant {tenant!r}")
    return int(found)


def list_misses(
    session: Session,
    caller: Caller,
    *,
    definition: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Page[SlaMissRecord]:
    """The caller's tenant's SLA misses, newest fire time first: of one definition (by
    name), with ``since <= fire_at < until`` (aware instants); ``limit``
    (:func:`~nbcast.access.page_limit`) and ``after`` (a page's ``next_after``)."""
    tenant = readable_tenant(session, caller)
    size = page_limit(limit)
    since, until = _aware(since, "since"), _aware(until, "until")
    if since is not None and until is not None and since >= until:
        raise ConfigError("since must be before until")
    first_run = (
        sa.select(sa.func.min(Run.id))
        .where(
            Run.definition_id == SlaMiss.definition_id,
            Run.slot_key == SlaMiss.slot_key,
            Run.kind == RunKind.scheduled.value,
        )
        .scalar_subquery()
    )
    query = (
        sa.select(SlaMiss, ReportDefinition.name, first_run)
        .join(ReportDefinition, ReportDefinition.id == SlaMiss.definition_id)
        .where(SlaMiss.tenant_id == tenant.id)
    )
    if definition is not None:
        did = _definition_id(session, tenant.id, tenant.name, definition)
        query = query.where(SlaMiss.definition_id == did)
    if since is not None:
        query = query.where(SlaMiss.fire_at >= since)
    if until is not None:
        query = query.where(SlaMiss.fire_at < until)
    if after is not None:
        fire_at, miss_id = decode_cursor(after, [datetime, int])
        key = sa.tuple_(SlaMiss.fire_at, SlaMiss.id)
        query = query.where(
            key < sa.tuple_(sa.literal(fire_at, SlaMiss.fire_at.type), sa.literal(miss_id))
        )
    rows = session.execute(
        query.order_by(SlaMiss.fire_at.desc(), SlaMiss.id.desc()).limit(size + 1)
    ).all()
    shown = disclosure(session, caller)
    items = [_record(miss, name, run_id, shown) for miss, name, run_id in rows[:size]]
    more = len(rows) > size and bool(items)
    cursor = encode_cursor(items[-1].fire_at, items[-1].id) if more else None
    return Page(items, cursor)


def miss_counts(
    session: Session, caller: Caller, since: datetime, until: datetime
) -> dict[str, int]:
    """The caller's tenant's misses of slots firing in ``[since, until)``, by the
    slot's state (the overview's count)."""
    tenant = readable_tenant(session, caller)
    rows = session.execute(
        sa.select(SlaMiss.state, sa.func.count())
        .where(SlaMiss.tenant_id == tenant.id, SlaMiss.fire_at >= since, SlaMiss.fire_at < until)
        .group_by(SlaMiss.state)
    )
    return {str(state): int(n) for state, n in rows}


def _record(miss: SlaMiss, name: str, run_id: int | None, shown: Disclosure) -> SlaMissRecord:
    to = None if miss.alert_to is None else shown.recipient(miss.alert_to)
    masked = to != miss.alert_to
    return SlaMissRecord(
        id=miss.id,
        definition=name,
        slot_key=miss.slot_key,
        fire_at=miss.fire_at,
        deadline=miss.deadline,
        detected_at=miss.detected_at,
        state=miss.state,
        reason=miss.reason,
        run_id=None if run_id is None else int(run_id),
        alert=SlaAlertRecord(
            state=miss.alert_state,
            channel=miss.alert_channel,
            to=to,
            attempts=miss.alert_attempts,
            alerted_at=miss.alerted_at,
            error=shown.value(miss.alert_error) if masked else miss.alert_error,
        ),
    )
