"""The run queue: claims, leases, fencing, heartbeats, completion, retries, the reaper.

**Claim.** A worker asks for up to ``limit`` runs. Tenants with due QUEUED work are
ordered by how far they are below their share (``active runs / share``, lowest
first), so one tenant's backlog of 10,000 runs cannot starve another tenant's single
run: the small tenant is at 0 active and goes first in the very next claim. For
each tenant in that order the claim locks the tenant's row (``FOR NO KEY UPDATE
SKIP LOCKED`` on PostgreSQL — claims for one tenant are serialized, claims for
different tenants proceed in parallel), recounts its active runs *under that lock*,
and takes at most ``max_concurrent_runs - active`` runs with ``FOR UPDATE SKIP
LOCKED``. So no number of concurrent workers can push a tenant past its concurrency
quota. A run is skipped while a cancel has been requested for it, and a *serial* run
(every overlap policy but ``allow``) while another run of its definition is leased
or running.

On PostgreSQL the whole claim is one round trip: the server-side function
``nbcast_claim_runs`` (migration 0004) runs the same steps statement by statement —
each statement of a PL/pgSQL function takes a fresh snapshot, so the recount after
the lock sees every committed claim — and returns the leases with everything a
worker needs. SQLite (one writer at a time) runs them from Python. Both paths are
tested by the same tests. The claim and the LEASED → RUNNING transition commit
asynchronously on PostgreSQL: a server crash can only lose leases, and a lost lease
is what fencing handles. A worker records the successes of one poll together
(:meth:`RunQueue.succeed_many`, one durable transaction, each attempt fenced).

**Lease and fencing.** Claiming sets ``state = LEASED``, ``lease_owner``,
``lease_expires_at`` and ``attempt = attempt + 1``, and inserts the attempt's row.
The attempt number is the fencing token: every later write of that attempt —
start, heartbeat, success, failure — says ``WHERE id = :id AND attempt = :attempt
AND lease_owner = :owner AND state IN ('LEASED', 'RUNNING')``, and when it matches
no row the attempt has lost the run (:class:`~nbcast.errors.LeaseLostError`): a
worker that was presumed dead cannot complete it.

**Reaper.** A leased or running run whose lease has expired goes back to QUEUED
(``not_before`` = now + backoff) with its attempt marked LOST, or to FAILED
``lease_expired`` once it has had ``max_attempts`` attempts.

**Retries.** A failed attempt (a cell raised, the worker lost its kernel) is retried
with exponential backoff and full jitter — ``uniform(0, min(cap, base · 2^(n-1)))``,
bounded by :mod:`nbcast.executor.bounds` — until ``max_attempts``; then the run is
FAILED ``max_attempts`` with the last error. A timeout is not retried (TIMED_OUT): a
report that ran out of time once will do so again. A cancel ends the run CANCELLED.
A failure recorded with ``retry=False`` ends the run FAILED at once, with the reason
given (``no_such_kernel``, ``invalid_parameters``, …; :mod:`nbcast.executor.preflight`),
else ``error``. A success may carry a reason too (``ended_early``).

**Budget.** A tenant whose warehouse budget (bytes scanned this calendar month,
UTC) is spent gets no new runs admitted: the claim moves its due runs to FAILED
``budget_exceeded`` instead of leasing them. Failing, not waiting, so the owner sees
at once why the report did not come, instead of a queue that silently grows.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.delivery.models import OutboxRow
from nbcast.errors import LeaseLostError
from nbcast.executor import bounds
from nbcast.executor.models import CancelRequest, Run, RunAttempt, RunState, WarehouseUsage
from nbcast.governance.models import Tenant
from nbcast.retry import backoff

__all__ = ["Lease", "Quota", "RunQueue", "Success", "backoff"]

_LIVE = (RunState.LEASED.value, RunState.RUNNING.value)
# Core tables: the queue's writes are Core statements (no ORM unit of work or bulk
# update bookkeeping on the hot path); the ORM models stay the schema's one source.
_RUNS = cast(sa.Table, Run.__table__)
_ATTEMPTS = cast(sa.Table, RunAttempt.__table__)
_USAGE = cast(sa.Table, WarehouseUsage.__table__)
_OUTBOX = cast(sa.Table, OutboxRow.__table__)
# LEASED → RUNNING for many attempts at once, each fenced; returns those still held.
# Committed asynchronously like the claim (migration 0004): losing it in a server
# crash loses a lease, which fencing handles; set_config runs once, in FROM.
_START_MANY = sa.text(
    "UPDATE runs r SET state = 'RUNNING', started_at = :now "
    "FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), CAST(:owners AS text[])) "
    "AS f(id, attempt, owner), (SELECT set_config('synchronous_commit', 'off', true)) AS s "
    "WHERE r.id = f.id AND r.attempt = f.attempt AND r.lease_owner = f.owner "
    "AND r.state IN ('LEASED', 'RUNNING') RETURNING r.id, r.attempt"
).bindparams(sa.bindparam("now", type_=sa.DateTime(timezone=True)))
# Many fenced successes at once: the runs, then the attempts of the runs that matched,
# and the outbox rows that hand each succeeded run to the delivery plane.
_SUCCEED_MANY = sa.text(
    "WITH f AS (SELECT * FROM unnest(CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), "
    "CAST(:owners AS text[]), CAST(:artifacts AS text[]), CAST(:durations AS float8[]), "
    "CAST(:kernel_starts AS float8[]), CAST(:hosts AS text[]), CAST(:reasons AS text[])) "
    "AS f(id, attempt, owner, artifact, duration, kernel_start, host, reason)), "
    "done AS (UPDATE runs r SET state = 'SUCCEEDED', finished_at = :now, "
    "artifact_sha256 = f.artifact, lease_owner = NULL, lease_expires_at = NULL, error = NULL, "
    "reason = f.reason FROM f WHERE r.id = f.id AND r.attempt = f.attempt "
    "AND r.lease_owner = f.owner AND r.state IN ('LEASED', 'RUNNING') "
    "RETURNING r.id, r.attempt, r.tenant_id), "
    "handed AS (INSERT INTO delivery_outbox (tenant_id, run_id, created_at) "
    "SELECT tenant_id, id, :now FROM done ON CONFLICT (run_id) DO NOTHING), "
    "ended AS (UPDATE run_attempts a SET ended_at = :now, outcome = 'SUCCEEDED', error = NULL, "
    "duration_s = f.duration, kernel_start_s = f.kernel_start, artifact_sha256 = f.artifact, "
    "host = CASE WHEN f.host = '' THEN a.host ELSE f.host END "
    "FROM f JOIN done d ON d.id = f.id AND d.attempt = f.attempt "
    "WHERE a.run_id = f.id AND a.attempt = f.attempt) "
    "SELECT id, attempt FROM done"
).bindparams(sa.bindparam("now", type_=sa.DateTime(timezone=True)))
_CLAIM_CALL = sa.text(
    "SELECT * FROM nbcast_claim_runs(:owner, :limit, :now, :lease, :host, :engine, :month, "
    ":rate, :real)"
).bindparams(
    sa.bindparam("now", type_=sa.DateTime(timezone=True)),
    sa.bindparam("month", type_=sa.DateTime(timezone=True)),
    sa.bindparam("lease", type_=sa.Interval()),
)


@dataclass(frozen=True, kw_only=True)
class Quota:
    """What one run of a tenant may use."""

    max_concurrent_runs: int
    cpus_per_run: float
    memory_mb_per_run: int
    run_timeout_s: int
    max_attempts: int


@dataclass(frozen=True, kw_only=True)
class Lease:
    """A claimed attempt at a run: everything a worker needs to execute it."""

    run_id: int
    attempt: int
    owner: str
    expires_at: datetime
    tenant_id: int
    tenant: str
    definition_id: int
    definition: str
    version: int
    slot_key: str | None
    kind: str
    fire_at: datetime
    parameters: dict[str, Any]
    notebook_json: str
    quota: Quota
    warehouse: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """``nbcast:<tenant>/<definition>@<slot>``: how the run appears in Ray and logs."""
        return f"nbcast:{self.tenant}/{self.definition}@{self.slot_key or f'manual-{self.run_id}'}"


@dataclass(frozen=True, kw_only=True)
class Success:
    """A successful attempt to record (:meth:`RunQueue.succeed_many`)."""

    lease: Lease
    artifact_sha256: str | None
    duration_s: float
    kernel_start_s: float | None = None
    usage: list[dict[str, Any]] = field(default_factory=list)
    host: str = ""
    """Where it actually ran (a Ray node), when not the claiming host."""
    reason: str | None = None
    """The run's reason: None, or ``ended_early`` (:mod:`nbcast.executor.early_exit`)."""


