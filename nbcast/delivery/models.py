"""The delivery plane's tables: the outbox, renditions, the ledger, and what recipients
asked for (unsubscribes) or were given (signed links).

Ownership: the executor *inserts* an outbox row in the transaction that ends a run
successfully; every other write here is the delivery plane's, and the delivery plane
never writes the scheduler's or the executor's tables.

- ``delivery_outbox``: one row per succeeded run (unique ``run_id``), consumed once
  (``consumed_at``) into renditions and ledger rows — idempotently, so a replayed
  outbox row adds nothing.
- ``renditions``: one row per (run, format, variant) to render — ``variant`` is
  ``""`` or ``"late"`` (with the staleness banner) — and, once rendered, the sha256
  of the bytes in the artifact store.
- ``deliveries``: the ledger, one row per (run, channel, recipient), unique on that
  triple. ``PENDING → SENDING → SENT | FAILED | SUPPRESSED``
  (:class:`DeliveryState`, with a :class:`DeliveryReason`); ``attempt`` counts
  claims (it is the fencing token of the latest one), ``possible_duplicate`` is set
  when a send had to be repeated without being able to check whether the earlier one
  arrived.
- ``delivery_attempts``: every claim of a delivery and what came of it (the
  channel's answer, a suppression, or a release unsent): the auditable evidence.
  Rows are only ever added and completed, never deleted; an attempt number is never
  reused.
- ``unsubscriptions``: a recipient's opt-out of one report (``scope`` = the
  definition's name) or of all the tenant's reports (``scope = "*"``) on a channel.
- ``signed_links``: links handed out by the ``link`` channel, so they can expire and
  be revoked.
- ``link_opens``: every time a signed link was opened (served) — when, from which
  network (the address truncated, never stored whole) and with which user agent
  (:mod:`nbcast.delivery.link_opens`).
"""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Mapped, mapped_column

from nbcast.db import Base, JSONType, utcnow
from nbcast.leasing import LeaseColumns

__all__ = [
    "DELIVERY_LEASE",
    "RENDITION_LEASE",
    "AttemptOutcome",
    "Delivery",
    "DeliveryAttempt",
    "DeliveryReason",
    "DeliveryState",
    "LinkOpen",
    "Rendition",
    "RenditionState",
    "SignedLink",
    "Unsubscription",
]

_BIGINT = sa.BigInteger().with_variant(sa.Integer, "sqlite")


class DeliveryState(StrEnum):
    """Where a ledger row is."""

    PENDING = "PENDING"
    """Waiting to be claimed (from ``not_before`` on)."""
    SENDING = "SENDING"
    """Claimed by a worker whose lease runs until ``lease_expires_at``."""
    SENT = "SENT"
    """The channel accepted it (or a check found an earlier send); ``receipt`` says how."""
    FAILED = "FAILED"
    """Given up, with a reason; ``nbcast deliver --retry-failed`` tries it again."""
    SUPPRESSED = "SUPPRESSED"
    """Decided not to send, with a reason; final."""


class DeliveryReason(StrEnum):
    """Why a ledger row is where it is (``deliveries.reason``); None on a row sent or
    waiting for its first try."""

    unsubscribed = "unsubscribed"
    """SUPPRESSED: the recipient opted out of this report, or of every report."""
    superseded = "superseded"
    """SUPPRESSED: this recipient already received a newer slot of the definition."""
    stale = "stale"
    """SUPPRESSED: later than ``staleness.after`` and the action is ``suppress``."""
    no_results = "no_results"
    """SUPPRESSED: ``only_if: results`` and no marked table has a row."""
    unchanged = "unchanged"
    """SUPPRESSED: ``only_if: changed`` and the report shows what the last one did."""
    render_failed = "render_failed"
    """FAILED: a rendition the delivery needs could not be rendered."""
    refused = "refused"
    """FAILED: the channel refused for good (a permanent error)."""
    max_attempts = "max_attempts"
    """FAILED: transient errors until the channel's ``max_attempts`` were spent."""
    outcome_unknown = "outcome_unknown"
    """FAILED: attempts spent while the last one may have arrived (a timeout after
    sending, or workers that kept dying on the row)."""
    lease_expired = "lease_expired"
    """PENDING: its worker's lease ran out mid-send (the reaper returned it); checked
    with the channel before it is sent again."""
    prepare_failed = "prepare_failed"
    """FAILED: deciding or composing it raised (its notebook gone, a version that no
    longer parses)."""
    internal_error = "internal_error"
    """FAILED: handling it raised (a channel's bug, an answer that cannot be stored)."""
    no_channel = "no_channel"
    """FAILED: its channel is not configured on the worker that claimed it."""
    retry = "retry"
    """PENDING: a transient error; due again after the channel's backoff."""
    retry_requested = "retry_requested"
    """PENDING: a person asked for FAILED rows to be sent again, with fresh attempts."""
    lease_low = "lease_low"
    """PENDING: too little of the worker's lease was left to start the send."""
    late_renditions = "late_renditions"
    """PENDING: released unsent while its late (bannered) renditions are rendered."""


