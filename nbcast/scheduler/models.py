"""Tables owned by the scheduling plane: each definition's schedule state, and the
``runs`` it makes — one row per slot (a run, or a SKIPPED / MISSED record that says
why), one per manual run or rerun.

The scheduler *inserts* runs — QUEUED, or SKIPPED / MISSED with a reason — and the
execution plane owns every later change (leases, attempts, outcomes): the run row is
the contract between the two, kept here, below the executor, so that the planes stack
in the data's order. A cancellation asked for by another plane (for example the
``replace`` overlap policy) is a row in ``run_cancel_requests`` that the executor
honours, never an update of ``runs`` from outside.
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
    "ACTIVE_STATES",
    "DELIBERATE_KINDS",
    "FINISHED_STATES",
    "LEASED_STATES",
    "RUN_LEASE",
    "CancelReason",
    "CancelRequest",
    "Run",
    "RunKind",
    "RunReason",
    "RunState",
    "ScheduleState",
]


class ScheduleState(Base):
    """The scheduler's bookkeeping for one definition.

    ``watermark`` is the fire time of the last materialized slot (or, before the
    first slot, the instant materialization starts from). ``next_fire_at`` is the
    first fire time after it, so finding due work is one indexed range scan — or,
    after a failure, when to try again.
    ``schedule_version`` is the version whose schedule is compiled; a newer version
    takes effect after the watermark.
    """

    __tablename__ = "schedule_states"
    __table_args__ = (sa.Index("ix_schedule_states_due", "paused", "next_fire_at"),)

    definition_id: Mapped[int] = mapped_column(
        sa.ForeignKey("report_definitions.id"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    schedule_version: Mapped[int]
    watermark: Mapped[datetime]
    next_fire_at: Mapped[datetime | None]
    paused: Mapped[bool] = mapped_column(default=False)
    paused_at: Mapped[datetime | None]
    updated_at: Mapped[datetime] = mapped_column(default=utcnow)
    updated_by: Mapped[str] = mapped_column(sa.String(128), default="")
    error: Mapped[str | None] = mapped_column(sa.Text, default=None)
    """Why the last attempt to materialize this definition failed (None: it did not).
    The definition is retried at ``next_fire_at``, with backoff; the others go on."""
    failures: Mapped[int] = mapped_column(default=0, server_default="0")
    """Failures in a row (the backoff's exponent); 0 after a success."""
    failed_at: Mapped[datetime | None] = mapped_column(default=None)


class RunState(StrEnum):
    """Where a run is. SKIPPED and MISSED are terminal and created so, with a reason."""

    QUEUED = "QUEUED"
    """Waiting for a worker (from ``not_before`` on): new, or back for a retry."""
    LEASED = "LEASED"
    """Claimed by a worker (``lease_owner``) for attempt ``attempt``, not yet started."""
    RUNNING = "RUNNING"
    """Its attempt is executing; the worker renews the lease with heartbeats."""
    SUCCEEDED = "SUCCEEDED"
    """Ended well (perhaps ``ended_early``); handed to the delivery plane."""
    FAILED = "FAILED"
    """Ended badly, for good: the reason says why (:class:`RunReason`)."""
    TIMED_OUT = "TIMED_OUT"
    """Its attempt ran past the quota's run timeout (not retried)."""
    CANCELLED = "CANCELLED"
    """A cancel request was honoured."""
    SKIPPED = "SKIPPED"
    """Recorded by the scheduler instead of a run (DST gap, overlap, pause)."""
    MISSED = "MISSED"
    """Recorded by the scheduler for a slot it was too late for (misfire policy)."""


ACTIVE_STATES = (RunState.QUEUED, RunState.LEASED, RunState.RUNNING)
"""States in which a run counts as 'still queued or running' for the overlap policy."""

LEASED_STATES = (RunState.LEASED, RunState.RUNNING)
"""States in which a run is held by a worker's lease: the only ones a fenced write
of an attempt may change."""

FINISHED_STATES = tuple(s for s in RunState if s not in ACTIVE_STATES)
"""Terminal states: nothing changes a run in one of these any more."""


class RunReason(StrEnum):
    """Why the executor put a run where it is (the ``runs.reason`` column).

    The scheduler writes its own reasons on the runs it records without running
    (:class:`nbcast.definitions.compiler.SlotReason`); these are the executor's.
    """

    retry = "retry"
    """QUEUED again after a failed attempt, until ``not_before`` (backoff)."""
    error = "error"
    """FAILED by an attempt whose failure was not to be retried (``retry=False``)."""
    max_attempts = "max_attempts"
    """FAILED after its tenant's ``max_attempts`` attempts failed; the last error kept."""
    timeout = "timeout"
    """TIMED_OUT: the attempt ran past the quota's run timeout."""
    cancelled = "cancelled"
    """CANCELLED: a cancel request (``nbcast cancel``, the ``replace`` overlap policy)."""
    lease_expired = "lease_expired"
    """QUEUED again (or FAILED, out of attempts) by the reaper: the worker holding the
    lease stopped heartbeating."""
    budget = "budget"
    """QUEUED, waiting: the tenant's daily budget is spent; leased the next UTC day
    (:mod:`nbcast.tenancy.budgets`)."""
    budget_exceeded = "budget_exceeded"
    """FAILED at claim by the monthly warehouse budget of earlier releases (replaced by
    daily budgets that hold runs instead): kept so those runs still read."""
    ended_early = "ended_early"
    """SUCCEEDED, but the notebook stopped itself with ``sys.exit()`` part-way
    (:mod:`nbcast.executor.early_exit`)."""
    no_such_kernel = "no_such_kernel"
    """FAILED at once: the notebook's kernelspec is not installed where it ran."""
    invalid_parameters = "invalid_parameters"
    """FAILED at once: the parameters do not validate against the pinned notebook."""
    invalid_notebook = "invalid_notebook"
    """FAILED at once: the pinned version is not a notebook papermill can run."""
    submit_refused = "submit_refused"
    """FAILED at once: the engine refused the attempt's job as it is."""
    language_mismatch = "language_mismatch"
    """FAILED at once: the notebook declares a language other than its kernel's
    (:mod:`nbcast.definitions.kernelspec_check`)."""
    output_too_large = "output_too_large"
    """FAILED at once: the run sent more output than its limits allow
    (:mod:`nbcast.executor.output_limits`)."""
    notebook_error = "notebook_error"
    """FAILED after one attempt: the report's own code raised an exception that its
    definition's ``retry_on`` does not list (another attempt would raise it again)."""


class RunKind(StrEnum):
    """Why a run exists."""

    scheduled = "scheduled"
    """A slot of the definition's schedule."""
    backfill = "backfill"
    """A past slot materialized on request (``nbcast backfill``)."""
    manual = "manual"
    """Asked for by a person (``nbcast run``); it has no slot."""
    rerun = "rerun"
    """Another run again (``rerun_of``): its version, parameters and context, no slot
    of its own."""
    test = "test"
    """A try-out (``nbcast run --test``), of the latest version or of one slot (a dry
    run): rendered like any run, delivered only to ``test_to``, and counted for
    nothing — no SLA, overlap, superseding, ``only_if`` baseline or recipient's ledger
    (:mod:`nbcast.scheduler.trial`). No slot of its own: a dry run's slot is in its
    context."""


DELIBERATE_KINDS = frozenset({RunKind.backfill, RunKind.rerun, RunKind.test})
"""Runs asked for on purpose for a period that has passed (or, a test, for no one):
their deliveries are never superseded or stale, and supersede nothing
(:mod:`nbcast.delivery.ledger.decision`)."""


class Run(Base):
    """One slot's record (a run, or why there is none), or one manual run."""

    __tablename__ = "runs"
    __table_args__ = (
        sa.UniqueConstraint(
            "definition_id", "slot_key", "audience", name="uq_runs_definition_slot"
        ),
        sa.Index(
            "ix_runs_active",
            "definition_id",
            "state",
            postgresql_where=sa.text("state IN ('QUEUED', 'LEASED', 'RUNNING')"),
            sqlite_where=sa.text("state IN ('QUEUED', 'LEASED', 'RUNNING')"),
        ),
        sa.Index(
            "ix_runs_queue",
            "tenant_id",
            "not_before",
            "id",
            postgresql_where=sa.text("state = 'QUEUED'"),
            sqlite_where=sa.text("state = 'QUEUED'"),
        ),
        sa.Index("ix_runs_tenant_fire", "tenant_id", "fire_at", "id"),
        sa.Index("ix_runs_definition_fire", "definition_id", "fire_at"),
        sa.Index(
            "ix_runs_rerun_of",
            "rerun_of",
            postgresql_where=sa.text("rerun_of IS NOT NULL"),
            sqlite_where=sa.text("rerun_of IS NOT NULL"),
        ),
        sa.Index(
            "ix_runs_leased",
            "tenant_id",
            "lease_expires_at",
            postgresql_where=sa.text("state IN ('LEASED', 'RUNNING')"),
            sqlite_where=sa.text("state IN ('LEASED', 'RUNNING')"),
        ),
    )

    id: Mapped[int] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True
    )
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"))
    definition_id: Mapped[int] = mapped_column(sa.ForeignKey("report_definitions.id"))
    version_id: Mapped[int] = mapped_column(sa.ForeignKey("definition_versions.id"))
    version: Mapped[int]
    kind: Mapped[str] = mapped_column(sa.String(16))
    slot_key: Mapped[str | None] = mapped_column(sa.String(32))
    audience: Mapped[str] = mapped_column(sa.String(16), default="", server_default="")
    """The recipient scope this run is for (``""``: the base audience): a slot has one
    row per audience (:mod:`nbcast.definitions.audiences`)."""
    row_filter: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """The audience's row-filter attributes, applied by the warehouse to every query."""
    fire_at: Mapped[datetime]
    state: Mapped[str] = mapped_column(sa.String(16))
    reason: Mapped[str | None] = mapped_column(sa.String(32))
    """Why it is in its state: a :class:`RunReason`, or the scheduler's reason."""
    parameters: Mapped[dict[str, Any]] = mapped_column(JSONType)
    """The literal values the notebook runs with (bindings resolved when the row was made)."""
    context: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    """The run's frozen context: kind, slot, zone, nominal time, fire time, data interval
    (:mod:`nbcast.scheduler.period`); the same for every attempt."""
    rerun_of: Mapped[int | None] = mapped_column(
        sa.BigInteger().with_variant(sa.Integer, "sqlite"), default=None
    )
    """The run a ``rerun`` repeats (no foreign key: retention may delete it first)."""
    serial: Mapped[bool] = mapped_column(default=True)
    """Runs one at a time with the definition's other runs (every overlap policy but
    ``allow``; manual runs are never serial)."""
    not_before: Mapped[datetime]
    created_at: Mapped[datetime] = mapped_column(default=utcnow)
    # Owned by the execution plane from here on.
    attempt: Mapped[int] = mapped_column(default=0, server_default="0")
    """The current attempt number: the fencing token of every write of that attempt."""
    lease_owner: Mapped[str | None] = mapped_column(sa.String(255), default=None)
    lease_expires_at: Mapped[datetime | None] = mapped_column(default=None)
    started_at: Mapped[datetime | None] = mapped_column(default=None)
    finished_at: Mapped[datetime | None] = mapped_column(default=None)
    artifact_sha256: Mapped[str | None] = mapped_column(sa.String(64), default=None)
    error: Mapped[dict[str, Any] | None] = mapped_column(JSONType, default=None)
    test_to: Mapped[list[str] | None] = mapped_column(JSONType, default=None)
    """A test run's addresses (``[]``: no one); None for every other kind. Written by
    the scheduler with the row, read by delivery's intake instead of the
    subscriptions."""


