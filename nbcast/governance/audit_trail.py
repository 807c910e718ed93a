"""The audit trail as the command layer serves it: verify a tenant's chain (its admins,
or every tenant's for operators), export its entries, page through its trail.

The log itself — entries, the chain, :func:`~nbcast.governance.audit.verify` — is
:mod:`nbcast.governance.audit`; here are the role-checked reads over it that the CLI
(``nbcast audit``), the API and the status pages call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.governance.audit import AuditRecord, Break, entries, verify
from nbcast.governance.models import AuditEntry, Tenant
from nbcast.governance.roles import Role, require, require_operator

__all__ = ["export_log", "trail", "verify_log"]


def verify_log(
    session: Session, caller: Caller, now: datetime, *, every_tenant: bool = False
) -> tuple[int, int, Break | None]:
    """Verify the caller's tenant's chain (its admins), or every tenant's (operators,
    ``every_tenant``): how many tenants and entries were checked, and the first break."""
    if every_tenant:
        require_operator(session, caller, "verifying every tenant's audit log", now)
        tenants = dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
    else:
        tenant = require(session, caller, Role.admin, "verifying the audit log", now).tenant
        tenants = {tenant.id: tenant.name}
    checked, broken = verify(session, tenants)
    return len(tenants), checked, broken


def export_log(
    session: Session,
    caller: Caller,
    now: datetime,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Iterator[AuditRecord]:
    """The caller's tenant's entries within ``[since, until)`` (its admins).

    The role is checked when this is called, not at the first entry, so a caller may
    refuse before opening anything to write the entries to."""
    tenant = require(session, caller, Role.admin, "reading the audit log", now).tenant
    return entries(session, tenant.id, tenant.name, since=since, until=until)


def trail(
    session: Session,
    caller: Caller,
    now: datetime,
    *,
    limit: int | None = None,
    after: str | None = None,
) -> Page[AuditRecord]:
    """The caller's tenant's newest entries first, a page at a time (its admins): what
    the API and the status page show."""
    from nbcast.access import Page

    tenant = require(session, caller, Role.admin, "reading the audit log", now).tenant
    size = page_limit(limit)
    query = (
        sa.select(AuditEntry)
        .where(AuditEntry.tenant_id == tenant.id)
        .order_by(AuditEntry.seq.desc())
        .limit(size + 1)
    )
    if after is not None:
        (last,) = decode_cursor(after, [int])
        query = query.where(AuditEntry.seq < last)
    rows = list(session.scalars(query))
    more = len(rows) > size
    items = [
        AuditRecord(
            tenant=tenant.name,
            seq=row.seq,
            at=row.at,
            actor=row.actor,
            action=row.action,
            object=row.object,
            details=json.loads(row.details),
            prev_hash=row.prev_hash,
            hash=row.hash,
        )
        for row in rows[:size]
    ]
    return Page(items, encode_cursor(items[-1].seq) if more and items else None)
