"""The audit log: append-only, hash-chained per tenant, written with the change it records.

Every state change a person (or a plane, on their behalf) makes is one **entry**:
``seq`` (1, 2, 3 … per tenant, no gaps), ``at``, ``actor``, ``action``
(:class:`Action`), ``object`` (what it acted on: ``definition:daily-sales``,
``run:42``), ``details`` (a small JSON object), the previous entry's hash and its
own. The hash is SHA-256 over the previous hash and the entry's canonical encoding
(:func:`canonical`): the entry's fields as a JSON array, keys sorted, no spaces,
ASCII only, the instant as ``YYYY-MM-DDTHH:MM:SS.ffffffZ``. So an entry that is
edited, deleted, inserted or moved breaks the chain at that point, and
:func:`verify` names the first broken entry. ``audit_heads`` keeps each tenant's last
``seq`` and hash, so removing entries from the end is found too.

**Written in the transaction of the change.** :func:`record` only notes the entry on
the session; a ``before_commit`` hook appends every noted entry of the transaction
at commit time — after the change itself, holding each tenant's head row (locked in
tenant order, so two transactions never deadlock on heads) only for the moment the
appends take. A change that rolls back leaves no entry, and an entry never exists
without its change.

**Append-only.** On PostgreSQL a trigger refuses ``UPDATE``, ``DELETE`` and
``TRUNCATE`` on ``audit_log`` (migration 0011); retention never deletes entries. On
SQLite (a file private to its user) the chain is the guard: whoever can edit the file
can edit rows, and :func:`verify` finds it.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from enum import StrEnum
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy import event
from sqlalchemy.orm import Session

from nbcast.clock import format_instant
from nbcast.tenancy.models import AuditEntry, AuditHead

__all__ = [
    "GENESIS",
    "Action",
    "AuditRecord",
    "Break",
    "append",
    "canonical",
    "chain_hash",
    "chain_rows",
    "details_text",
    "entries",
    "entry",
    "record",
    "verify",
]

GENESIS = "0" * 64
"""The ``prev_hash`` of a tenant's first entry."""

MAX_DETAILS = 4_096
"""Characters of canonical ``details`` kept; longer details are cut with a marker."""

_PENDING = "nbcast_audit_pending"


class Action(StrEnum):
    """What an audit entry records."""

    definition_published = "definition.published"
    """A new version was stored (``details``: version, sha256, message)."""
    schedule_changed = "schedule.changed"
    """A publish changed the schedule (``details``: from, to)."""
    definition_paused = "definition.paused"
    definition_resumed = "definition.resumed"
    run_requested = "run.requested"
    """A manual run (run now), with its parameters."""
    run_rerun = "run.rerun"
    backfill_requested = "backfill.requested"
    run_cancel_requested = "run.cancel_requested"
    deliveries_retried = "deliveries.retried"
    tenant_created = "tenant.created"
    quota_changed = "quota.changed"
    ceilings_changed = "ceilings.changed"
    network_changed = "network.changed"
    """An operator changed what a tenant's kernels reach (``details``: from, to)."""
    """An operator set a tenant's quota ceilings (``details``: from, to, quotas_lowered)."""
    budget_changed = "budget.changed"
    retention_changed = "retention.changed"
    user_added = "user.added"
    role_granted = "role.granted"
    role_revoked = "role.revoked"
    operator_granted = "operator.granted"
    operator_revoked = "operator.revoked"
    link_created = "link.created"
    link_opened = "link.opened"
    link_revoked = "link.revoked"
    unsubscribed = "subscription.unsubscribed"
    delivery_sent = "delivery.sent"
    delivery_failed = "delivery.failed"
    delivery_suppressed = "delivery.suppressed"
    retention_deleted = "retention.deleted"
    """A retention pass deleted rows or artifacts (``details``: counts, and for runs
    the per-day count and hash of the slot rows deleted, so their existence stays
    provable)."""
    sla_missed = "sla.missed"


