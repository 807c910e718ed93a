"""What people ask of the delivery plane's rows: deliveries, renditions, signed links.

Queries take a session and the :class:`~nbcast.access.Caller` and return typed
records; each is scoped to the caller's tenant — a run, a definition or a row of
another tenant is "not found" (:class:`~nbcast.errors.UnknownRunError`,
:class:`~nbcast.errors.UnknownDefinitionError`), never returned — and writes
nothing. Lists are newest first and keyset-paginated on the row id
(:class:`~nbcast.access.Page`); a run's own deliveries and renditions come whole
(a run has at most :data:`~nbcast.limits.MAX_SUBSCRIPTIONS` deliveries and a few
renditions).

``nbcast deliveries list``, ``nbcast links list`` and the run page (``nbcast runs
show``, the server's run view) read through these functions.

Recipients that are URLs (webhooks) are masked in these records for everyone but the
tenant's admins — ``https://hooks.example.com/…a1b2`` — and so are the URLs in a
row's error message (:mod:`nbcast.definitions.recipients`): every face serializes the
records as they are.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.clock import format_instant
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.recipients import Disclosure, disclosure
from nbcast.delivery.models import (
    Delivery,
    DeliveryReason,
    DeliveryState,
    LinkOpen,
    Rendition,
    RenditionState,
    SignedLink,
)
from nbcast.errors import ConfigError, UnknownDefinitionError, UnknownRunError
from nbcast.limits import clip
from nbcast.scheduler.models import Run
from nbcast.tenancy.models import Tenant
from nbcast.tenancy.roles import readable_tenant

__all__ = [
    "MAX_ID",
    "DeliveryRecord",
    "LinkRecord",
    "RenditionRecord",
    "deliveries_of_run",
    "list_deliveries",
    "list_links",
    "open_counts",
    "parse_delivery_state",
    "renditions_of_run",
    "require_run",
]

MAX_ID = 2**63 - 1
"""The largest row id: a larger number names no row (and is never sent to the
database, which would refuse it)."""


def _instant(value: datetime | None) -> str | None:
    return None if value is None else format_instant(value)


@dataclass(frozen=True, kw_only=True)
class DeliveryRecord:
    """One ledger row: one run's report to one recipient over one channel."""

    id: int
    run_id: int
    report: str
    """The definition's name."""
    channel: str
    recipient: str
    """As the caller may see it: a URL is masked but for the tenant's admins."""
    formats: tuple[str, ...]
    state: DeliveryState
    reason: DeliveryReason | None
    attempts: int
    """How many times it was claimed (a release unsent counts too; see
    :class:`~nbcast.delivery.models.Delivery`)."""
    possible_duplicate: bool
    """A send was repeated without knowing whether the earlier one arrived."""
    outcome_unknown: bool
    """The last attempt may have arrived (a timeout after sending, a worker that died)."""
    not_before: datetime
    """When it is due (again), while PENDING."""
    sent_at: datetime | None
    receipt: dict[str, Any] | None
    """What the channel answered (SMTP reply, Slack ``ts``, HTTP status, links)."""
    error: dict[str, Any] | None
    """The last error: ``{"error": type, "message": …}`` (on a row whose recipient is
    masked, with the URLs in it masked too)."""
    created_at: datetime
    updated_at: datetime

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``); the keys
        ``nbcast deliveries list --json`` has always printed come first."""
        return {
            "id": self.id,
            "run": self.run_id,
            "report": self.report,
            "channel": self.channel,
            "recipient": self.recipient,
            "formats": list(self.formats),
            "state": self.state.value,
            "reason": None if self.reason is None else self.reason.value,
            "attempts": self.attempts,
            "possible_duplicate": self.possible_duplicate,
            "sent_at": _instant(self.sent_at),
            "receipt": self.receipt,
            "error": self.error,
            "outcome_unknown": self.outcome_unknown,
            "not_before": _instant(self.not_before),
            "created_at": _instant(self.created_at),
            "updated_at": _instant(self.updated_at),
        }


@dataclass(frozen=True, kw_only=True)
class RenditionRecord:
    """One format of one run, to render or rendered."""

    id: int
    run_id: int
    format: str
    variant: str
    """``""``, or ``"late"`` for the copy with the staleness banner."""
    state: RenditionState
    attempts: int
    sha256: str | None
    size: int | None
    filename: str | None
    media_type: str | None
    seconds: float | None
    """How long the render took."""
    error: dict[str, Any] | None
    rendered_at: datetime | None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``)."""
        return {
            "id": self.id,
            "run": self.run_id,
            "format": self.format,
            "variant": self.variant,
            "state": self.state.value,
            "attempts": self.attempts,
            "sha256": self.sha256,
            "size": self.size,
            "filename": self.filename,
            "media_type": self.media_type,
            "seconds": self.seconds,
            "error": self.error,
            "rendered_at": _instant(self.rendered_at),
        }