@dataclass
class ClaimStats:
    """What one claim did, for logs and tests."""

    leased: int = 0
    budget_failed: int = 0
    skipped_tenants: list[str] = field(default_factory=list)


class RunQueue:
    """The execution plane's view of the runs table for one worker (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        owner: str,
        lease_seconds: float = 30.0,
        engine: str = "local",
        backoff_base: float = 30.0,
        backoff_cap: float = 3600.0,
    ) -> None:
        self.db = db
        self.clock = clock
        self.owner = owner
        self.lease = timedelta(seconds=bounds.lease_seconds(lease_seconds))
        self.engine = engine
        self.host = socket.gethostname()
        self.backoff_base = bounds.backoff_seconds(backoff_base)
        self.backoff_cap = bounds.backoff_seconds(backoff_cap, "retry backoff cap")
        self.last_claim = ClaimStats()

    # -- claiming ---------------------------------------------------------------

    def _lock(self, query: Any, *, key_share: bool = False) -> Any:
        """``FOR UPDATE SKIP LOCKED`` on PostgreSQL (``FOR NO KEY UPDATE`` with
        ``key_share``, which does not block foreign-key checks against the row)."""
        if self.db.dialect == "postgresql":
            return query.with_for_update(skip_locked=True, key_share=key_share)
        return query

    def claim(self, limit: int = 1) -> list[Lease]:
        """Lease up to ``limit`` due runs, respecting quotas and fair share.

        Tenants are tried in fair-share order (:meth:`_order`); each is locked with
        ``SKIP LOCKED`` — a tenant another worker is claiming for right now is passed
        over, not waited for — its live runs are counted *after* the lock (a fresh
        snapshot that sees every committed claim), and it gives as many runs as its
        quota and the claim allow. Workers claiming at once therefore spread over
        different tenants instead of queueing on the same locks.
        """
        stats = ClaimStats()
        self.last_claim = stats
        if limit <= 0:
            return []
        now = self.clock.now()
        if self.db.dialect == "postgresql":
            return self._claim_on_server(limit, now, stats)
        with self.db.session() as session:
            rooms: dict[int, int] = {}
            tenants: dict[int, Tenant] = {}
            remaining = limit
            for tenant, waiting in self._order(session, now, limit):
                if remaining <= 0:
                    break
                locked = session.scalar(
                    self._lock(sa.select(Tenant.id).where(Tenant.id == tenant.id), key_share=True)
                )
                if locked is None:
                    stats.skipped_tenants.append(tenant.name)
                    continue  # another worker is claiming for this tenant right now
                room = tenant.max_concurrent_runs - self._active(session, tenant.id)
                take = min(room, remaining, waiting)
                if take <= 0:
                    continue
                if self._budget_spent(session, tenant, now):
                    stats.budget_failed += self._fail_over_budget(session, tenant.id, now)
                    continue
                rooms[tenant.id], tenants[tenant.id] = take, tenant
                remaining -= take
            leases = self._lease_runs(session, tenants, rooms, now) if rooms else []
        stats.leased = len(leases)
        return leases

    def _claim_on_server(self, limit: int, now: datetime, stats: ClaimStats) -> list[Lease]:
        """PostgreSQL: the same claim in one round trip, ``nbcast_claim_runs`` (migration
        0004), which runs this class's algorithm statement by statement on the server."""
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        leases: list[Lease] = []
        names: dict[int, str] = {}
        with self.db.engine.begin() as conn:
            rows = conn.execute(
                _CLAIM_CALL,
                {
                    "owner": self.owner,
                    "limit": limit,
                    "now": now,
                    "lease": self.lease,
                    "host": self.host,
                    "engine": self.engine,
                    "month": month,
                    "rate": self.clock.rate,
                    "real": self.clock.real,
                },
            ).all()
            if any(r.out_kind != "leased" for r in rows):
                names = dict(conn.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
        for r in rows:
            if r.out_kind == "skipped":
                stats.skipped_tenants.append(names.get(r.out_tenant_id, str(r.out_tenant_id)))
            elif r.out_kind == "budget_failed":
                stats.budget_failed += r.out_n
            else:
                leases.append(
                    Lease(
                        run_id=r.run_id,
                        attempt=r.attempt,
                        owner=self.owner,
                        expires_at=r.out_expires_at.astimezone(UTC),
                        tenant_id=r.out_tenant_id,
                        tenant=r.tenant_name,
                        definition_id=r.definition_id,
                        definition=r.definition_name,
                        version=r.version,
                        slot_key=r.slot_key,
                        kind=r.run_kind,
                        fire_at=r.fire_at.astimezone(UTC),
                        parameters=dict(r.parameters or {}),
                        notebook_json=r.notebook_json,
                        quota=Quota(
                            max_concurrent_runs=r.max_concurrent_runs,
                            cpus_per_run=r.cpus_per_run,
                            memory_mb_per_run=r.memory_mb_per_run,
                            run_timeout_s=r.run_timeout_s,
                            max_attempts=r.max_attempts,
                        ),
                        warehouse=r.warehouse,
                    )
                )
        stats.leased = len(leases)
        return leases

    def _order(self, session: Session, now: datetime, limit: int) -> list[tuple[Tenant, int]]:
        """Tenants with due work, furthest below their share first, with how many
        runs (up to ``limit``) each has waiting.

        The order is ``live runs / share``; among equals, the tenant with the fewest
        runs waiting goes first (so a single run is not queued behind a backlog of
        10,000 of another tenant's), then a random one (so concurrent workers spread
        over tenants).
        """
        due = (
            sa.select(Run.id)
            .where(Run.tenant_id == Tenant.id, Run.state == "QUEUED", Run.not_before <= now)
            .limit(limit)
            .correlate(Tenant)
            .subquery()
        )
        queued = sa.select(sa.func.count()).select_from(due).scalar_subquery()
        active = (
            sa.select(sa.func.count())
            .where(Run.tenant_id == Tenant.id, Run.state.in_(_LIVE))
            .correlate(Tenant)
            .scalar_subquery()
        )
        has_work = sa.exists().where(
            Run.tenant_id == Tenant.id, Run.state == "QUEUED", Run.not_before <= now
        )
        rows = session.execute(sa.select(Tenant, active, queued).where(has_work)).all()
        shuffled = [(t, int(a), int(q), random.random()) for t, a, q in rows]
        shuffled.sort(key=lambda r: (r[1] / max(r[0].share, 1e-9), r[2], r[3]))
        return [(t, q) for t, a, q, _ in shuffled if a < t.max_concurrent_runs]

    def _active(self, session: Session, tenant_id: int) -> int:
        return int(
            session.scalar(
                sa.select(sa.func.count())
                .select_from(Run)
                .where(Run.tenant_id == tenant_id, Run.state.in_(_LIVE))
            )
            or 0
        )

    def _budget_spent(self, session: Session, tenant: Tenant, now: datetime) -> bool:
        if tenant.warehouse_budget_bytes is None:
            return False
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        spent = session.scalar(
            sa.select(sa.func.coalesce(sa.func.sum(WarehouseUsage.bytes), 0)).where(
                WarehouseUsage.tenant_id == tenant.id, WarehouseUsage.recorded_at >= month
            )
        )
        return int(spent or 0) >= tenant.warehouse_budget_bytes

    def _fail_over_budget(self, session: Session, tenant_id: int, now: datetime) -> int:
        result = session.connection().execute(
            sa.update(_RUNS)
            .where(Run.tenant_id == tenant_id, Run.state == "QUEUED", Run.not_before <= now)
            .values(
                state=RunState.FAILED.value,
                reason="budget_exceeded",
                finished_at=now,
                error={
                    "reason": "budget_exceeded",
                    "message": "the tenant's warehouse budget for this month is spent",
                },
            )
        )
        return int(cast(Any, result).rowcount or 0)

    def _candidates(
        self, session: Session, rooms: dict[int, int], now: datetime
    ) -> list[tuple[int, int, int, bool]]:
        """Due QUEUED runs to lease, per tenant up to a few more than its room (serial
        runs of a busy definition are dropped afterwards), locked SKIP LOCKED."""
        busy = sa.orm.aliased(Run)
        cancel_asked = sa.exists().where(CancelRequest.run_id == Run.id)
        definition_busy = sa.exists().where(
            busy.definition_id == Run.definition_id, busy.state.in_(_LIVE)
        )
        eligible = sa.and_(
            Run.state == "QUEUED",
            Run.not_before <= now,
            ~cancel_asked,
            sa.or_(~Run.serial, ~definition_busy),
        )
        columns = (Run.id, Run.tenant_id, Run.definition_id, Run.serial)
        if self.db.dialect != "postgresql":  # one writer at a time: a loop is fine
            found: list[tuple[int, int, int, bool]] = []
            for tenant_id, room in rooms.items():
                found.extend(
                    (r[0], r[1], r[2], r[3])
                    for r in session.execute(
                        sa.select(*columns)
                        .where(Run.tenant_id == tenant_id, eligible)
                        .order_by(Run.not_before, Run.id)
                        .limit(room * 4)
                    )
                )
            return found
        # PostgreSQL: every tenant's share in one statement, a LATERAL per tenant.
        wanted = sa.values(
            sa.column("tid", sa.Integer), sa.column("room", sa.Integer), name="wanted"
        ).data(list(rooms.items()))
        per_tenant = (
            sa.select(*columns)
            .where(Run.tenant_id == wanted.c.tid, eligible)
            .order_by(Run.not_before, Run.id)
            .limit(wanted.c.room * 4)
            .with_for_update(of=Run, skip_locked=True)
            .lateral("picked")
        )
        return [
            (r[0], r[1], r[2], r[3])
            for r in session.execute(
                sa.select(per_tenant).select_from(wanted).join(per_tenant, sa.true())
            )
        ]

    def _lease_runs(
        self, session: Session, tenants: dict[int, Tenant], rooms: dict[int, int], now: datetime
    ) -> list[Lease]:
        chosen: list[int] = []
        taken: dict[int, int] = {}
        serial_seen: set[int] = set()
        for run_id, tenant_id, definition_id, serial in self._candidates(session, rooms, now):
            if taken.get(tenant_id, 0) >= rooms[tenant_id]:
                continue
            if serial:
                if definition_id in serial_seen:
                    continue  # one at a time per definition
                serial_seen.add(definition_id)
            chosen.append(run_id)
            taken[tenant_id] = taken.get(tenant_id, 0) + 1
        if not chosen:
            return []
        # The lease starts now, under the tenant locks, not when the claim began.
        now = self.clock.now()
        expires = now + self.lease
        session.connection().execute(
            sa.update(_RUNS)
            .where(Run.id.in_(chosen))
            .values(
                state=RunState.LEASED.value,
                attempt=Run.attempt + 1,
                lease_owner=self.owner,
                lease_expires_at=expires,
                reason=None,
            )
        )
        rows = session.execute(
            sa.select(
                Run.id,
                Run.attempt,
                Run.tenant_id,
                Run.definition_id,
                Run.version,
                Run.slot_key,
                Run.kind,
                Run.fire_at,
                Run.parameters,
                ReportDefinition.name,
                DefinitionVersion.notebook_json,
            )
            .join(ReportDefinition, ReportDefinition.id == Run.definition_id)
            .join(DefinitionVersion, DefinitionVersion.id == Run.version_id)
            .where(Run.id.in_(chosen))
            .order_by(Run.not_before, Run.id)
        ).all()
        session.execute(
            sa.insert(RunAttempt),
            [
                {
                    "tenant_id": r.tenant_id,
                    "run_id": r.id,
                    "attempt": r.attempt,
                    "worker": self.owner,
                    "host": self.host,
                    "engine": self.engine,
                    "started_at": now,
                }
                for r in rows
            ],
        )
        leases = []
        for r in rows:
            tenant = tenants[r.tenant_id]
            quota = Quota(
                max_concurrent_runs=tenant.max_concurrent_runs,
                cpus_per_run=tenant.cpus_per_run,
                memory_mb_per_run=tenant.memory_mb_per_run,
                run_timeout_s=tenant.run_timeout_s,
                max_attempts=tenant.max_attempts,
            )
            leases.append(
                Lease(
                    run_id=r.id,
                    attempt=r.attempt,
                    owner=self.owner,
                    expires_at=expires,
                    tenant_id=r.tenant_id,
                    tenant=tenant.name,
                    definition_id=r.definition_id,
                    definition=r.name,
                    version=r.version,
                    slot_key=r.slot_key,
                    kind=r.kind,
                    fire_at=r.fire_at,
                    parameters=dict(r.parameters or {}),
                    notebook_json=r.notebook_json,
                    quota=quota,
                    warehouse=tenant.warehouse,
                )
            )
        return leases

    # -- fenced writes ----------------------------------------------------------

    def _fenced(self, lease: Lease) -> Any:
        return sa.and_(
            Run.id == lease.run_id,
            Run.attempt == lease.attempt,
            Run.lease_owner == lease.owner,
            Run.state.in_(_LIVE),
        )

    def _update(self, session: Session, lease: Lease, **values: Any) -> None:
        result = session.connection().execute(
            sa.update(_RUNS).where(self._fenced(lease)).values(**values)
        )
        if int(cast(Any, result).rowcount or 0) != 1:
            raise _lost(lease)

    def start(self, lease: Lease) -> None:
        """LEASED → RUNNING for this attempt; LeaseLostError if it is no longer held."""
        if not self.start_many([lease]):
            raise _lost(lease)

    def start_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """LEASED → RUNNING for several attempts in one transaction; return the ones
        still held (a lease lost in the meantime is left out, not an error)."""
        if not leases:
            return []
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                held = {
                    (r[0], r[1])
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
                return [lease for lease in leases if (lease.run_id, lease.attempt) in held]
            kept = []
            for lease in leases:
                result = conn.execute(
                    sa.update(_RUNS)
                    .where(self._fenced(lease))
                    .values(state=RunState.RUNNING.value, started_at=now)
                )
                if int(cast(Any, result).rowcount or 0) == 1:
                    kept.append(lease)
            return kept

    def heartbeat(self, lease: Lease) -> bool:
        """Extend the lease; return True if a cancel was requested. LeaseLostError if lost."""
        now = self.clock.now()
        with self.db.session() as session:
            self._update(session, lease, lease_expires_at=now + self.lease)
            return bool(
                session.scalar(sa.select(sa.exists().where(CancelRequest.run_id == lease.run_id)))
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
            raise _lost(lease)

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
        with self.db.engine.begin() as conn:
            if self.db.dialect == "postgresql":
                done = {
                    (r[0], r[1])
                    for r in conn.execute(
                        _SUCCEED_MANY,
                        {
                            "ids": [s.lease.run_id for s in successes],
                            "attempts": [s.lease.attempt for s in successes],
                            "owners": [s.lease.owner for s in successes],
                            "artifacts": [s.artifact_sha256 for s in successes],
                            "durations": [s.duration_s for s in successes],
                            "kernel_starts": [s.kernel_start_s for s in successes],
                            "hosts": [s.host for s in successes],
                            "reasons": [s.reason for s in successes],
                            "now": now,
                        },
                    )
                }
            else:
                done = set()
                for s in successes:
                    result = conn.execute(
                        sa.update(_RUNS)
                        .where(self._fenced(s.lease))
                        .values(
                            state=RunState.SUCCEEDED.value,
                            finished_at=now,
                            artifact_sha256=s.artifact_sha256,
                            lease_owner=None,
                            lease_expires_at=None,
                            error=None,
                            reason=s.reason,
                        )
                    )
                    if int(cast(Any, result).rowcount or 0) != 1:
                        continue
                    done.add((s.lease.run_id, s.lease.attempt))
                    outbox = {"tenant_id": s.lease.tenant_id, "run_id": s.lease.run_id}
                    conn.execute(insert_ignore(_OUTBOX, [{**outbox, "created_at": now}], "sqlite"))
                    _end_attempt(
                        conn,
                        s.lease,
                        "SUCCEEDED",
                        now,
                        None,
                        s.duration_s,
                        s.kernel_start_s,
                        s.artifact_sha256,
                        s.host,
                    )
            for s in successes:
                if s.usage and (s.lease.run_id, s.lease.attempt) in done:
                    _record_usage(conn, s.lease, s.usage, now)
        return [s for s in successes if (s.lease.run_id, s.lease.attempt) not in done]

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
    ) -> RunState:
        """Record a failed attempt (fenced); retry with backoff if attempts remain.

        ``outcome`` is FAILED, TIMED_OUT or CANCELLED; only FAILED is retried, and only
        with ``retry``. A FAILED run that ends gets ``reason`` when given (a permanent
        failure's), else ``max_attempts`` / ``error``. Returns the run's new state.
        """
        now = self.clock.now()
        retryable = outcome is RunState.FAILED and retry
        with self.db.session() as session:
            if retryable and lease.attempt < lease.quota.max_attempts:
                state = RunState.QUEUED
                delay = self._retry_delay(lease.attempt)
                self._update(
                    session,
                    lease,
                    state=state.value,
                    not_before=now + delay,
                    lease_owner=None,
                    lease_expires_at=None,
                    error=error,
                    reason="retry",
                )
            else:
                state = outcome
                ended = {RunState.TIMED_OUT: "timeout", RunState.CANCELLED: "cancelled"}.get(
                    outcome, reason or ("max_attempts" if retryable else "error")
                )
                self._update(
                    session,
                    lease,
                    state=state.value,
                    finished_at=now,
                    lease_owner=None,
                    lease_expires_at=None,
                    error=error,
                    reason=ended,
                    artifact_sha256=artifact_sha256,
                )
            conn = session.connection()
            _end_attempt(
                conn, lease, outcome.value, now, error, duration_s, None, artifact_sha256, host
            )
            _record_usage(conn, lease, usage or [], now)
        return state

    def _retry_delay(self, attempt: int) -> timedelta:
        return bounds.retry_delay(attempt, base=self.backoff_base, cap=self.backoff_cap)

    # -- housekeeping -----------------------------------------------------------

    def reap(self) -> int:
        """Return runs with expired leases to the queue (or FAILED); return how many."""
        now = self.clock.now()
        count = 0
        with self.db.session() as session:
            expired = session.execute(
                self._lock(
                    sa.select(Run.id, Run.attempt, Run.tenant_id)
                    .where(Run.state.in_(_LIVE), Run.lease_expires_at < now)
                    .limit(500)
                )
            ).all()
            if not expired:
                return 0
            attempts = {t: n for t, n in session.execute(sa.select(Tenant.id, Tenant.max_attempts))}
            for run_id, attempt, tenant_id in expired:
                lost = {
                    "reason": "lease_expired",
                    "message": f"attempt {attempt} stopped heartbeating",
                }
                if attempt >= attempts.get(tenant_id, 3):
                    values: dict[str, Any] = {
                        "state": RunState.FAILED.value,
                        "finished_at": now,
                        "reason": "lease_expired",
                    }
                else:
                    values = {
                        "state": RunState.QUEUED.value,
                        "reason": "lease_expired",
                        "not_before": now + self._retry_delay(attempt),
                    }
                session.connection().execute(
                    sa.update(_RUNS)
                    .where(Run.id == run_id, Run.attempt == attempt, Run.state.in_(_LIVE))
                    .values(lease_owner=None, lease_expires_at=None, error=lost, **values)
                )
                session.connection().execute(
                    sa.update(_ATTEMPTS)
                    .where(
                        RunAttempt.run_id == run_id,
                        RunAttempt.attempt == attempt,
                        RunAttempt.outcome.is_(None),
                    )
                    .values(outcome="LOST", ended_at=now, error=lost)
                )
                count += 1
        return count

    def cancel_queued(self) -> int:
        """QUEUED runs with a cancel request become CANCELLED; return how many."""
        now = self.clock.now()
        with self.db.session() as session:
            result = session.connection().execute(
                sa.update(_RUNS)
                .where(Run.state == "QUEUED", sa.exists().where(CancelRequest.run_id == Run.id))
                .values(state=RunState.CANCELLED.value, reason="cancelled", finished_at=now)
            )
            return int(cast(Any, result).rowcount or 0)


def _lost(lease: Lease) -> LeaseLostError:
    return LeaseLostError(
        f"run {lease.run_id} attempt {lease.attempt} is no longer held by {lease.owner}"
    )


def _end_attempt(
    conn: sa.Connection,
    lease: Lease,
    outcome: str,
    now: datetime,
    error: dict[str, Any] | None,
    duration_s: float | None,
    kernel_start_s: float | None,
    artifact_sha256: str | None,
    host: str = "",
) -> None:
    values: dict[str, Any] = {
        "ended_at": now,
        "outcome": outcome,
        "error": error,
        "duration_s": duration_s,
        "kernel_start_s": kernel_start_s,
        "artifact_sha256": artifact_sha256,
    }
    if host:  # where it actually ran (a Ray node), when not the claiming host
        values["host"] = host
    conn.execute(
        sa.update(_ATTEMPTS)
        .where(RunAttempt.run_id == lease.run_id, RunAttempt.attempt == lease.attempt)
        .values(**values)
    )


def _record_usage(
    conn: sa.Connection, lease: Lease, usage: list[dict[str, Any]], now: datetime
) -> None:
    if not usage:
        return
    conn.execute(
        sa.insert(_USAGE),
        [
            {
                "tenant_id": lease.tenant_id,
                "run_id": lease.run_id,
                "attempt": lease.attempt,
                "connection": str(item.get("connection", "default")),
                "sql_sha256": str(item.get("sql_sha256", "")),
                "rows": bounds.counter(item.get("rows", 0)),
                "bytes": bounds.counter(item.get("bytes", 0)),
                "seconds": bounds.usage_seconds(item.get("seconds", 0.0)),
                "error": item.get("error"),
                "recorded_at": now,
            }
            for item in usage
        ],
    )