class AttemptOutcome(StrEnum):
    """What came of one claim of a delivery (``delivery_attempts.outcome``); None
    while in flight, and left None by a worker that died (the reaper then records
    ``UNKNOWN``)."""

    SENT = "SENT"
    """The channel accepted the message; ``detail`` holds its receipt."""
    FOUND = "FOUND"
    """An earlier send was found by the channel's check; nothing was sent again."""
    RETRY = "RETRY"
    """A transient error (or too little lease left): the row is due again later."""
    FAILED = "FAILED"
    """The row failed (``detail`` holds the error or the reason)."""
    UNKNOWN = "UNKNOWN"
    """It may have been sent: a timeout after sending, or its worker's lease expired."""
    SUPPRESSED = "SUPPRESSED"
    """Decided not to send (``detail`` holds the reason)."""
    RELEASED = "RELEASED"
    """Given back unsent, to be claimed again once its late renditions are ready; it
    does not count against the channel's attempts."""


class RenditionState(StrEnum):
    """Where a rendition is."""

    PENDING = "PENDING"
    """To render (again, after a failed attempt, once its backoff is over)."""
    DONE = "DONE"
    """Rendered: ``sha256`` names the bytes in the artifact store."""
    FAILED = "FAILED"
    """Its attempts are spent; the deliveries that need it fail (``render_failed``)."""


class Rendition(Base):
    """One format of one run, to render or rendered."""

    __tablename__ = "renditions"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "format", "variant", name="uq_renditions_run_format"),
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"))
    format: Mapped[str] = mapped_column(sa.String(16))
    variant: Mapped[str] = mapped_column(sa.String(16), default="")
    state: Mapped[str] = mapped_column(sa.String(16), default=RenditionState.PENDING.value)
    attempt: Mapped[int] = mapped_column(default=0)
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    """While rendering: until when the renderer holds it. After a failed attempt: when
    it may be tried again."""
    sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)
    size: Mapped[int | None] = mapped_column(sa.BigInteger, default=None)
    filename: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    media_type: Mapped[str | None] = mapped_column(sa.String(128), default=None)
    seconds: Mapped[float | None] = mapped_column(default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    rendered_at: Mapped[datetime | None] = mapped_column(default=None)


RENDITION_LEASE = LeaseColumns(
    Rendition.lease_owner,
    Rendition.lease_expires_at,
    Rendition.attempt,
)
"""A rendition's lease (:mod:`nbcast.leasing`): the delivery worker rendering it, until
when (after a failure: when it may be tried again), and the attempt as its token."""


class Delivery(Base):
    """The ledger: one report run to one recipient over one channel."""

    __tablename__ = "deliveries"
    __table_args__ = (
        sa.UniqueConstraint("run_id", "channel", "recipient", name="uq_deliveries_run_recipient"),
        sa.Index(
            "ix_deliveries_due",
            "not_before",
            "id",
            postgresql_where=sa.text("state = 'PENDING'"),
            sqlite_where=sa.text("state = 'PENDING'"),
        ),
        sa.Index(
            "ix_deliveries_sending",
            "lease_expires_at",
            postgresql_where=sa.text("state = 'SENDING'"),
            sqlite_where=sa.text("state = 'SENDING'"),
        ),
        sa.Index("ix_deliveries_recipient", "definition_id", "channel", "recipient", "fire_at"),
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    definition_id: Mapped[int] = mapped_column(sa.ForeignKey("report_definitions.id"))
    channel: Mapped[str] = mapped_column(sa.String(32))
    recipient: Mapped[str] = mapped_column(sa.String(512))
    formats: Mapped[list[str]] = mapped_column(JSONType)
    only_if: Mapped[str | None] = mapped_column(sa.String(16), default=None)
    fire_at: Mapped[datetime]
    """The run's slot instant: "newer slot" means a later ``fire_at``."""
    state: Mapped[str] = mapped_column(sa.String(16), default=DeliveryState.PENDING.value)
    reason: Mapped[str | None] = mapped_column(sa.String(32), default=None)
    """A :class:`DeliveryReason`, or None."""
    attempt: Mapped[int] = mapped_column(default=0)
    """How many times the row was claimed: the number of its latest attempt row, and
    the fencing token of that claim."""
    retry_base: Mapped[int] = mapped_column(default=0)
    """Claims that do not count against the channel's max attempts: ``attempt`` when a
    person last asked for a retry, plus one for every claim released unsent since
    (``RELEASED``). The channel's max attempts count from here."""
    not_before: Mapped[datetime]
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    outcome_unknown: Mapped[bool] = mapped_column(default=False)
    """The last attempt may have arrived (a timeout after sending, or a worker that
    died between send and record): check with the channel before sending again."""
    possible_duplicate: Mapped[bool] = mapped_column(default=False)
    content_sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)
    """A digest of what the report showed (its cells and outputs, not the rendered
    files, whose header differs for every run): ``only_if: changed`` compares it."""
    receipt: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    sent_at: Mapped[datetime | None] = mapped_column(default=None)
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)