RUN_LEASE = LeaseColumns(Run.lease_owner, Run.lease_expires_at, Run.attempt)
"""A run's lease (:mod:`nbcast.leasing`): the worker that holds it, until when, and the
attempt as its fencing token."""


class CancelReason(StrEnum):
    """Who asked for a cancel (the ``reason`` of a :class:`CancelRequest`)."""

    cancel = "cancel"
    """A person (``nbcast cancel``, the API, the status page)."""
    replaced = "replaced"
    """The scheduler, for a newer slot under the ``replace`` overlap policy."""


class CancelRequest(Base):
    """A request to cancel a run — from a person (:func:`nbcast.executor.control.cancel_run`)
    or another plane (the ``replace`` overlap policy). The only way a run is cancelled:
    a worker honours it, a QUEUED run at its next step and a running one at its next
    heartbeat. A claim never leases a run with a request."""

    __tablename__ = "run_cancel_requests"

    id: Mapped[int] = mapped_column(primary_key=True)
    tenant_id: Mapped[int] = mapped_column(sa.ForeignKey("tenants.id"), index=True)
    run_id: Mapped[int] = mapped_column(sa.ForeignKey("runs.id"), index=True)
    reason: Mapped[str] = mapped_column(sa.String(32))
    """A :class:`CancelReason`."""
    requested_by: Mapped[str] = mapped_column(sa.String(128))
    requested_at: Mapped[datetime] = mapped_column(default=utcnow)
