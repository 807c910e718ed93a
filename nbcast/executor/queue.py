"""The run queue: the claim and fair share, and :class:`RunQueue`, one worker's view of
the queue over :mod:`~nbcast.executor.leases` and :mod:`~nbcast.executor.quotas`.

Three modules, one per idea:

- here, **the claim**: which due runs a worker leases next, within every quota;
- :mod:`nbcast.executor.leases`, **what happens to a claimed run**: the fenced start,
  heartbeats, success and failure with retries, and the reaper (expired leases,
  cancel requests);
- :mod:`nbcast.executor.quotas`, **the tenant's limits**: the per-run quota a lease
  carries, the concurrency count and the warehouse budget.

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
(every overlap policy but ``allow``) while another run of its definition and audience
(recipient scope) is leased or running. A tenant whose daily budget is spent gets
nothing leased: its due runs wait with reason ``budget`` until the next UTC day
(:mod:`nbcast.tenancy.budgets`); a lease carries the warehouse bytes its tenant's
budget has left, which the run's queries may not cross.

On PostgreSQL the whole claim is one round trip: the server-side function
``nbcast_claim_runs`` (migrations 0004, 0013) runs the same steps statement by statement —
each statement of a PL/pgSQL function takes a fresh snapshot, so the recount after
the lock sees every committed claim — and returns the leases with everything a
worker needs. SQLite (one writer at a time) runs them from Python. Both paths are
tested by the same tests. The claim commits asynchronously on PostgreSQL: a server
crash can only lose leases, and a lost lease is what fencing handles.
"""

from __future__ import annotations

import random
import socket
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.definitions.compiled import compile_retry_on
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.executor import bounds
from nbcast.executor.leases import Backoff, Lease, Leases, Reaper, Success
from nbcast.executor.models import RunAttempt
from nbcast.executor.quotas import Quota, hold_over_budget, live_runs
from nbcast.executor.sql import RUNS
from nbcast.leasing import skip_locked, taken
from nbcast.scheduler.models import LEASED_STATES, RUN_LEASE, CancelRequest, Run, RunState
from nbcast.tenancy.budgets import budget_state, usage_day
from nbcast.tenancy.models import Tenant

__all__ = ["ClaimStats", "RunQueue"]

CANDIDATES_PER_SLOT = 4
"""Due runs read per free slot of a tenant: serial runs of a busy definition are
dropped after the read, so a few more than the room are locked and looked at."""

_CLAIM_CALL = sa.text(
    "SELECT * FROM nbcast_claim_runs(:owner, :limit, :now, :lease, :host, :engine, :day, "
    ":rate, :real, :budgets, :tenants)"
).bindparams(
    sa.bindparam("tenants", type_=sa.ARRAY(sa.Integer())),
    sa.bindparam("now", type_=sa.DateTime(timezone=True)),
    sa.bindparam("day", type_=sa.Date()),
    sa.bindparam("lease", type_=sa.Interval()),
)


@dataclass
class ClaimStats:
    """What one claim did, for logs and tests."""

    leased: int = 0
    budget_held: int = 0
    """Due runs newly marked as waiting for their tenant's budget."""
    skipped_tenants: list[str] = field(default_factory=list)