@dataclass(frozen=True, kw_only=True)
class AuditRecord:
    """One entry as :func:`entries` and ``audit export`` give it."""

    tenant: str
    seq: int
    at: datetime
    actor: str
    action: str
    object: str
    details: dict[str, Any]
    prev_hash: str
    hash: str

    def to_json(self) -> dict[str, Any]:
        """The JSON form (one line of ``nbcast audit export``)."""
        return {
            "tenant": self.tenant,
            "seq": self.seq,
            "at": format_instant(self.at),
            "actor": self.actor,
            "action": self.action,
            "object": self.object,
            "details": self.details,
            "prev_hash": self.prev_hash,
            "hash": self.hash,
        }


def _instant(at: datetime) -> str:
    return at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def details_text(details: Mapping[str, Any] | None) -> str:
    """``details`` as the canonical JSON text an entry stores and hashes."""
    text = json.dumps(
        dict(details or {}), sort_keys=True, separators=(",", ":"), ensure_ascii=True, default=str
    )
    if len(text) > MAX_DETAILS:
        text = json.dumps({"truncated": text[:MAX_DETAILS]}, separators=(",", ":"))
    return text


def canonical(
    tenant_id: int, seq: int, at: datetime, actor: str, action: str, obj: str, details: str
) -> bytes:
    """The canonical encoding of an entry (module docstring); ``details`` is the
    stored canonical JSON text."""
    return _encode(tenant_id, seq, _instant(at), actor, action, obj, details)


@functools.lru_cache(maxsize=4096)
def _json_text(text: str) -> str:
    return json.dumps(text, ensure_ascii=True)


def _encode(
    tenant_id: int, seq: int, instant: str, actor: str, action: str, obj: str, details: str
) -> bytes:
    """:func:`canonical` from the instant's text (what verifying reads by the million:
    actors and actions repeat, so their JSON is remembered)."""
    return (
        f'[{tenant_id},{seq},"{instant}",{_json_text(actor)},{_json_text(action)},'
        f"{json.dumps(obj, ensure_ascii=True)},{details}]"
    ).encode("ascii")


def chain_hash(prev_hash: str, encoded: bytes) -> str:
    """The hash of an entry whose canonical encoding is ``encoded``."""
    return hashlib.sha256(prev_hash.encode("ascii") + b"\n" + encoded).hexdigest()


@dataclass(frozen=True)
class _Noted:
    tenant_id: int
    at: datetime
    actor: str
    action: str
    object: str
    details: str


def record(
    session: Session,
    tenant_id: int,
    *,
    actor: str,
    action: Action,
    obj: str,
    at: datetime,
    details: Mapping[str, Any] | None = None,
) -> None:
    """Note an entry; it is appended when ``session``'s transaction commits (module
    docstring)."""
    if at.tzinfo is None:
        raise ValueError("an audit instant must be aware")
    pending: list[_Noted] = session.info.setdefault(_PENDING, [])
    pending.append(
        _Noted(
            tenant_id,
            at.astimezone(UTC),
            actor[:128],
            action.value,
            obj[:255],
            details_text(details),
        )
    )


def entry(
    tenant_id: int,
    *,
    actor: str,
    action: Action,
    obj: str,
    at: datetime,
    details: Mapping[str, Any] | None = None,
) -> _Noted:
    """An entry to :func:`append` on a Connection (the planes that write through a
    Connection, not a Session: the delivery ledger's recorder, link openings)."""
    if at.tzinfo is None:
        raise ValueError("an audit instant must be aware")
    return _Noted(
        tenant_id, at.astimezone(UTC), actor[:128], action.value, obj[:255], details_text(details)
    )


@event.listens_for(Session, "before_commit")
def _append_pending(session: Session) -> None:
    pending: list[_Noted] = session.info.pop(_PENDING, [])
    if pending:
        append(session, pending)


@event.listens_for(Session, "after_rollback")
def _forget_pending(session: Session) -> None:
    session.info.pop(_PENDING, None)


