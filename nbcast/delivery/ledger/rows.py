"""Ledger rows and claims: who holds a row, until when, and under which attempt.

- :func:`claim_due` leases due PENDING rows whose renditions are settled
  (``FOR UPDATE SKIP LOCKED`` on PostgreSQL): ``SENDING``, ``attempt + 1``, a lease,
  and an attempt row — committed before anything is sent. The attempt number is the
  fencing token: every later write of that claim names it (:func:`fence`).
- :func:`renew_leases` extends a batch's leases (a heartbeat calls it,
  :class:`LeaseHeartbeat`).
- :func:`release_unsent` gives a claimed row back unsent (its late renditions are
  being rendered): the attempt row is kept, marked ``RELEASED``, and the claim does
  not count against the channel's attempts (``retry_base`` moves with it).
- :func:`reap_expired` returns SENDING rows whose lease ran out (their worker died,
  perhaps after sending) to PENDING flagged ``outcome_unknown``, or fails them once
  their attempts are spent.
- :func:`retry_failed` puts a run's FAILED rows back to PENDING with fresh attempts.

Attempt rows are only added and completed here, never deleted: they are the
evidence (:mod:`nbcast.delivery.models`).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.db import Database
from nbcast.delivery.channels.base import DEFAULT_MAX_ATTEMPTS
from nbcast.delivery.models import (
    DELIVERY_LEASE,
    RENDITION_LEASE,
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryReason,
    DeliveryState,
    Rendition,
    RenditionState,
)
from nbcast.leasing import expired, extended, held, released, rowcount, skip_locked, taken
from nbcast.scheduler.models import Run

__all__ = [
    "REAPER_ATTEMPT_LIMIT",
    "ClaimedDelivery",
    "LeaseHeartbeat",
    "claim_due",
    "fence",
    "reap_expired",
    "release_unsent",
    "renew_leases",
    "retry_failed",
]

log = logging.getLogger("nbcast.delivery.ledger")

REAPER_ATTEMPT_LIMIT = DEFAULT_MAX_ATTEMPTS
"""Claims after which the reaper fails a row whose workers keep dying on it
(``outcome_unknown``), when the row's channel is not configured on the reaping worker
or its ``max_attempts`` is not a whole number; otherwise the channel's own
``max_attempts`` decides (the default of :attr:`Channel.max_attempts
<nbcast.delivery.channels.base.Channel.max_attempts>` is this same value)."""

REAP_BATCH = 500
"""The most expired rows one :func:`reap_expired` call returns."""

_DELIVERIES = cast(sa.Table, Delivery.__table__)
_ATTEMPTS = cast(sa.Table, DeliveryAttempt.__table__)


@dataclass(frozen=True)
class ClaimedDelivery:
    """A ledger row as this worker claimed it: what deciding, composing and sending
    it need, and the attempt that fences every write about it."""

    id: int
    tenant_id: int
    run_id: int
    definition_id: int
    channel: str
    recipient: str
    formats: list[str]
    only_if: str | None
    fire_at: datetime
    attempt: int
    retry_base: int
    outcome_unknown: bool
    version_id: int
    notebook_sha: str | None
    run_kind: str = "scheduled"
    """The run's kind: a backfill or a rerun is neither superseded nor stale
    (:mod:`nbcast.delivery.ledger.decision`)."""


def claim_due(
    db: Database, *, owner: str, now: datetime, lease: timedelta, limit: int
) -> list[ClaimedDelivery]:
    """Lease up to ``limit`` due PENDING rows whose renditions are settled, oldest due
    first (module docstring)."""
    pending_render = sa.exists().where(
        Rendition.run_id == Delivery.run_id, Rendition.state == RenditionState.PENDING.value
    )
    query = (
        sa.select(Delivery.id)
        .where(
            Delivery.state == DeliveryState.PENDING.value,
            Delivery.not_before <= now,
            ~pending_render,
        )
        .order_by(Delivery.not_before, Delivery.id)
        .limit(limit)
    )
    query = skip_locked(db.dialect, query, of=Delivery)
    with db.session() as session:
        ids = list(session.scalars(query))
        if not ids:
            return []
        session.execute(
            sa.update(_DELIVERIES)
            .where(Delivery.id.in_(ids))
            .values(
                state=DeliveryState.SENDING.value,
                updated_at=now,
                **taken(DELIVERY_LEASE, owner, now, lease),
            )
        )
        rows = session.execute(
            sa.select(
                Delivery.id,
                Delivery.tenant_id,
                Delivery.run_id,
                Delivery.definition_id,
                Delivery.channel,
                Delivery.recipient,
                Delivery.formats,
                Delivery.only_if,
                Delivery.fire_at,
                Delivery.attempt,
                Delivery.retry_base,
                Delivery.outcome_unknown,
                Run.version_id,
                Run.artifact_sha256.label("notebook_sha"),
                Run.kind.label("run_kind"),
            )
            .join(Run, Run.id == Delivery.run_id)
            .where(Delivery.id.in_(ids))
            .order_by(Delivery.not_before, Delivery.id)
        ).all()
        session.execute(
            sa.insert(_ATTEMPTS),
            [
                {
                    "tenant_id": r.tenant_id,
                    "delivery_id": r.id,
                    "attempt": r.attempt,
                    "worker": owner,
                    "started_at": now,
                }
                for r in rows
            ],
        )
    return [ClaimedDelivery(**r._mapping) for r in rows]


def fence(row: ClaimedDelivery, owner: str) -> Any:
    """The condition under which a write about ``row`` is still this claim's: same
    attempt, same lease owner, still SENDING."""
    return sa.and_(
        Delivery.id == row.id,
        held(DELIVERY_LEASE, owner, row.attempt),
        Delivery.state == DeliveryState.SENDING.value,
    )


def renew_leases(db: Database, *, owner: str, ids: list[int], until: datetime) -> None:
    """Extend to ``until`` the leases of ``owner``'s SENDING rows among ``ids``."""
    with db.engine.begin() as conn:
        conn.execute(
            sa.update(_DELIVERIES)
            .where(
                Delivery.id.in_(ids),
                held(DELIVERY_LEASE, owner),
                Delivery.state == DeliveryState.SENDING.value,
            )
            .values(**extended(DELIVERY_LEASE, until))
        )