@dataclass(frozen=True, kw_only=True)
class LinkRecord:
    """A signed link handed out (the token itself is never stored)."""

    id: int
    run_id: int
    delivery_id: int | None
    recipient: str
    """Its delivery's recipient, as the caller may see it (a URL masked but for the
    tenant's admins)."""
    filename: str
    media_type: str
    created_at: datetime
    expires_at: datetime
    revoked_at: datetime | None
    opens: int = 0
    """How many times it was opened (:mod:`nbcast.delivery.link_opens`)."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (instants in ISO 8601 UTC with ``Z``); the keys
        ``nbcast links list --json`` has always printed come first."""
        return {
            "id": self.id,
            "run": self.run_id,
            "recipient": self.recipient,
            "file": self.filename,
            "expires_at": _instant(self.expires_at),
            "revoked_at": _instant(self.revoked_at),
            "delivery": self.delivery_id,
            "media_type": self.media_type,
            "created_at": _instant(self.created_at),
            "opens": self.opens,
        }


def parse_delivery_state(state: str) -> DeliveryState:
    """``state`` (any case) as a :class:`DeliveryState`; a
    :class:`~nbcast.errors.ConfigError` listing the states otherwise."""
    wanted = state.upper() if isinstance(state, str) else ""
    if wanted not in DeliveryState.__members__:
        raise ConfigError(
            f"unknown delivery state {clip(state)} (one of {'|'.join(DeliveryState)})"
        )
    return DeliveryState(wanted)


def require_run(session: Session, tenant: Tenant, run_id: int) -> None:
    """Raise :class:`~nbcast.errors.UnknownRunError` unless ``run_id`` is a run of
    ``tenant`` (a run of another tenant is not found)."""
    found = None
    if isinstance(run_id, int) and 0 < run_id <= MAX_ID:
        found = session.scalar(
            sa.select(Run.id).where(Run.id == run_id, Run.tenant_id == tenant.id)
        )
    if found is None:
        raise UnknownRunError(f"no run {clip(run_id)} in tenant {tenant.name!r}")


def _after_id(after: str) -> int:
    """The row id a cursor of these lists carries, kept within what a row id can be."""
    (last,) = decode_cursor(after, (int,))
    if last is None:
        raise ConfigError("after: not a cursor this list handed out")
    return int(min(max(last, 0), MAX_ID))


def _delivery_query(tenant: Tenant) -> Any:
    return (
        sa.select(Delivery, ReportDefinition.name)
        .join(ReportDefinition, ReportDefinition.id == Delivery.definition_id)
        .where(Delivery.tenant_id == tenant.id)
    )


def _delivery(row: Delivery, report: str, shown: Disclosure) -> DeliveryRecord:
    recipient = shown.recipient(row.recipient)
    masked = recipient != row.recipient
    return DeliveryRecord(
        id=row.id,
        run_id=row.run_id,
        report=report,
        channel=row.channel,
        recipient=recipient,
        formats=tuple(row.formats or ()),
        state=DeliveryState(row.state),
        reason=None if row.reason is None else DeliveryReason(row.reason),
        attempts=row.attempt,
        possible_duplicate=row.possible_duplicate,
        outcome_unknown=row.outcome_unknown,
        not_before=row.not_before,
        sent_at=row.sent_at,
        receipt=row.receipt,
        error=shown.value(row.error) if masked else row.error,
        created_at=row.created_at,
        updated_at=row.updated_at,
    )


