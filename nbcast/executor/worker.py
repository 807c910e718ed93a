"""``nbcast worker``: claims runs, hands them to an engine, keeps their leases, records
how they ended.

One loop step (:meth:`Worker.step`):

1. reap expired leases (any worker's) and cancel QUEUED runs with a cancel request;
2. claim as many runs as the engine has free capacity (quotas and fair share are the
   claim's business, :mod:`nbcast.executor.queue`), mark each RUNNING and submit it;
3. heartbeat every lease due for one — a lease the worker has lost, or a run with a
   cancel request, gets its attempt cancelled in the engine;
4. record every attempt the engine reports ended, through the fenced writes: an
   outcome that arrives after its lease was lost is refused and logged, and the run
   stays with whichever attempt holds it now. A failure no retry can fix
   (:attr:`~nbcast.executor.attempt.AttemptReport.retryable` False) ends its run at
   once, with its reason.

One run's trouble stays with that run. A claimed run whose job cannot be built or
submitted to the engine is recorded as a failed attempt of that run (not retried
when the engine refused it as it is: ``ValueError`` / ``TypeError``, reason
``submit_refused``; nor for a permanent cause, :mod:`nbcast.executor.preflight`) and
the claim's other runs are submitted. An outcome that cannot be recorded is kept
(its lease heartbeated) and tried again next step without holding back the others;
while the database is away that goes on until it is back, but an outcome the database
refuses :data:`MAX_RECORD_TRIES` times is recorded bare — no warehouse figures, the
error reduced to its text — and one refused even so is given up after as many more
tries: its lease then expires and the reaper decides.

The worker is a :class:`~nbcast.daemon.Service`: its supervisor keeps its heartbeat
row and turns SIGTERM into :meth:`Worker.stop` — stop claiming, let the running
attempts finish (their leases keep being renewed), then end — and a second SIGTERM
into :meth:`Worker.halt`, which cancels them. ``exit_when_idle`` makes the worker end
once nothing is due and nothing is running (for demos and batch jobs).
"""

from __future__ import annotations

import dataclasses
import logging
import time
import traceback
from collections import deque
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.daemon import Service, Step, Supervisor
from nbcast.db import Database
from nbcast.errors import LeaseLostError
from nbcast.executor.attempt import MAX_ERROR_TEXT, AttemptReport, sweep_run_folders
from nbcast.executor.engines.base import Engine
from nbcast.executor.leases import Lease, Success
from nbcast.executor.preflight import permanent_reason
from nbcast.executor.queue import RunQueue
from nbcast.executor.storable import storable_error, storable_json, storable_text
from nbcast.sandbox.policy import SandboxTemplate, default_template
from nbcast.scheduler.models import ACTIVE_STATES, Run, RunReason, RunState

__all__ = ["MAX_RECORD_TRIES", "Worker", "WorkerStats", "default_work_dir"]

log = logging.getLogger("nbcast.worker")

MAX_RECORD_TRIES = 3
"""Refusals (not outages) of an outcome by the database before it is recorded bare."""