class LeaseHeartbeat:
    """Calls ``renew`` every ``every`` seconds, on a thread of its own, until stopped;
    a failed renewal is logged (sends stop once the lease runs low)."""

    def __init__(self, renew: Callable[[], None], every: float) -> None:
        self._renew = renew
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbcast-ledger-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        while not self._stop.wait(self._every):
            try:
                self._renew()
            except Exception:  # the database is away: sends stop when the lease runs low
                log.warning("could not renew delivery leases", exc_info=True)

    def stop(self) -> None:
        """Stop renewing, and wait for the thread."""
        self._stop.set()
        self._thread.join()


def release_unsent(db: Database, row: ClaimedDelivery, *, owner: str, now: datetime) -> bool:
    """Give ``row`` back unsent, due at once (its late renditions are being rendered,
    and the claim waits for them). Its attempt row stays, marked ``RELEASED``; the
    next claim takes the next attempt number, and ``retry_base`` moves up by one so
    the release costs none of the channel's attempts. False if the row was no longer
    this claim's."""
    with db.engine.begin() as conn:
        result = conn.execute(
            sa.update(_DELIVERIES)
            .where(fence(row, owner))
            .values(
                state=DeliveryState.PENDING.value,
                reason=DeliveryReason.late_renditions.value,
                retry_base=Delivery.retry_base + 1,
                **released(DELIVERY_LEASE),
                not_before=now,
                updated_at=now,
            )
        )
        if not rowcount(result):
            return False
        conn.execute(
            sa.update(_ATTEMPTS)
            .where(
                DeliveryAttempt.delivery_id == row.id,
                DeliveryAttempt.attempt == row.attempt,
            )
            .values(
                outcome=AttemptOutcome.RELEASED.value,
                ended_at=now,
                detail={"reason": DeliveryReason.late_renditions.value},
            )
        )
    return True