def append(session: Session | sa.Connection, noted: list[_Noted]) -> None:
    """Append ``noted`` entries now, chaining each tenant's after its head (in the
    transaction ``session`` — a Session or a Connection — is in)."""
    by_tenant: dict[int, list[_Noted]] = {}
    for item in noted:
        by_tenant.setdefault(item.tenant_id, []).append(item)
    dialect = (
        session.dialect.name
        if isinstance(session, sa.Connection)
        else session.get_bind().dialect.name
    )
    for tenant_id in sorted(by_tenant):
        seq, prev = _lock_head(session, tenant_id, dialect)
        rows: list[dict[str, Any]] = []
        for item in by_tenant[tenant_id]:
            seq += 1
            digest = chain_hash(
                prev,
                canonical(
                    tenant_id, seq, item.at, item.actor, item.action, item.object, item.details
                ),
            )
            rows.append(
                {
                    "tenant_id": tenant_id,
                    "seq": seq,
                    "at": item.at,
                    "actor": item.actor,
                    "action": item.action,
                    "object": item.object,
                    "details": item.details,
                    "prev_hash": prev,
                    "hash": digest,
                }
            )
            prev = digest
        # Core executemany on the table: compiled once, batched by the driver (the ORM's
        # bulk path costs more than the insert for the few entries of a transaction).
        session.execute(sa.insert(cast(sa.Table, AuditEntry.__table__)), rows)
        session.execute(
            sa.update(AuditHead)
            .where(AuditHead.tenant_id == tenant_id)
            .values(seq=seq, hash=prev, updated_at=rows[-1]["at"])
        )


def _lock_head(session: Session | sa.Connection, tenant_id: int, dialect: str) -> tuple[int, str]:
    """The tenant's head (last seq and hash), locked for this transaction."""
    query = sa.select(AuditHead.seq, AuditHead.hash).where(AuditHead.tenant_id == tenant_id)
    if dialect == "postgresql":
        query = query.with_for_update()
    head = session.execute(query).one_or_none()
    if head is None:
        from nbcast.db import insert_ignore

        session.execute(
            insert_ignore(
                AuditHead,
                [{"tenant_id": tenant_id, "seq": 0, "hash": GENESIS, "updated_at": None}],
                dialect,
            )
        )
        head = session.execute(query).one()
    return int(head.seq), str(head.hash)


# -- reading and verifying ------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class Break:
    """The first entry at which a tenant's chain does not hold."""

    tenant: str
    seq: int
    """The ``seq`` expected there (for a missing entry) or found there."""
    problem: str

    def __str__(self) -> str:
        return f"tenant {self.tenant}: entry {self.seq}: {self.problem}"


_BATCH = 20_000


def _rows(
    session: Session, tenant_id: int, since: datetime | None = None, until: datetime | None = None
) -> Iterator[Any]:
    """A tenant's entries in ``seq`` order, read in keyset batches."""
    after = 0
    columns = (
        AuditEntry.seq,
        AuditEntry.at,
        AuditEntry.actor,
        AuditEntry.action,
        AuditEntry.object,
        AuditEntry.details,
        AuditEntry.prev_hash,
        AuditEntry.hash,
    )
    while True:
        query = (
            sa.select(*columns)
            .where(AuditEntry.tenant_id == tenant_id, AuditEntry.seq > after)
            .order_by(AuditEntry.seq)
            .limit(_BATCH)
        )
        if since is not None:
            query = query.where(AuditEntry.at >= since)
        if until is not None:
            query = query.where(AuditEntry.at < until)
        batch = session.execute(query).all()
        yield from batch
        if len(batch) < _BATCH:
            return
        after = batch[-1].seq