@dataclass
class WorkerStats:
    """Counts since the worker started."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    rejected: int = 0
    """Outcomes refused because their lease had been lost (fencing)."""
    outcomes: deque[tuple[int, int, str]] = field(default_factory=lambda: deque(maxlen=1000))
    """The latest outcomes (run, attempt, state): the last 1,000, so a worker that
    runs for months holds a bounded amount."""


@dataclass
class _InFlight:
    lease: Lease
    next_heartbeat: float
    lost: bool = False


class Worker(Service):
    """The worker loop for one engine (see the module docstring)."""

    kind = "worker"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        engine: Engine,
        *,
        name: str,
        artifacts: str,
        work_dir: str,
        lease_seconds: float = 30.0,
        poll_interval: float = 0.2,
        lake: str | None = None,
        backoff_base: float = 30.0,
        sandbox: SandboxTemplate | bool | None = True,
        tenants: Sequence[int] | None = None,
    ) -> None:
        super().__init__()
        self.db = db
        if sandbox is True:  # the default: every attempt sandboxed, hiding what is ours
            sandbox = default_template(work_dir=work_dir, artifacts=artifacts)
        #: what every attempt's sandbox shares (None: kernels run unsandboxed)
        self.sandbox: SandboxTemplate | None = sandbox or None
        self.clock = clock
        self.engine = engine
        self.name = name
        self.artifacts = artifacts
        self.work_dir = work_dir
        self.lake = lake
        self.poll_interval = poll_interval
        self.queue = RunQueue(
            db,
            clock,
            owner=name,
            lease_seconds=lease_seconds,
            engine=engine.name,
            backoff_base=backoff_base,
            tenants=tenants,
        )
        self.heartbeat_every = max(self.queue.lease.total_seconds() / 3, 0.2)
        self.stats = WorkerStats()
        self._in_flight: dict[tuple[int, int], _InFlight] = {}
        # Outcomes the database could not take yet: recorded next step.
        self._unrecorded: list[tuple[int, int, AttemptReport]] = []
        # How often the database refused (not: was away for) an outcome, by attempt.
        self._refusals: dict[tuple[int, int], int] = {}
        self.exit_when_idle = False

    # -- control ------------------------------------------------------------------

    def stop(self) -> None:
        """Stop claiming; end once running attempts have ended (first SIGTERM)."""
        super().stop()
        log.info("finishing %d running attempts", len(self._in_flight))
        self.clock.wake()

    def halt(self) -> None:
        """Cancel the running attempts (second SIGTERM); end once they are recorded."""
        super().halt()
        for key in list(self._in_flight):
            self.engine.cancel(*key)
        self.clock.wake()

    @property
    def busy(self) -> int:
        """Attempts in flight."""
        return len(self._in_flight)

    # -- the loop -----------------------------------------------------------------

    def steps(self) -> Iterator[Step]:
        """One :meth:`step` per step; done when stopped and drained, or — with
        ``exit_when_idle`` — once nothing is due and nothing is running."""
        log.info(
            "worker %s started (engine %s, capacity %d, sandbox %s)",
            self.name,
            self.engine.name,
            self.engine.capacity,
            "on" if self.sandbox is not None else "OFF: kernels run as this worker's user",
        )
        if swept := sweep_run_folders(self.work_dir):
            log.info("removed %d run folders left by attempts that never ended", swept)
        while True:
            claimed = self.step()
            done = (self.stopping and not self._in_flight) or (
                self.exit_when_idle and not claimed and not self._in_flight and not self._due()
            )
            yield Step(
                busy=bool(claimed), sleep=self.poll_interval, done=done, detail=self._detail()
            )
            if done:
                break
        log.info("worker %s stopped: %s", self.name, self.stats)

    def _detail(self) -> dict[str, Any]:
        s = self.stats
        return {
            "claimed": s.claimed,
            "succeeded": s.succeeded,
            "failed": s.failed,
            "rejected": s.rejected,
            "running": len(self._in_flight),
            "sandbox": "on" if self.sandbox is not None else "off",
            **(
                {"ray_dashboard": url}
                if isinstance(url := getattr(self.engine, "dashboard_url", None), str)
                else {}
            ),
        }

    def run(self, *, exit_when_idle: bool = False) -> WorkerStats:
        """Run under a :class:`~nbcast.daemon.Supervisor` until stopped (or idle, with
        ``exit_when_idle``); return the counts."""
        self.exit_when_idle = exit_when_idle
        Supervisor(self.db, self.clock, self).run()
        return self.stats

    def _due(self) -> bool:
        """Whether a run of this worker's tenants is due or under way; one waiting for its
        tenant's budget (until the next UTC day) does not count, so ``exit_when_idle``
        can end."""
        now = self.clock.now()
        held = sa.func.coalesce(Run.reason, "") == RunReason.budget.value
        ours = sa.true() if self.queue.tenants is None else Run.tenant_id.in_(self.queue.tenants)
        with self.db.session() as session:
            return bool(
                session.scalar(
                    sa.select(
                        sa.exists().where(
                            Run.state.in_(ACTIVE_STATES),
                            Run.not_before <= now,
                            sa.or_(Run.state != RunState.QUEUED, ~held),
                            ours,
                        )
                    )
                )
            )

    def step(self) -> int:
        """One pass of the loop; return how many runs were claimed."""
        try:
            self.queue.reap()
            self.queue.cancel_queued()
        except Exception as exc:  # a database blip must not kill running attempts
            log.warning("housekeeping failed: %s", exc)
        claimed = 0
        free = self.engine.capacity - len(self._in_flight)
        if free > 0 and not self.stopping:
            claimed = self._claim(free)
        self._heartbeats()
        unrecorded, self._unrecorded = self._unrecorded, []
        try:
            ended = self.engine.poll()
        except Exception as exc:  # the engine's trouble: what it holds is reported next time
            log.warning("polling the %s engine failed: %s", self.engine.name, exc)
            ended = []
        self._record(unrecorded + ended)
        return claimed

    def _claim(self, free: int) -> int:
        try:
            leases = self.queue.claim(free)
        except Exception as exc:
            log.warning("claim failed: %s", exc)
            return 0
        try:
            leases = self.queue.start_many(leases)  # one transaction for the batch
        except Exception as exc:  # their leases expire and the reaper requeues them
            log.warning("could not start %d claimed runs: %s", len(leases), exc)
            return 0
        for lease in leases:
            self.stats.claimed += 1
            try:
                self._submit(lease)
            except Exception as exc:  # this run's trouble: the claim's others go on
                self._submit_failed(lease, exc)
                continue
            log.info("started %s (run %d attempt %d)", lease.label, lease.run_id, lease.attempt)
        return len(leases)

    def _submit(self, lease: Lease) -> None:
        job = lease.job(
            work_dir=self.work_dir, artifacts=self.artifacts, lake=self.lake, sandbox=self.sandbox
        )
        key = (lease.run_id, lease.attempt)
        self._in_flight[key] = _InFlight(lease, time.monotonic() + self.heartbeat_every)
        try:
            self.engine.submit(job, lease.resources())
        except BaseException:
            del self._in_flight[key]
            raise

    def _submit_failed(self, lease: Lease, exc: Exception) -> None:
        """Record a run that could not be handed to the engine as a failed attempt."""
        reason = permanent_reason(exc)
        if reason is None and isinstance(exc, (ValueError, TypeError)):
            reason = RunReason.submit_refused  # refused as it is: so it will be again
        error = storable_error(
            {
                "ename": type(exc).__name__,
                "evalue": str(exc),
                "traceback": traceback.format_exception(exc),
                "stage": "submit",
            }
        )
        assert error is not None
        if reason is not None:
            error.update(reason=reason, retryable=False)
        log.warning(
            "could not submit run %d attempt %d: %s: %s",
            lease.run_id,
            lease.attempt,
            type(exc).__name__,
            exc,
        )
        try:
            state = self.queue.fail(
                lease, error, duration_s=0.0, retry=reason is None, reason=reason
            )
        except Exception as record_exc:  # its lease expires and the reaper requeues it
            log.warning("could not record that run %d failed: %s", lease.run_id, record_exc)
            return
        self.stats.failed += 1
        self.stats.outcomes.append((lease.run_id, lease.attempt, RunState.FAILED.value))
        log.info(
            "run %d attempt %d: FAILED at submit; the run is %s",
            lease.run_id,
            lease.attempt,
            state.value,
        )

    def _heartbeats(self) -> None:
        now = time.monotonic()
        for key, flight in list(self._in_flight.items()):
            if flight.lost or now < flight.next_heartbeat:
                continue
            flight.next_heartbeat = now + self.heartbeat_every
            try:
                if self.queue.heartbeat(flight.lease):
                    log.info("cancel requested for run %d", flight.lease.run_id)
                    self.engine.cancel(*key)
            except LeaseLostError:
                log.warning("lost the lease of run %d attempt %d; cancelling it", *key)
                flight.lost = True
                self.engine.cancel(*key)
            except Exception as exc:
                log.warning("heartbeat of run %d failed: %s", key[0], exc)

    def _record(self, ended: list[tuple[int, int, AttemptReport]]) -> None:
        """Record what ended: the successes of one poll in one transaction
        (:meth:`RunQueue.succeed_many`), every other outcome on its own; an outcome
        that cannot be recorded is kept for the next step (module docstring)."""
        successes: list[tuple[Lease, AttemptReport]] = []
        for run_id, attempt, reported in ended:
            flight = self._in_flight.pop((run_id, attempt), None)
            if flight is None:
                continue
            outcome = _storable(reported)
            if outcome.state is RunState.SUCCEEDED:
                successes.append((flight.lease, outcome))
            else:
                self._record_failure(flight.lease, outcome)
        if successes:
            self._record_successes(successes)

    def _record_failure(self, lease: Lease, outcome: AttemptReport) -> None:
        try:
            self.queue.fail(
                lease,
                outcome.error or {},
                outcome=outcome.state,
                duration_s=outcome.duration_s,
                artifact_sha256=outcome.artifact_sha256,
                usage=outcome.usage,
                host=outcome.host,
                retry=outcome.retryable,
                reason=outcome.reason,
                cpu_s=outcome.cpu_s,
                peak_mem_mb=outcome.peak_mem_mb,
            )
        except LeaseLostError:
            self._refused(lease.run_id, lease.attempt, outcome)
            return
        except Exception as exc:
            self._keep(lease, outcome, exc)
            return
        self._recorded(lease.run_id, lease.attempt, outcome)
        self.stats.failed += 1

    def _record_successes(self, batch: list[tuple[Lease, AttemptReport]]) -> None:
        successes = [
            Success(
                lease=lease,
                artifact_sha256=outcome.artifact_sha256,
                duration_s=outcome.duration_s,
                kernel_start_s=outcome.kernel_start_s,
                usage=outcome.usage,
                host=outcome.host,
                reason=outcome.reason,
                cpu_s=outcome.cpu_s,
                peak_mem_mb=outcome.peak_mem_mb,
            )
            for lease, outcome in batch
        ]
        try:
            refused = {
                (s.lease.run_id, s.lease.attempt) for s in self.queue.succeed_many(successes)
            }
        except Exception as exc:
            if len(batch) > 1 and not _database_away(exc):
                # One of them is refused: record them one by one, so it fails alone.
                log.warning("could not record %d successes together: %s", len(batch), exc)
                for item in batch:
                    self._record_successes([item])
                return
            for lease, outcome in batch:  # the database is away: keep them, retry next step
                self._keep(lease, outcome, exc)
            return
        for lease, outcome in batch:
            key = (lease.run_id, lease.attempt)
            if key in refused:
                self._refused(*key, outcome)
            else:
                self._recorded(*key, outcome)
                self.stats.succeeded += 1

    def _keep(self, lease: Lease, outcome: AttemptReport, exc: Exception) -> None:
        """Keep an outcome the database did not take, heartbeating its lease meanwhile."""
        key = (lease.run_id, lease.attempt)
        if _database_away(exc):
            log.warning("could not record run %d attempt %d yet: %s", *key, exc)
        else:
            refusals = self._refusals[key] = self._refusals.get(key, 0) + 1
            log.warning(
                "the database refused the outcome of run %d attempt %d (%d times): %s: %s",
                *key,
                refusals,
                type(exc).__name__,
                exc,
            )
            if refusals >= 2 * MAX_RECORD_TRIES:
                log.error("giving up recording run %d attempt %d; its lease will expire", *key)
                self._refusals.pop(key, None)
                return
            if refusals >= MAX_RECORD_TRIES:
                outcome = _bare(outcome, exc)
        self._in_flight[key] = _InFlight(lease, time.monotonic())  # heartbeat it
        self._unrecorded.append((*key, outcome))

    def _recorded(self, run_id: int, attempt: int, outcome: AttemptReport) -> None:
        self._refusals.pop((run_id, attempt), None)
        self.stats.outcomes.append((run_id, attempt, outcome.state.value))
        log.info(
            "run %d attempt %d: %s in %.2fs",
            run_id,
            attempt,
            outcome.state.value,
            outcome.duration_s,
        )

    def _refused(self, run_id: int, attempt: int, outcome: AttemptReport) -> None:
        self._refusals.pop((run_id, attempt), None)
        self.stats.rejected += 1
        log.warning(
            "run %d attempt %d ended %s after its lease was lost; the outcome is refused",
            run_id,
            attempt,
            outcome.state.value,
        )


def _database_away(exc: BaseException) -> bool:
    """The database could not be reached (as opposed to: it refused what was sent)."""
    return isinstance(exc, sa.exc.OperationalError) or (
        isinstance(exc, sa.exc.DBAPIError) and exc.connection_invalidated
    )


def _storable(outcome: AttemptReport) -> AttemptReport:
    """``outcome`` as the database can store it, whichever engine reported it: text
    from a kernel (or an engine) without NUL or lone surrogates, bounded
    (:mod:`nbcast.executor.storable`)."""
    return dataclasses.replace(
        outcome,
        error=storable_error(outcome.error),
        usage=[storable_json(item) for item in outcome.usage or []],
        reason=None if outcome.reason is None else storable_text(outcome.reason, 32),
        host=storable_text(outcome.host, 255),
    )


def _bare(outcome: AttemptReport, exc: BaseException) -> AttemptReport:
    """``outcome`` without what the database may refuse: no warehouse figures, the
    reason cut to its column, and the error (if any) as plain text, with why it had to
    be reduced."""
    reason = str(outcome.reason)[:32] if outcome.reason is not None else None
    error: dict[str, Any] | None = None
    if outcome.error is not None:
        raw = outcome.error if isinstance(outcome.error, Mapping) else {"evalue": outcome.error}
        error = {
            "ename": str(raw.get("ename", ""))[:200],
            "evalue": str(raw.get("evalue", raw.get("message", "")))[:MAX_ERROR_TEXT],
            "unrecordable": f"{type(exc).__name__}: {exc}"[:1000],
        }
        if not outcome.retryable:
            error.update(reason=reason, retryable=False)
    return dataclasses.replace(outcome, usage=[], error=error, reason=reason)


def default_work_dir(home: Path) -> str:
    """Where attempts keep their run folders."""
    return str(home / "runs")