class RunQueue:
    """One worker's view of the run queue: it claims (module docstring), and hands
    every later write of a claimed attempt to :class:`~nbcast.executor.leases.Leases`
    and the housekeeping to :class:`~nbcast.executor.leases.Reaper`."""

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
        tenants: Sequence[int] | None = None,
        accounting: bool = True,
    ) -> None:
        self.db = db
        self.accounting = accounting
        self._retry_on: dict[tuple[int, int], tuple[str, ...]] = {}
        """Daily usage and budget checks on claims and completions (the benchmarks turn
        it off to measure its cost; :mod:`nbcast.tenancy`)."""
        self.tenants = None if tenants is None else sorted(set(tenants))
        """The ids of the tenants whose runs this worker claims (None: every tenant's)."""
        self.clock = clock
        self.owner = owner
        self.lease = timedelta(seconds=bounds.lease_seconds(lease_seconds))
        """How long a claim or a heartbeat holds a run."""
        self.engine = engine
        self.host = socket.gethostname()
        backoff = Backoff.checked(backoff_base, backoff_cap)
        self.leases = Leases(db, clock, lease=self.lease, backoff=backoff, accounting=accounting)
        """The fenced writes of what this worker claimed."""
        self.reaper = Reaper(db, clock, backoff=backoff)
        """Expired leases and cancel requests (anyone's)."""
        self.last_claim = ClaimStats()

    # -- what claimed attempts do: the leases' business ---------------------------

    def start(self, lease: Lease) -> Lease:
        """:meth:`Leases.start <nbcast.executor.leases.Leases.start>`."""
        return self.leases.start(lease)

    def start_many(self, leases: Sequence[Lease]) -> list[Lease]:
        """:meth:`Leases.start_many <nbcast.executor.leases.Leases.start_many>`."""
        return self.leases.start_many(leases)

    def heartbeat(self, lease: Lease) -> bool:
        """:meth:`Leases.heartbeat <nbcast.executor.leases.Leases.heartbeat>`."""
        return self.leases.heartbeat(lease)

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
        """:meth:`Leases.succeed <nbcast.executor.leases.Leases.succeed>`."""
        self.leases.succeed(
            lease,
            artifact_sha256=artifact_sha256,
            duration_s=duration_s,
            kernel_start_s=kernel_start_s,
            usage=usage,
            host=host,
            reason=reason,
        )

    def succeed_many(self, successes: Sequence[Success]) -> list[Success]:
        """:meth:`Leases.succeed_many <nbcast.executor.leases.Leases.succeed_many>`."""
        return self.leases.succeed_many(successes)

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
        """:meth:`Leases.fail <nbcast.executor.leases.Leases.fail>`."""
        return self.leases.fail(
            lease,
            error,
            outcome=outcome,
            duration_s=duration_s,
            artifact_sha256=artifact_sha256,
            usage=usage,
            retry=retry,
            host=host,
            reason=reason,
            cpu_s=cpu_s,
            peak_mem_mb=peak_mem_mb,
        )

    def reap(self) -> int:
        """:meth:`Reaper.reap <nbcast.executor.leases.Reaper.reap>`."""
        return self.reaper.reap()

    def cancel_queued(self) -> int:
        """:meth:`Reaper.cancel_queued <nbcast.executor.leases.Reaper.cancel_queued>`."""
        return self.reaper.cancel_queued()

    # -- claiming -----------------------------------------------------------------

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
            left: dict[int, int | None] = {}
            remaining = limit
            for tenant, waiting in self._order(session, now, limit):
                if remaining <= 0:
                    break
                locked = session.scalar(
                    skip_locked(
                        self.db.dialect,
                        sa.select(Tenant.id).where(Tenant.id == tenant.id),
                        key_share=True,
                    )
                )
                if locked is None:
                    stats.skipped_tenants.append(tenant.name)
                    continue  # another worker is claiming for this tenant right now
                room = tenant.max_concurrent_runs - live_runs(session, tenant.id)
                take = min(room, remaining, waiting)
                if take <= 0:
                    continue
                if self.accounting:
                    budget = budget_state(session.connection(), tenant, now)
                    if budget.spent:
                        stats.budget_held += hold_over_budget(session, tenant.id, now)
                        continue
                    left[tenant.id] = budget.bytes_left
                rooms[tenant.id], tenants[tenant.id] = take, tenant
                remaining -= take
            leases = self._lease_runs(session, tenants, rooms, left, now) if rooms else []
        stats.leased = len(leases)
        return self._with_retry_on(leases)

    def _claim_on_server(self, limit: int, now: datetime, stats: ClaimStats) -> list[Lease]:
        """PostgreSQL: the same claim in one round trip, ``nbcast_claim_runs`` (migration
        0004), which runs this class's algorithm statement by statement on the server."""
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
                    "day": usage_day(now),
                    "rate": self.clock.rate,
                    "real": self.clock.real,
                    "budgets": self.accounting,
                    "tenants": self.tenants,
                },
            ).all()
            if any(r.out_kind != "leased" for r in rows):
                names = dict(conn.execute(sa.select(Tenant.id, Tenant.name)).tuples().all())
        for r in rows:
            if r.out_kind == "skipped":
                stats.skipped_tenants.append(names.get(r.out_tenant_id, str(r.out_tenant_id)))
            elif r.out_kind == "budget_held":
                stats.budget_held += r.out_n
            else:
                leases.append(
                    self._lease(
                        r,
                        run_id=r.run_id,
                        expires_at=r.out_expires_at.astimezone(UTC),
                        tenant_id=r.out_tenant_id,
                        tenant=r.tenant_name,
                        definition=r.definition_name,
                        kind=r.run_kind,
                        fire_at=r.fire_at.astimezone(UTC),
                        quota=Quota.of(r),
                        warehouse=r.warehouse,
                        audience=r.audience,
                        row_filter=r.row_filter,
                        budget_bytes_left=r.bytes_left,
                        sandbox_network=r.sandbox_network,
                    )
                )
        stats.leased = len(leases)
        return self._with_retry_on(leases)

    def _with_retry_on(self, leases: list[Lease]) -> list[Lease]:
        """``leases`` with their versions' ``retry_on`` (read once per version and kept:
        a version never changes; bounded like the versions a worker sees)."""
        wanted = {(x.definition_id, x.version) for x in leases} - self._retry_on.keys()
        if wanted:
            if len(self._retry_on) > 10_000:
                self._retry_on.clear()
            with self.db.session() as session:
                rows = session.execute(
                    sa.select(
                        DefinitionVersion.definition_id,
                        DefinitionVersion.version,
                        DefinitionVersion.spec,
                    ).where(
                        DefinitionVersion.definition_id.in_({d for d, _ in wanted}),
                        DefinitionVersion.version.in_({v for _, v in wanted}),
                    )
                ).all()
            for definition_id, version, block in rows:
                self._retry_on[(definition_id, version)] = compile_retry_on(block)
        return [
            replace(x, retry_on=found)
            if (found := self._retry_on.get((x.definition_id, x.version)))
            else x
            for x in leases
        ]

    def _lease(self, row: Any, **fields: Any) -> Lease:
        """A lease from a claimed row: the fields both claim paths name alike, and
        ``fields`` for the rest."""
        return Lease(
            attempt=row.attempt,
            owner=self.owner,
            definition_id=row.definition_id,
            version=row.version,
            slot_key=row.slot_key,
            parameters=dict(row.parameters or {}),
            notebook_json=row.notebook_json,
            **fields,
        )

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
            .where(Run.tenant_id == Tenant.id, Run.state == RunState.QUEUED, Run.not_before <= now)
            .limit(limit)
            .correlate(Tenant)
            .subquery()
        )
        queued = sa.select(sa.func.count()).select_from(due).scalar_subquery()
        active = (
            sa.select(sa.func.count())
            .where(Run.tenant_id == Tenant.id, Run.state.in_(LEASED_STATES))
            .correlate(Tenant)
            .scalar_subquery()
        )
        has_work = sa.exists().where(
            Run.tenant_id == Tenant.id, Run.state == RunState.QUEUED, Run.not_before <= now
        )
        chosen = sa.true() if self.tenants is None else Tenant.id.in_(self.tenants)
        rows = session.execute(sa.select(Tenant, active, queued).where(has_work, chosen)).all()
        shuffled = [(t, int(a), int(q), random.random()) for t, a, q in rows]
        shuffled.sort(key=lambda r: (r[1] / max(r[0].share, 1e-9), r[2], r[3]))
        return [(t, q) for t, a, q, _ in shuffled if a < t.max_concurrent_runs]

    def _candidates(
        self, session: Session, rooms: dict[int, int], now: datetime
    ) -> list[tuple[int, int, int, str, bool]]:
        """Due QUEUED runs to lease, per tenant up to a few more than its room (serial
        runs of a busy definition and audience are dropped afterwards), locked SKIP
        LOCKED."""
        busy = sa.orm.aliased(Run)
        cancel_asked = sa.exists().where(CancelRequest.run_id == Run.id)
        definition_busy = sa.exists().where(
            busy.definition_id == Run.definition_id,
            busy.audience == Run.audience,
            busy.state.in_(LEASED_STATES),
        )
        eligible = sa.and_(
            Run.state == RunState.QUEUED,
            Run.not_before <= now,
            ~cancel_asked,
            sa.or_(~Run.serial, ~definition_busy),
        )
        columns = (Run.id, Run.tenant_id, Run.definition_id, Run.audience, Run.serial)
        if self.db.dialect != "postgresql":  # one writer at a time: a loop is fine
            found: list[tuple[int, int, int, str, bool]] = []
            for tenant_id, room in rooms.items():
                found.extend(
                    (r[0], r[1], r[2], r[3], r[4])
                    for r in session.execute(
                        sa.select(*columns)
                        .where(Run.tenant_id == tenant_id, eligible)
                        .order_by(Run.not_before, Run.id)
                        .limit(room * CANDIDATES_PER_SLOT)
                    )
                )
            return found
        # PostgreSQL: every tenant's share in one statement, a LATERAL per tenant.
        wanted = sa.values(
            sa.column("tid", sa.Integer), sa.column("room", sa.Integer), name="wanted"
        ).data(list(rooms.items()))
        per_tenant = skip_locked(
            "postgresql",
            sa.select(*columns)
            .where(Run.tenant_id == wanted.c.tid, eligible)
            .order_by(Run.not_before, Run.id)
            .limit(wanted.c.room * CANDIDATES_PER_SLOT),
            of=Run,
        ).lateral("picked")
        return [
            (r[0], r[1], r[2], r[3], r[4])
            for r in session.execute(
                sa.select(per_tenant).select_from(wanted).join(per_tenant, sa.true())
            )
        ]

    def _lease_runs(
        self,
        session: Session,
        tenants: dict[int, Tenant],
        rooms: dict[int, int],
        left: dict[int, int | None],
        now: datetime,
    ) -> list[Lease]:
        chosen: list[int] = []
        counted: dict[int, int] = {}
        serial_seen: set[tuple[int, str]] = set()
        for run_id, tenant_id, definition_id, audience, serial in self._candidates(
            session, rooms, now
        ):
            if counted.get(tenant_id, 0) >= rooms[tenant_id]:
                continue
            if serial:
                if (definition_id, audience) in serial_seen:
                    continue  # one at a time per definition and audience
                serial_seen.add((definition_id, audience))
            chosen.append(run_id)
            counted[tenant_id] = counted.get(tenant_id, 0) + 1
        if not chosen:
            return []
        # The lease starts now, under the tenant locks, not when the claim began.
        now = self.clock.now()
        expires = now + self.lease
        session.connection().execute(
            sa.update(RUNS)
            .where(RUNS.c.id.in_(chosen))
            .values(
                state=RunState.LEASED, reason=None, **taken(RUN_LEASE, self.owner, now, self.lease)
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
                Run.audience,
                Run.row_filter,
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
        return [
            self._lease(
                r,
                run_id=r.id,
                expires_at=expires,
                tenant_id=r.tenant_id,
                tenant=tenants[r.tenant_id].name,
                definition=r.name,
                kind=r.kind,
                fire_at=r.fire_at,
                quota=Quota.of(tenants[r.tenant_id]),
                warehouse=tenants[r.tenant_id].warehouse,
                audience=r.audience,
                row_filter=r.row_filter,
                budget_bytes_left=left.get(r.tenant_id),
                sandbox_network=tenants[r.tenant_id].sandbox_network,
            )
            for r in rows
        ]