def list_deliveries(
    session: Session,
    caller: Caller,
    *,
    run_id: int | None = None,
    state: str | None = None,
    channel: str | None = None,
    definition: str | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Page[DeliveryRecord]:
    """The caller's tenant's ledger rows, newest first, optionally of one run, in one
    state (any case), on one channel or of one definition (by name). A run or a
    definition of another tenant is not found."""
    count = page_limit(limit)
    tenant = readable_tenant(session, caller)
    query = _delivery_query(tenant)
    if run_id is not None:
        require_run(session, tenant, run_id)
        query = query.where(Delivery.run_id == run_id)
    if state is not None:
        query = query.where(Delivery.state == parse_delivery_state(state).value)
    if channel is not None:
        query = query.where(Delivery.channel == channel)
    if definition is not None:
        known = session.scalar(
            sa.select(ReportDefinition.id).where(
                ReportDefinition.tenant_id == tenant.id, ReportDefinition.name == definition
            )
        )
        if known is None:
            raise UnknownDefinitionError(
                f"no definition named {clip(definition)} in tenant {tenant.name!r}"
            )
        query = query.where(Delivery.definition_id == known)
    if after is not None:
        query = query.where(Delivery.id < _after_id(after))
    rows = session.execute(query.order_by(Delivery.id.desc()).limit(count + 1)).all()
    shown = disclosure(session, caller)
    items = [_delivery(row, name, shown) for row, name in rows[:count]]
    more = len(rows) > count
    return Page(items, encode_cursor(items[-1].id) if more and items else None)


def deliveries_of_run(session: Session, caller: Caller, run_id: int) -> list[DeliveryRecord]:
    """Every ledger row of one run of the caller's tenant, in the order they were
    made (a run of another tenant is not found)."""
    tenant = readable_tenant(session, caller)
    require_run(session, tenant, run_id)
    query = _delivery_query(tenant).where(Delivery.run_id == run_id).order_by(Delivery.id)
    shown = disclosure(session, caller)
    return [_delivery(row, name, shown) for row, name in session.execute(query).all()]


def renditions_of_run(session: Session, caller: Caller, run_id: int) -> list[RenditionRecord]:
    """Every rendition of one run of the caller's tenant, by format and variant (a
    run of another tenant is not found)."""
    tenant = readable_tenant(session, caller)
    require_run(session, tenant, run_id)
    rows = session.scalars(
        sa.select(Rendition)
        .where(Rendition.run_id == run_id, Rendition.tenant_id == tenant.id)
        .order_by(Rendition.format, Rendition.variant, Rendition.id)
    )
    return [
        RenditionRecord(
            id=r.id,
            run_id=r.run_id,
            format=r.format,
            variant=r.variant,
            state=RenditionState(r.state),
            attempts=r.attempt,
            sha256=r.sha256,
            size=r.size,
            filename=r.filename,
            media_type=r.media_type,
            seconds=r.seconds,
            error=r.error,
            rendered_at=r.rendered_at,
        )
        for r in rows
    ]


def list_links(
    session: Session,
    caller: Caller,
    *,
    run_id: int | None = None,
    limit: int | None = None,
    after: str | None = None,
) -> Page[LinkRecord]:
    """The signed links the caller's tenant handed out, newest first, optionally of
    one run (a run of another tenant is not found)."""
    count = page_limit(limit)
    tenant = readable_tenant(session, caller)
    query = sa.select(SignedLink).where(SignedLink.tenant_id == tenant.id)
    if run_id is not None:
        require_run(session, tenant, run_id)
        query = query.where(SignedLink.run_id == run_id)
    if after is not None:
        query = query.where(SignedLink.id < _after_id(after))

    rows = list(session.scalars(query.order_by(SignedLink.id.desc()).limit(count + 1)))
    opens = open_counts(session, tenant.id, [r.id for r in rows[:count]])
    shown = disclosure(session, caller)
    items = [
        LinkRecord(
            id=r.id,
            run_id=r.run_id,
            delivery_id=r.delivery_id,
            recipient=shown.recipient(r.recipient),
            filename=r.filename,
            media_type=r.media_type,
            created_at=r.created_at,
            expires_at=r.expires_at,
            revoked_at=r.revoked_at,
            opens=opens.get(r.id, 0),
        )
        for r in rows[:count]
    ]
    more = len(rows) > count
    return Page(items, encode_cursor(items[-1].id) if more and items else None)


def open_counts(session: Session, tenant_id: int, link_ids: Iterable[int]) -> dict[int, int]:
    """How often each of ``link_ids`` (links of ``tenant_id``) was opened; a link
    never opened is absent. One grouped query, over a page of links."""
    ids = list(link_ids)
    if not ids:
        return {}
    rows = session.execute(
        sa.select(LinkOpen.link_id, sa.func.count())
        .where(LinkOpen.tenant_id == tenant_id, LinkOpen.link_id.in_(ids))
        .group_by(LinkOpen.link_id)
    )
    return {int(link_id): int(count) for link_id, count in rows}
