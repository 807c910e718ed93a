"""The audit trail as the command layer serves it: verify a tenant's chain (its admins,
or every tenant's for operators), export its entries, page through its trail.

The log itself — entries, the chain, :func:`~nbcast.tenancy.audit.verify` — is
:mod:`nbcast.tenancy.audit`; here are the role-checked reads over it that the CLI
(``nbcast audit``), the API and the status pages call.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from datetime import datetime

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, decode_cursor, encode_cursor, page_limit
from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.tenancy.audit import AuditRecord, Break, entries, verify
from nbcast.tenancy.checkpoints import AuditKey, Checkpoint, check_anchors, make_checkpoints
from nbcast.tenancy.models import AuditEntry, Tenant
from nbcast.tenancy.roles import Role, require, require_operator

__all__ = ["checkpoint_log", "export_log", "trail", "verify_log"]


def _tenants(
    session: Session, caller: Caller, now: datetime, every_tenant: bool, doing: str
) -> dict[int, str]:
    """The caller's tenant (its admins), or every tenant (operators, ``every_tenant``)."""
    if every_tenant:
        require_operator(session, caller, f"{doing} every tenant's audit log", now)
        return dict(session.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
    tenant = require(session, caller, Role.admin, f"{doing} the audit log", now).tenant
    return {tenant.id: tenant.name}


def verify_log(
    session: Session,
    caller: Caller,
    now: datetime,
    *,
    every_tenant: bool = False,
    key: AuditKey | None = None,
    exported: Mapping[int, Checkpoint] | None = None,
) -> tuple[int, int, Break | None]:
    """Verify the caller's tenant's chain (its admins), or every tenant's (operators,
    ``every_tenant``), and then each against its newest checkpoint in the database and
    in ``exported`` (checked with ``key``: :mod:`nbcast.tenancy.checkpoints`): how
    many tenants and entries were checked, and the first break."""
    tenants = _tenants(session, caller, now, every_tenant, "verifying")
    checked, broken = verify(session, tenants)
    if broken is None:
        broken = check_anchors(session, tenants, key, exported or {})
    return len(tenants), checked, broken


def checkpoint_log(
    db: Database,
    clock: Clock,
    caller: Caller,
    key: AuditKey,
    *,
    every_tenant: bool = False,
) -> tuple[list[Checkpoint], list[str]]:
    """Checkpoint the caller's tenant's chain now (its admins), or every tenant's
    (operators): the checkpoints made (a tenant whose head has not moved gets none) and
    the tenants whose chain did not hold, so nothing was signed for them."""
    with db.session() as session:
        tenants = _tenants(session, caller, clock.now(), every_tenant, "checkpointing")
    return make_checkpoints(db, clock, key, made_by=caller.user, tenant_ids=tenants)


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
