"""What happens to a claimed run: fenced start, heartbeats, completion, retries, and
the reaper that takes back what a dead worker held.

**Lease and fencing.** A claim (:mod:`nbcast.executor.queue`) sets ``state = LEASED``,
``lease_owner``, ``lease_expires_at`` and ``attempt = attempt + 1``, and inserts the
attempt's row; it hands the worker a :class:`~nbcast.executor.lease.Lease`. The attempt
number is the fencing token: every later write of that attempt — start, heartbeat,
success, failure — says
``WHERE id = :id AND attempt = :attempt AND lease_owner = :owner AND state IN
('LEASED', 'RUNNING')``, and when it matches no row the attempt has lost the run
(:class:`~nbcast.errors.LeaseLostError`): a worker that was presumed dead cannot
complete it. The LEASED → RUNNING transition commits asynchronously on PostgreSQL, like
the claim: a server crash can only lose leases, and a lost lease is what fencing
handles. A worker records the successes of one poll together
(:meth:`Leases.succeed_many`: one durable transaction, each attempt fenced), and in
that transaction each succeeded run is handed to the delivery plane (an outbox row).

**Retries.** A failed attempt (a cell raised, the worker lost its kernel) is retried
with exponential backoff and full jitter — ``uniform(0, min(cap, base · 2^(n-1)))``,
bounded by :mod:`nbcast.executor.bounds` — until ``max_attempts``; then the run is
FAILED ``max_attempts`` with the last error. A timeout is not retried (TIMED_OUT): a
report that ran out of time once will do so again. A cancel ends the run CANCELLED.
A failure recorded with ``retry=False`` ends the run FAILED at once, with the reason
given (``no_such_kernel``, ``invalid_parameters``, …; :mod:`nbcast.executor.preflight`),
else ``error``. A success may carry a reason too (``ended_early``). The reasons are
:class:`~nbcast.executor.models.RunReason`.

**Reaper and cancels** (:class:`Reaper`, run by every worker at every step). A leased
or running run whose lease has expired goes back to QUEUED (``not_before`` = now +
backoff) with its attempt marked LOST, or to FAILED ``lease_expired`` once it has had
``max_attempts`` attempts. A cancel is a row in ``run_cancel_requests``
(:func:`nbcast.executor.control.cancel_run`, or the scheduler's ``replace`` overlap
policy): the reaper's :meth:`Reaper.cancel_queued` ends QUEUED runs that have one
CANCELLED, and :meth:`Leases.heartbeat` tells the worker running one, which stops its
attempt; the attempt then ends CANCELLED through :meth:`Leases.fail`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.executor import bounds
from nbcast.executor.lease import Backoff, Lease, Success, lease_lost
from nbcast.executor.models import Outcome
from nbcast.executor.quotas import record_usage
from nbcast.executor.sql import ATTEMPTS, OUTBOX, RUNS
from nbcast.leasing import expired, extended, held, held_text, released, rowcount, skip_locked
from nbcast.scheduler.models import LEASED_STATES, RUN_LEASE, CancelRequest, RunReason, RunState
from nbcast.tenancy.budgets import Use, add_usage, usage_day
from nbcast.tenancy.models import DEFAULT_MAX_ATTEMPTS, Tenant

__all__ = ["REAP_BATCH", "Backoff", "Lease", "Leases", "Reaper", "Success", "lease_lost"]
# Backoff, Lease, Success and lease_lost live in nbcast.executor.lease; named here too
# because every writer of a lease works with them.

REAP_BATCH = 500
"""Expired leases the reaper takes back per pass (the rest at the next pass)."""

_LEASED = ", ".join(f"'{s}'" for s in LEASED_STATES)
_HELD = held_text(RUN_LEASE, "r", owner="f.owner", token="f.attempt")
_RELEASED = ", ".join(f"{column} = NULL" for column in released(RUN_LEASE))
# LEASED → RUNNING for many attempts at once, each fenced; returns those still held.
# Committed asynchronously like the claim (migration 0004): losing it in a server
# crash loses a lease, which fencing handles; set_config runs once, in FROM.
_START_MANY = sa.text(
    f"UPDATE runs r SET state = '{RunState.RUNNING}', started_at = :now "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), CAST(:owners AS text[])) "
    "AS f(id, attempt, owner), (SELECT set_config('synchronous_commit', 'off', true)) AS s "
    f"WHERE r.id = f.id AND {_HELD} "
    f"AND r.state IN ({_LEASED}) RETURNING r.id, r.attempt, r.context"
).bindparams(sa.bindparam("now", type_=sa.DateTime(timezone=True)))


# Many fenced successes at once: the runs, then the attempts of the runs that matched,
# and the outbox rows that hand each succeeded run to the delivery plane; with
# ``usage``, also the day's use of their tenants (governance's budgets): one upsert per
# tenant, in tenant order, in the same statement — no round trip of its own.
def _succeed_many(usage: bool) -> sa.TextClause:
    scanned = (", CAST(:bytes AS bigint[])", ", scanned") if usage else ("", "")
    used = (
        ", used AS (INSERT INTO tenant_usage_days AS u (tenant_id, day, cpu_s, warehouse_bytes, "
        "attempts) SELECT d.tenant_id, CAST(:day AS date), "
        "sum(greatest(coalesce(f.cpu, 0), 0)), sum(f.scanned), count(*) "
        "FROM done d JOIN f ON f.id = d.id AND f.attempt = d.attempt "
        "GROUP BY d.tenant_id ORDER BY d.tenant_id "
        "ON CONFLICT (tenant_id, day) DO UPDATE SET cpu_s = u.cpu_s + excluded.cpu_s, "
        "warehouse_bytes = u.warehouse_bytes + excluded.warehouse_bytes, "
        "attempts = u.attempts + excluded.attempts)"
        if usage
        else ""
    )
    return sa.text(
        "WITH f AS (SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), "
        "CAST(:owners AS text[]), CAST(:artifacts AS text[]), CAST(:durations AS float8[]), "
        "CAST(:kernel_starts AS float8[]), CAST(:hosts AS text[]), CAST(:reasons AS text[]), "
        f"CAST(:cpus AS float8[]), CAST(:mems AS float8[]){scanned[0]}) "
        "AS f(id, attempt, owner, artifact, duration, kernel_start, host, reason, cpu, mem"
        f"{scanned[1]})), "
        f"done AS (UPDATE runs r SET state = '{RunState.SUCCEEDED}', finished_at = :now, "
        f"artifact_sha256 = f.artifact, {_RELEASED}, "
        "error = NULL, reason = f.reason FROM f WHERE r.id = f.id "
        f"AND {_HELD} AND r.state IN ({_LEASED}) "
        "RETURNING r.id, r.attempt, r.tenant_id), "
        "handed AS (INSERT INTO delivery_outbox (tenant_id, run_id, created_at) "
        "SELECT tenant_id, id, :now FROM done ON CONFLICT (run_id) DO NOTHING), "
        "ended AS (UPDATE run_attempts a SET ended_at = :now, "
        f"outcome = '{Outcome.SUCCEEDED}', error = NULL, "
        "duration_s = f.duration, kernel_start_s = f.kernel_start, "
        "artifact_sha256 = f.artifact, cpu_s = f.cpu, peak_mem_mb = f.mem, "
        "host = CASE WHEN f.host = '' THEN a.host ELSE f.host END "
        "FROM f JOIN done d ON d.id = f.id AND d.attempt = f.attempt "
        "WHERE a.run_id = f.id AND a.attempt = f.attempt)"
        f"{used} "
        "SELECT id, attempt FROM done"
    ).bindparams(sa.bindparam("now", type_=sa.DateTime(timezone=True)))


_SUCCEED_MANY = _succeed_many(usage=False)
_SUCCEED_MANY_WITH_USAGE = _succeed_many(usage=True)


def _fenced(lease: Lease) -> sa.ColumnElement[bool]:
    return sa.and_(
        RUNS.c.id == lease.run_id,
        held(RUN_LEASE, lease.owner, lease.attempt),
        RUNS.c.state.in_(LEASED_STATES),
    )


def _end_attempt(
    conn: sa.Connection,
    lease: Lease,
    outcome: Outcome,
    now: datetime,
    *,
    error: dict[str, Any] | None = None,
    duration_s: float | None = None,
    kernel_start_s: float | None = None,
    artifact_sha256: str | None = None,
    host: str = "",
    cpu_s: float | None = None,
    peak_mem_mb: float | None = None,
) -> None:
    values: dict[str, Any] = {
        "ended_at": now,
        "outcome": outcome,
        "error": error,
        "duration_s": duration_s,
        "kernel_start_s": kernel_start_s,
        "artifact_sha256": artifact_sha256,
        "cpu_s": cpu_s,
        "peak_mem_mb": peak_mem_mb,
    }
    if host:  # where it actually ran (a Ray node), when not the claiming host
        values["host"] = host
    conn.execute(
        sa.update(ATTEMPTS)
        .where(ATTEMPTS.c.run_id == lease.run_id, ATTEMPTS.c.attempt == lease.attempt)
        .values(**values)
    )


class Leases:
    """The fenced writes of the attempts one worker holds (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        lease: timedelta,
        backoff: Backoff,
        accounting: bool = True,
    ) -> None:
        self.db = db
        self.accounting = accounting
        self.clock = clock
        self.lease = lease
        """How long a heartbeat extends a lease."""
        self.backoff = backoff

    def start(self, lease: Lease) -> Lease:
        """LEASED → RUNNING for this attempt, returned with its run's context;
        LeaseLostError if it is no longer held."""
        started = self.start_many([lease])
        if not started:
            raise lease_lost(lease)
        return started[0]

    def start_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """LEASED → RUNNING for several attempts in one transaction; return the ones
        still held (a lease lost in the meantime is left out, not an error)."""
        if not leases:
            return []
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                held = {
                    (r[0], r[1]): r[2]
                    for r in conn.execute(
                        _START_MANY,
                        {
                            "ids": [lease.run_id for lease in leases],
                            "attempts": [lease.attempt for lease in leases],
                            "owners": [lease.owner for lease in leases],
                            "now": now,
                        },
                    )
                }
                return [
                    replace(lease, context=_json(held[(lease.run_id, lease.attempt)]))
                    for lease in leases
                    if (lease.run_id, lease.attempt) in held
                ]
            kept = []
            for lease in leases:
                result = conn.execute(
                    sa.update(RUNS)
                    .where(_fenced(lease))
                    .values(state=RunState.RUNNING, started_at=now)
                    .returning(RUNS.c.context)
                )
                row = result.first()
                if row is not None:
                    kept.append(replace(lease, context=_json(row[0])))
            return kept

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease; return True if a cancel was requested. LeaseLostError if lost."""
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            result = conn.execute(
                sa.update(RUNS)
                .where(_fenced(lease))
                .values(**extended(RUN_LEASE, now + self.lease))
            )
            if rowcount(result) != 1:
                raise lease_lost(lease)
            return bool(
                conn.scalar(sa.select(sa.exists().where(CancelRequest.run_id == lease.run_id)))
            )

    def succeed(
        self,
        lease: Lease,
        *,
        artifact_sha256: str | None,
        duration_s: float,
        kernel_start_s: float | None = None,
        usage: list[dict[str, Any]] | None = None,
        host: str = "",
        reason: str | None = None,
    ) -> None:
        """Record success (fenced), with the attempt and the warehouse figures."""
        success = Success(
            lease=lease,
            artifact_sha256=artifact_sha256,
            duration_s=duration_s,
            kernel_start_s=kernel_start_s,
            usage=usage or [],
            host=host,
            reason=reason,
        )
        if self.succeed_many([success]):
            raise lease_lost(lease)

    def succeed_many(self, successes: Sequence[Success]) -> list[Success]:
        """Record several successes in one transaction; return the ones refused
        because their lease was lost (the others are recorded all the same).

        Each is fenced exactly as a single success is. On PostgreSQL the runs and
        their attempts are updated by one statement over arrays of the attempts'
        figures; on SQLite, statement by statement in the one transaction.
        """
        if not successes:
            return []
        now = self.clock.now()
        accounted = self.accounting
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                extra: dict[str, Any] = {}
                if accounted:  # the day's use, in the same statement
                    extra = {"bytes": [_scanned(s.usage) for s in successes]}
                    extra["day"] = usage_day(now)
                done = {
                    (r[0], r[1])
                    for r in conn.execute(
                        _SUCCEED_MANY_WITH_USAGE if accounted else _SUCCEED_MANY,
                        {
                            **extra,
                            "ids": [s.lease.run_id for s in successes],
                            "attempts": [s.lease.attempt for s in successes],
                            "owners": [s.lease.owner for s in successes],
                            "artifacts": [s.artifact_sha256 for s in successes],
                            "durations": [s.duration_s for s in successes],
                            "kernel_starts": [s.kernel_start_s for s in successes],
                            "hosts": [s.host for s in successes],
                            "reasons": [s.reason for s in successes],
                            "cpus": [s.cpu_s for s in successes],
                            "mems": [s.peak_mem_mb for s in successes],
                            "now": now,
                        },
                    )
                }
            else:
                done = {
                    (s.lease.run_id, s.lease.attempt)
                    for s in successes
                    if self._succeed_one(conn, s, now)
                }
            uses = [
                Use(s.lease.tenant_id, s.cpu_s or 0.0, _record(conn, s.lease, s.usage, now))
                for s in successes
                if (s.lease.run_id, s.lease.attempt) in done
            ]
            if accounted and self.db.dialect != "postgresql":
                add_usage(conn, uses, now)
        return [s for s in successes if (s.lease.run_id, s.lease.attempt) not in done]

    def _succeed_one(self, conn: sa.Connection, s: Success, now: datetime) -> bool:
        """SQLite: one fenced success, as ``_SUCCEED_MANY`` does each; False if refused."""
        result = conn.execute(
            sa.update(RUNS)
            .where(_fenced(s.lease))
            .values(
                state=RunState.SUCCEEDED,
                finished_at=now,
                artifact_sha256=s.artifact_sha256,
                **released(RUN_LEASE),
                error=None,
                reason=s.reason,
            )
        )
        if rowcount(result) != 1:
            return False
        handed = {"tenant_id": s.lease.tenant_id, "run_id": s.lease.run_id, "created_at": now}
        conn.execute(insert_ignore(OUTBOX, [handed], "sqlite"))
        _end_attempt(
            conn,
            s.lease,
            Outcome.SUCCEEDED,
            now,
            duration_s=s.duration_s,
            kernel_start_s=s.kernel_start_s,
            artifact_sha256=s.artifact_sha256,
            host=s.host,
            cpu_s=s.cpu_s,
            peak_mem_mb=s.peak_mem_mb,
        )
        return True

    def fail(
        self,
        lease: Lease,
        error: dict[str, Any],
        *,
        outcome: RunState = RunState.FAILED,
        duration_s: float | None = None,
        artifact_sha256: str | None = None,
        usage: list[dict[str, Any]] | None = None,
        retry: bool = True,
        host: str = "",
        reason: str | None = None,
        cpu_s: float | None = None,
        peak_mem_mb: float | None = None,
    ) -> RunState:
        """Record a failed attempt (fenced); retry with backoff if attempts remain.

        ``outcome`` is FAILED, TIMED_OUT or CANCELLED; only FAILED is retried, and only
        with ``retry``. A FAILED run that ends gets ``reason`` when given (a permanent
        failure's), else ``max_attempts`` / ``error``. Returns the run's new state.
        """
        now = self.clock.now()
        retryable = outcome is RunState.FAILED and retry
        values: dict[str, Any] = {**released(RUN_LEASE), "error": error}
        if retryable and lease.attempt < lease.quota.max_attempts:
            state = RunState.QUEUED
            values.update(not_before=now + self.backoff.delay(lease.attempt))
            values.update(reason=RunReason.retry)
        else:
            state = outcome
            values.update(finished_at=now, artifact_sha256=artifact_sha256)
            values.update(reason=_ending_reason(outcome, reason, retryable=retryable))
        with self.db.engine.begin() as conn:
            result = conn.execute(
                sa.update(RUNS).where(_fenced(lease)).values(state=state, **values)
            )
            if rowcount(result) != 1:
                raise lease_lost(lease)
            _end_attempt(
                conn,
                lease,
                Outcome(outcome.value),
                now,
                error=error,
                duration_s=duration_s,
                artifact_sha256=artifact_sha256,
                host=host,
                cpu_s=cpu_s,
                peak_mem_mb=peak_mem_mb,
            )
            scanned = _record(conn, lease, usage or [], now)
            if self.accounting:
                add_usage(conn, [Use(lease.tenant_id, cpu_s or 0.0, scanned)], now)
        return state


def _scanned(usage: list[dict[str, Any]]) -> int:
    """The bytes ``usage``'s queries read, as :func:`record_usage` counts them."""
    return sum(bounds.counter(item.get("bytes", 0)) for item in usage)


def _ending_reason(outcome: RunState, reason: str | None, *, retryable: bool) -> str:
    """The reason of a run ended by a failed attempt (module docstring: Retries)."""
    if outcome is RunState.TIMED_OUT:
        return RunReason.timeout
    if outcome is RunState.CANCELLED:
        return RunReason.cancelled
    if reason is not None:
        return reason
    return RunReason.max_attempts if retryable else RunReason.error


def _record(conn: sa.Connection, lease: Lease, usage: list[dict[str, Any]], now: datetime) -> int:
    return record_usage(
        conn,
        tenant_id=lease.tenant_id,
        run_id=lease.run_id,
        attempt=lease.attempt,
        usage=usage,
        now=now,
    )


class Reaper:
    """Takes back expired leases and honours cancel requests of QUEUED runs; every
    worker runs it at every step, for every worker's runs (module docstring)."""

    def __init__(self, db: Database, clock: Clock, *, backoff: Backoff) -> None:
        self.db = db
        self.clock = clock
        self.backoff = backoff

    def reap(self) -> int:
        """Return runs with expired leases to the queue (or FAILED); return how many."""
        now = self.clock.now()
        count = 0
        with self.db.session() as session:
            lapsed = session.execute(
                skip_locked(
                    self.db.dialect,
                    sa.select(RUNS.c.id, RUNS.c.attempt, RUNS.c.tenant_id)
                    .where(RUNS.c.state.in_(LEASED_STATES), expired(RUN_LEASE, now))
                    .limit(REAP_BATCH),
                )
            ).all()
            if not lapsed:
                return 0
            attempts = dict(
                session.execute(sa.select(Tenant.id, Tenant.max_attempts)).tuples().all()
            )
            conn = session.connection()
            for run_id, attempt, tenant_id in lapsed:
                lost = {
                    "reason": RunReason.lease_expired.value,
                    "message": f"attempt {attempt} stopped heartbeating",
                }
                values: dict[str, Any] = {"reason": RunReason.lease_expired}
                if attempt >= attempts.get(tenant_id, DEFAULT_MAX_ATTEMPTS):
                    values.update(state=RunState.FAILED, finished_at=now)
                else:
                    retry_at = now + self.backoff.delay(attempt)
                    values.update(state=RunState.QUEUED, not_before=retry_at)
                conn.execute(
                    sa.update(RUNS)
                    .where(
                        RUNS.c.id == run_id,
                        RUNS.c.attempt == attempt,
                        RUNS.c.state.in_(LEASED_STATES),
                    )
                    .values(**released(RUN_LEASE), error=lost, **values)
                )
                conn.execute(
                    sa.update(ATTEMPTS)
                    .where(
                        ATTEMPTS.c.run_id == run_id,
                        ATTEMPTS.c.attempt == attempt,
                        ATTEMPTS.c.outcome.is_(None),
                    )
                    .values(outcome=Outcome.LOST, ended_at=now, error=lost)
                )
                count += 1
        return count

    def cancel_queued(self) -> int:
        """QUEUED runs with a cancel request become CANCELLED; return how many."""
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            result = conn.execute(
                sa.update(RUNS)
                .where(
                    RUNS.c.state == RunState.QUEUED,
                    sa.exists().where(CancelRequest.run_id == RUNS.c.id),
                )
                .values(state=RunState.CANCELLED, reason=RunReason.cancelled, finished_at=now)
            )
            return rowcount(result)


def _json(value: Any) -> dict[str, Any] | None:
    """A JSON column's value as read through a text statement (a dict, or its text)."""
    if value is None or isinstance(value, dict):
        return value
    loaded = json.loads(value)
    return loaded if isinstance(loaded, dict) else None
