"""Leasing: how every leased row is claimed, held, written and taken back — runs,
renditions, deliveries, SLA alerts and the oversight jobs all follow it.

A lease is three columns of the leased row (:class:`LeaseColumns`, declared once per
table next to its model: ``RUN_LEASE``, ``RENDITION_LEASE``, ``DELIVERY_LEASE``,
``ALERT_LEASE``, ``JOB_LEASE``): who holds it (``owner``), until when (``expires``) and
the **fencing token** — a counter the claim increments (a run's, a rendition's or a
delivery's ``attempt``, an alert's ``alert_attempts``; a job has none). The protocol:

1. **claim**: select claimable rows with :func:`skip_locked` — ``FOR UPDATE SKIP
   LOCKED`` on PostgreSQL, so concurrent claimers each take other rows and nobody
   waits; on SQLite one writer at a time needs no row locks — then write :func:`taken`
   (owner, expiry, token + 1) in the same transaction. Claimable is one of two things:
   a row in its waiting *state* (a QUEUED run, a PENDING delivery: the state says it
   is free, and a reaper moves an expired one back), or a row whose lease is
   :func:`free` (renditions, alerts, jobs: no lease, or one that ran out — a
   rendition's ``expires`` doubles as its retry time);
2. **heartbeat**: a long holder pushes ``expires`` forward (:func:`extended`), under
   :func:`held`;
3. **fenced write**: every later write of that claim is ``WHERE`` :func:`held` (the
   owner *and* the token; :func:`held_text` for the batched statements written as
   SQL text): a holder whose lease was taken over writes nothing, and learns so from
   the row count (:func:`rowcount`); the write that ends the claim sets
   :func:`released`;
4. **reap**: a row whose lease ran out (:func:`expired`) belongs to a holder that
   died; a reaper, or the next claim where claimable means :func:`free`, takes it
   back, fenced by the token alone, which tells the two holders apart.

The claim statements themselves stay with their planes — what is claimable, in which
order and under which quota is each plane's own business — and are written with these
pieces, so "a lease" means the same columns and the same fence everywhere.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar, cast

import sqlalchemy as sa

__all__ = [
    "LeaseColumns",
    "expired",
    "extended",
    "free",
    "held",
    "held_text",
    "released",
    "rowcount",
    "skip_locked",
    "taken",
]

_Query = TypeVar("_Query")


def skip_locked(dialect: str, query: _Query, *, of: Any = None, key_share: bool = False) -> _Query:
    """``query`` ``FOR UPDATE SKIP LOCKED`` on PostgreSQL (of the table ``of`` only,
    when given; ``FOR NO KEY UPDATE`` with ``key_share``, which does not block
    foreign-key checks against the row); as it is on SQLite, where one writer at a time
    needs no row locks. The one place nbcast asks for it."""
    if dialect == "postgresql":
        select: Any = query  # any SELECT, whatever its row type
        return cast(_Query, select.with_for_update(skip_locked=True, key_share=key_share, of=of))
    return query


@dataclass(frozen=True)
class LeaseColumns:
    """The lease columns of one leased table (``token`` None: the table has no fencing
    counter of its own)."""

    owner: Any
    expires: Any
    token: Any = None


def free(lease: LeaseColumns, now: datetime) -> Any:
    """No lease, or one that has run out by ``now`` (a lease until ``now`` is over)."""
    return sa.or_(lease.expires.is_(None), lease.expires <= now)


def expired(lease: LeaseColumns, now: datetime) -> Any:
    """A lease that ran out before ``now``: its holder stopped heartbeating (what a
    reaper takes back; rows without a lease never match)."""
    return lease.expires < now


def extended(lease: LeaseColumns, until: datetime) -> dict[str, Any]:
    """The values of a heartbeat: the lease now runs until ``until``."""
    return {lease.expires.key: until}


def held(lease: LeaseColumns, owner: str, token: int | None = None) -> Any:
    """The fence of every write of a claim: still ``owner``'s (and, where the table
    has a token, still the claim numbered ``token``)."""
    if lease.token is None or token is None:
        return lease.owner == owner
    return sa.and_(lease.owner == owner, lease.token == token)


def held_text(lease: LeaseColumns, row: str, *, owner: str, token: str) -> str:
    """:func:`held` as SQL text, for batched statements (``UPDATE … FROM (VALUES …)``):
    the leased row's alias ``row`` still has the owner and token given by the SQL
    expressions ``owner`` and ``token`` (``"f.owner"``, ``":owner"``)."""
    fence = f"{row}.{lease.owner.key} = {owner}"
    if lease.token is None:
        return fence
    return f"{row}.{lease.token.key} = {token} AND {fence}"


def taken(lease: LeaseColumns, owner: str, now: datetime, length: timedelta) -> dict[str, Any]:
    """The values of a claim: ``owner`` holds it for ``length`` from ``now`` (the token,
    where there is one, counts the claim)."""
    values: dict[str, Any] = {lease.owner.key: owner, lease.expires.key: now + length}
    if lease.token is not None:
        values[lease.token.key] = lease.token + 1
    return values


def released(lease: LeaseColumns) -> dict[str, Any]:
    """The values that end a lease (the token stays: it still numbers the last claim)."""
    return {lease.owner.key: None, lease.expires.key: None}


def rowcount(result: Any) -> int:
    """How many rows an UPDATE or DELETE matched (0: a fenced write found its lease
    gone)."""
    return int(getattr(result, "rowcount", 0) or 0)