DELIVERY_LEASE = LeaseColumns(
    Delivery.lease_owner,
    Delivery.lease_expires_at,
    Delivery.attempt,
)
"""A ledger row's lease (:mod:`nbcast.leasing`): the sender holding it, until when,
and the attempt as its fencing token."""


class DeliveryAttempt(Base):
    """One claim of a delivery and what came of it: evidence, never deleted."""

    __tablename__ = "delivery_attempts"
    __table_args__ = (
        sa.UniqueConstraint("delivery_id", "attempt", name="uq_delivery_attempts_attempt"),
    )

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    delivery_id: Mapped[int] = mapped_column(sa.ForeignKey("deliveries.id"))
    attempt: Mapped[int]
    worker: Mapped[str] = mapped_column(sa.String(255))
    started_at: Mapped[datetime]
    ended_at: Mapped[datetime | None] = mapped_column(default=None)
    outcome: Mapped[str | None] = mapped_column(sa.String(16), default=None)
    """An :class:`AttemptOutcome`; None while in flight (a worker that died leaves it
    None until the reaper records ``UNKNOWN``)."""
    detail: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)


class Unsubscription(Base):
    """A recipient's opt-out (module docstring)."""

    __tablename__ = "unsubscriptions"
    __table_args__ = (
        sa.UniqueConstraint(
            "tenant_id", "scope", "channel", "recipient", name="uq_unsubscriptions_scope"
        ),
    )

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    scope: Mapped[str] = mapped_column(sa.String(128))
    """A definition's name, or ``*`` for every report of the tenant."""
    channel: Mapped[str] = mapped_column(sa.String(32))
    recipient: Mapped[str] = mapped_column(sa.String(512))
    source: Mapped[str] = mapped_column(sa.String(32))
    """``one-click`` (RFC 8058 POST), ``link`` (the URL opened) or ``cli``."""
    created_at: Mapped[datetime] = mapped_column(default=utcnow)


class SignedLink(Base):
    """A signed link to one rendered file (the ``link`` channel)."""

    __tablename__ = "signed_links"
    # A token names its link by id: never reused on SQLite either (migration 0018).
    __table_args__ = ({"sqlite_autoincrement": True},)

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    delivery_id: Mapped[int | None] = mapped_column(sa.ForeignKey("deliveries.id"), default=None)
    recipient: Mapped[str] = mapped_column(sa.String(512))
    sha256: Mapped[str] = mapped_column(sa.String(64))
    filename: Mapped[str] = mapped_column(sa.String(255))
    media_type: Mapped[str] = mapped_column(sa.String(128))
    key_id: Mapped[str] = mapped_column(sa.String(32))
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None] = mapped_column(default=None)


class LinkOpen(Base):
    """One opening of a signed link: evidence that the report was fetched
    (:mod:`nbcast.delivery.link_opens` says what is kept and why)."""

    __tablename__ = "link_opens"

    id: Mapped[int] = mapped_column(_BIGINT, primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    link_id: Mapped[int] = mapped_column(sa.ForeignKey("signed_links.id"), index=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    delivery_id: Mapped[int | None] = mapped_column(sa.ForeignKey("deliveries.id"), default=None)
    opened_at: Mapped[datetime]
    network: Mapped[str] = mapped_column(sa.String(64))
    """The client's address truncated to its network (IPv4 /24, IPv6 /48)."""
    user_agent: Mapped[str] = mapped_column(sa.String(256))