def chain_rows(session: Session, tenant_id: int, after: int = 0) -> Iterator[tuple[Any, ...]]:
    """``(seq, instant text, actor, action, object, details, prev_hash, hash)`` of a
    tenant's entries after ``seq`` ``after`` in ``seq`` order, the instant formatted by
    the database as the canonical encoding writes it, in keyset batches of plain tuples
    (no per-row type conversion: verifying reads a million of them in seconds)."""
    dialect = session.get_bind().dialect.name
    instant = (
        "to_char(at AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.US\"Z\"')"
        if dialect == "postgresql"
        else "replace(at, ' ', 'T') || 'Z'"  # SQLite keeps 'YYYY-MM-DD HH:MM:SS.ffffff'
    )
    marker = "%s" if dialect == "postgresql" else "?"
    statement = (
        f"SELECT seq, {instant}, actor, action, object, details, prev_hash, hash "
        f"FROM audit_log WHERE tenant_id = {marker} AND seq > {marker} ORDER BY seq "
        f"LIMIT {_BATCH}"
    )
    # The driver's own cursor: rows as plain tuples, no per-row objects on the way.
    cursor = session.connection().connection.cursor()
    try:
        while True:
            cursor.execute(statement, (tenant_id, after))
            batch = cursor.fetchall()
            yield from batch
            if len(batch) < _BATCH:
                return
            after = batch[-1][0]
    finally:
        cursor.close()


def verify_tenant(
    session: Session, tenant_id: int, tenant: str, after: tuple[int, str] | None = None
) -> tuple[int, Break | None]:
    """How many entries of the tenant hold, and the first break (None: all hold).

    ``after`` = ``(seq, hash)`` of an entry known to hold (a checkpoint's): only the
    entries after it are checked, chained from that hash."""
    start, prev = after if after is not None else (0, GENESIS)
    expected, checked = start + 1, 0
    sha256, encode = hashlib.sha256, _encode
    for seq, instant, actor, action, obj, details, prev_hash, digest in chain_rows(
        session, tenant_id, start
    ):
        if seq != expected:
            problem = (
                f"missing (the next entry is {seq})"
                if seq > expected
                else f"out of order (seq {seq} after {expected - 1})"
            )
            return checked, Break(tenant=tenant, seq=expected, problem=problem)
        if prev_hash != prev:
            return checked, Break(
                tenant=tenant,
                seq=seq,
                problem="its previous hash is not the hash of the entry before it "
                "(an entry was inserted, removed or moved)",
            )
        try:
            encoded = encode(tenant_id, seq, instant, actor, action, obj, details)
        except (UnicodeEncodeError, TypeError):  # text no append ever wrote
            encoded = b""
        if sha256(prev.encode("ascii") + b"\n" + encoded).hexdigest() != digest:
            return checked, Break(
                tenant=tenant, seq=seq, problem="its content does not match its hash (edited)"
            )
        prev, expected, checked = digest, expected + 1, checked + 1
    head = session.execute(
        sa.select(AuditHead.seq, AuditHead.hash).where(AuditHead.tenant_id == tenant_id)
    ).one_or_none()
    last = expected - 1
    if head is None:
        if last:
            return checked, Break(tenant=tenant, seq=last, problem="the chain has no head")
        return checked, None
    if (int(head.seq), str(head.hash)) != (last, prev):
        return checked, Break(
            tenant=tenant,
            seq=last + 1 if int(head.seq) > last else int(head.seq),
            problem=f"the head says the chain ends at {head.seq}, it ends at {last} "
            "(entries were removed from the end, or added without the head)",
        )
    return checked, None


def verify(session: Session, tenant_ids: Mapping[int, str]) -> tuple[int, Break | None]:
    """Check the chains of ``tenant_ids`` ({id: name}); how many entries hold, and the
    first break found (tenants in name order)."""
    total = 0
    for tenant_id, name in sorted(tenant_ids.items(), key=lambda item: item[1]):
        checked, broken = verify_tenant(session, tenant_id, name)
        total += checked
        if broken is not None:
            return total, broken
    return total, None


def entries(
    session: Session,
    tenant_id: int,
    tenant: str,
    *,
    since: datetime | None = None,
    until: datetime | None = None,
) -> Iterator[AuditRecord]:
    """The tenant's entries in ``seq`` order, optionally within ``[since, until)``."""
    for row in _rows(session, tenant_id, since, until):
        yield AuditRecord(
            tenant=tenant,
            seq=row.seq,
            at=row.at,
            actor=row.actor,
            action=row.action,
            object=row.object,
            details=json.loads(row.details),
            prev_hash=row.prev_hash,
            hash=row.hash,
        )