def reap_expired(db: Database, *, now: datetime, max_attempts: Callable[[str], object]) -> int:
    """SENDING rows whose lease expired go back to PENDING flagged ``outcome_unknown``
    (``lease_expired``) — or to FAILED (``outcome_unknown``) once they have used their
    channel's attempts (``max_attempts(channel)``; :data:`REAPER_ATTEMPT_LIMIT` when
    that is not a whole number), so a row that kills every worker that sends it stops
    being tried. Their open attempt rows are recorded ``UNKNOWN``. Returns how many,
    at most :data:`REAP_BATCH`."""
    with db.session() as session:
        query = (
            sa.select(Delivery.id, Delivery.attempt, Delivery.retry_base, Delivery.channel)
            .where(Delivery.state == DeliveryState.SENDING.value, expired(DELIVERY_LEASE, now))
            .limit(REAP_BATCH)
        )
        lapsed = session.execute(skip_locked(db.dialect, query)).all()
        for delivery_id, attempt, retry_base, channel in lapsed:
            limit = max_attempts(channel)
            if isinstance(limit, bool) or not isinstance(limit, int):
                limit = REAPER_ATTEMPT_LIMIT  # a broken setting must not stop the reaper
            spent = attempt - retry_base >= limit  # it keeps killing workers: stop
            session.execute(
                sa.update(_DELIVERIES)
                .where(
                    Delivery.id == delivery_id,
                    Delivery.attempt == attempt,
                    Delivery.state == DeliveryState.SENDING.value,
                )
                .values(
                    state=(DeliveryState.FAILED if spent else DeliveryState.PENDING).value,
                    reason=(
                        DeliveryReason.outcome_unknown if spent else DeliveryReason.lease_expired
                    ).value,
                    outcome_unknown=True,
                    **released(DELIVERY_LEASE),
                    not_before=now,
                    updated_at=now,
                )
            )
            session.execute(
                sa.update(_ATTEMPTS)
                .where(
                    DeliveryAttempt.delivery_id == delivery_id,
                    DeliveryAttempt.attempt == attempt,
                    DeliveryAttempt.outcome.is_(None),
                )
                .values(
                    outcome=AttemptOutcome.UNKNOWN.value,
                    ended_at=now,
                    detail={"reason": DeliveryReason.lease_expired.value},
                )
            )
    return len(lapsed)


def retry_failed(
    session: Session, run_id: int, now: datetime, *, tenant_id: int | None = None
) -> int:
    """The run's FAILED deliveries go back to PENDING with a fresh budget of attempts
    (``retry_requested``), and its FAILED renditions are rendered again; SENT
    deliveries are never touched. ``tenant_id`` limits it to one tenant's run. Returns
    how many deliveries. ``nbcast deliver --retry-failed RUN`` calls it through
    :func:`nbcast.delivery.commands.retry_failed_deliveries`, which checks the run is
    the caller's."""
    owned = [Delivery.run_id == run_id]
    if tenant_id is not None:
        owned.append(Delivery.tenant_id == tenant_id)
    result = session.execute(
        sa.update(_DELIVERIES)
        .where(*owned, Delivery.state == DeliveryState.FAILED.value)
        .values(
            state=DeliveryState.PENDING.value,
            reason=DeliveryReason.retry_requested.value,
            retry_base=Delivery.attempt,
            not_before=now,
            updated_at=now,
        )
    )
    count = rowcount(result)
    if count:
        session.execute(
            sa.update(Rendition)
            .where(Rendition.run_id == run_id, Rendition.state == RenditionState.FAILED.value)
            .values(
                state=RenditionState.PENDING.value,
                attempt=0,
                **released(RENDITION_LEASE),
            )
        )
    return count
