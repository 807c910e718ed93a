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
   stays with whichever attempt holds it now.

SIGTERM stops claiming, lets the running attempts finish (their leases keep being
renewed) and then exits; a second SIGTERM cancels them. ``exit_when_idle`` makes the
worker exit once nothing is due and nothing is running (for demos and batch jobs).
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from types import FrameType

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.errors import LeaseLostError
from nbcast.executor.attempt import AttemptJob, AttemptOutcome
from nbcast.executor.engines.base import Engine, Resources
from nbcast.executor.models import Run, RunState
from nbcast.executor.queue import Lease, RunQueue, Success

__all__ = ["Worker", "WorkerStats"]

log = logging.getLogger("nbcast.worker")


@dataclass
class WorkerStats:
    """Counts since the worker started."""

    claimed: int = 0
    succeeded: int = 0
    failed: int = 0
    rejected: int = 0
    """Outcomes refused because their lease had been lost (fencing)."""
    outcomes: list[tuple[int, int, str]] = field(default_factory=list)


@dataclass
class _InFlight:
    lease: Lease
    next_heartbeat: float
    lost: bool = False


class Worker:
    """The worker loop for one engine (see the module docstring)."""

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
    ) -> None:
        self.db = db
        self.clock = clock
        self.engine = engine
        self.name = name
        self.artifacts = artifacts
        self.work_dir = work_dir
        self.lake = lake
        self.poll_interval = poll_interval
        self.heartbeat_every = max(lease_seconds / 3, 0.2)
        self.queue = RunQueue(
            db,
            clock,
            owner=name,
            lease_seconds=lease_seconds,
            engine=engine.name,
            backoff_base=backoff_base,
        )
        self.stats = WorkerStats()
        self._in_flight: dict[tuple[int, int], _InFlight] = {}
        # Outcomes the database could not take yet (it was away): recorded next step.
        self._unrecorded: list[tuple[int, int, AttemptOutcome]] = []
        self._draining = threading.Event()
        self._stop = threading.Event()

    # -- control ------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: drain (finish running attempts); a second one: cancel them."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            if self._draining.is_set():
                log.info("second %s: cancelling running attempts", signal.Signals(signum).name)
                for key in list(self._in_flight):
                    self.engine.cancel(*key)
            log.info(
                "received %s; finishing %d running attempts",
                signal.Signals(signum).name,
                len(self._in_flight),
            )
            self._draining.set()
            self.clock.wake()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def stop(self) -> None:
        """Stop claiming; exit once running attempts have ended."""
        self._draining.set()
        self.clock.wake()

    @property
    def busy(self) -> int:
        """Attempts in flight."""
        return len(self._in_flight)

    # -- the loop -----------------------------------------------------------------

    def run(self, *, exit_when_idle: bool = False) -> WorkerStats:
        """Loop until stopped (or idle, with ``exit_when_idle``)."""
        log.info(
            "worker %s started (engine %s, capacity %d)",
            self.name,
            self.engine.name,
            self.engine.capacity,
        )
        while True:
            claimed = self.step()
            if self._draining.is_set() and not self._in_flight:
                break
            if exit_when_idle and not claimed and not self._in_flight and not self._due():
                break
            if not claimed:
                self.clock.sleep(self.poll_interval)
        log.info("worker %s stopped: %s", self.name, self.stats)
        return self.stats

    def _due(self) -> bool:
        now = self.clock.now()
        with self.db.session() as session:
            return bool(
                session.scalar(
                    sa.select(
                        sa.exists().where(
                            Run.state.in_(("QUEUED", "LEASED", "RUNNING")), Run.not_before <= now
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
        if free > 0 and not self._draining.is_set():
            claimed = self._claim(free)
        self._heartbeats()
        unrecorded, self._unrecorded = self._unrecorded, []
        self._record(unrecorded + self.engine.poll())
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
            job = AttemptJob(
                run_id=lease.run_id,
                attempt=lease.attempt,
                tenant=lease.tenant,
                definition=lease.definition,
                label=lease.label,
                notebook_json=lease.notebook_json,
                parameters=lease.parameters,
                timeout_s=float(lease.quota.run_timeout_s),
                work_dir=self.work_dir,
                artifacts=self.artifacts,
                warehouse=lease.warehouse,
                lake=self.lake,
            )
            resources = Resources(
                tenant=lease.tenant,
                num_cpus=lease.quota.cpus_per_run,
                memory_mb=lease.quota.memory_mb_per_run,
            )
            self._in_flight[(lease.run_id, lease.attempt)] = _InFlight(
                lease, time.monotonic() + self.heartbeat_every
            )
            self.engine.submit(job, resources)
            self.stats.claimed += 1
            log.info("started %s (run %d attempt %d)", lease.label, lease.run_id, lease.attempt)
        return len(leases)

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

    def _record(self, ended: list[tuple[int, int, AttemptOutcome]]) -> None:
        """Record what ended: the successes of one poll in one transaction
        (:meth:`RunQueue.succeed_many`), every other outcome on its own."""
        successes: list[Success] = []
        outcomes_by_key = {(run_id, attempt): outcome for run_id, attempt, outcome in ended}
        for run_id, attempt, outcome in ended:
            flight = self._in_flight.pop((run_id, attempt), None)
            if flight is None:
                continue
            lease = flight.lease
            if outcome.state is RunState.SUCCEEDED:
                successes.append(
                    Success(
                        lease=lease,
                        artifact_sha256=outcome.artifact_sha256,
                        duration_s=outcome.duration_s,
                        kernel_start_s=outcome.kernel_start_s,
                        usage=outcome.usage,
                        host=outcome.host,
                    )
                )
                continue
            try:
                self.queue.fail(
                    lease,
                    outcome.error or {},
                    outcome=outcome.state,
                    duration_s=outcome.duration_s,
                    artifact_sha256=outcome.artifact_sha256,
                    usage=outcome.usage,
                    host=outcome.host,
                )
            except LeaseLostError:
                self._refused(run_id, attempt, outcome)
                continue
            self._recorded(run_id, attempt, outcome)
            self.stats.failed += 1
        if not successes:
            return
        try:
            refused = {
                (s.lease.run_id, s.lease.attempt) for s in self.queue.succeed_many(successes)
            }
        except Exception as exc:  # the database is away: keep the outcomes, retry next step
            log.warning("could not record %d successes yet: %s", len(successes), exc)
            for s in successes:
                key = (s.lease.run_id, s.lease.attempt)
                self._in_flight[key] = _InFlight(s.lease, time.monotonic())  # heartbeat it
                self._unrecorded.append((*key, outcomes_by_key[key]))
            return
        for s in successes:
            key = (s.lease.run_id, s.lease.attempt)
            outcome = outcomes_by_key[key]
            if key in refused:
                self._refused(*key, outcome)
            else:
                self._recorded(*key, outcome)
                self.stats.succeeded += 1

    def _recorded(self, run_id: int, attempt: int, outcome: AttemptOutcome) -> None:
        self.stats.outcomes.append((run_id, attempt, outcome.state.value))
        log.info(
            "run %d attempt %d: %s in %.2fs",
            run_id,
            attempt,
            outcome.state.value,
            outcome.duration_s,
        )

    def _refused(self, run_id: int, attempt: int, outcome: AttemptOutcome) -> None:
        self.stats.rejected += 1
        log.warning(
            "run %d attempt %d ended %s after its lease was lost; the outcome is refused",
            run_id,
            attempt,
            outcome.state.value,
        )


def default_work_dir(home: Path) -> str:
    """Where attempts keep their run folders."""
    return str(home / "runs")
