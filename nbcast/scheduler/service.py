"""``nbcast scheduler run``: the long-running scheduler service.

The loop is a generator (:meth:`SchedulerService.iterations`) that yields after each
iteration to a supervisor (:meth:`SchedulerService.run`) which records the
replica's heartbeat and any error, so a failure in one iteration — the database
restarting, say — is logged and the loop goes on.

Each iteration syncs definitions, materializes everything due, and then sleeps
until the earliest ``next_fire_at`` of any definition, but never longer than
``max_sleep`` (so new definitions and resumed ones are picked up promptly) and
never less than ``min_sleep``. SIGTERM and SIGINT wake the sleep and end the loop
after the current iteration; nothing is left half-written because every iteration
commits or rolls back whole transactions.

With the embedded SQLite database only one scheduler may run: it holds a file lock
beside the database *file* (:func:`scheduler_lock`; two homes pointing at one
database file share it), and a second one exits with a clear message. On
PostgreSQL any number of replicas share the work.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from types import FrameType

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.errors import SchedulerLockedError
from nbcast.scheduler.materializer import Materializer, TickResult
from nbcast.scheduler.models import SchedulerReplica, ScheduleState

__all__ = ["SchedulerService", "scheduler_lock"]

log = logging.getLogger("nbcast.scheduler")


@contextlib.contextmanager
def scheduler_lock(db: Database) -> Iterator[None]:
    """Hold the one-scheduler lock for an embedded database; no-op on PostgreSQL.

    The lock is ``<database file>.scheduler.lock``: it belongs to the database, not
    to the home folder, so two processes with different homes but the same database
    file cannot both schedule.
    """
    if db.dialect != "sqlite":
        yield
        return
    from filelock import FileLock, Timeout

    database = db.engine.url.database
    if not database or database == ":memory:":
        yield
        return
    path = Path(database).resolve()
    lock = FileLock(str(path.with_name(path.name + ".scheduler.lock")))
    owner = path.with_name(path.name + ".scheduler.pid")
    try:
        lock.acquire(timeout=0)
    except Timeout:
        pid = owner.read_text().strip() if owner.exists() else "?"
        raise SchedulerLockedError(
            f"another nbcast scheduler (pid {pid}) is running on the embedded database "
            f"{db.safe_url}; with SQLite only one scheduler may run (use PostgreSQL for "
            "replicas)"
        ) from None
    try:
        owner.write_text(str(os.getpid()))
        yield
    finally:
        lock.release()


@dataclass
class Iteration:
    """What one iteration of the loop did."""

    started: datetime
    result: TickResult | None
    error: BaseException | None
    sleep: float


class SchedulerService:
    """The scheduler loop for one replica (see the module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        *,
        name: str | None = None,
        batch: int = 200,
        max_sleep: float = 5.0,
        min_sleep: float = 0.0,
        sync_interval: float = 2.0,
    ) -> None:
        self.db = db
        self.clock = clock
        self.name = name or f"{socket.gethostname()}:{os.getpid()}"
        self.materializer = Materializer(db, clock, name=self.name, batch=batch)
        self.max_sleep = max_sleep
        self.min_sleep = min_sleep
        self._stop = threading.Event()
        self.total = 0
        self.sync_interval = sync_interval
        self._next_sync = 0.0

    def stop(self) -> None:
        """End the loop after the current iteration."""
        self._stop.set()
        self.clock.wake()

    def install_signal_handlers(self) -> None:
        """Stop cleanly on SIGTERM and SIGINT."""

        def handler(signum: int, _frame: FrameType | None) -> None:
            log.info("received %s; stopping", signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGTERM, handler)
        signal.signal(signal.SIGINT, handler)

    def iterations(self) -> Iterator[Iteration]:
        """One sync-and-materialize per step; yields after each."""
        while not self._stop.is_set():
            started = self.clock.now()
            result, error = None, None
            try:
                # New and changed definitions are looked for every ``sync_interval``
                # seconds, not on every wake-up: it is a scan of all definitions.
                due_sync = time.monotonic() >= self._next_sync
                if due_sync:
                    self._next_sync = time.monotonic() + self.sync_interval
                result = self.materializer.tick(sync=due_sync)
                self.total += result.slots
            except Exception as exc:  # the supervisor logs it; the loop goes on
                error = exc
            yield Iteration(started, result, error, self._sleep_seconds())

    def _sleep_seconds(self) -> float:
        try:
            with self.db.session() as session:
                due = session.scalar(
                    sa.select(sa.func.min(ScheduleState.next_fire_at)).where(
                        ScheduleState.paused.is_(False)
                    )
                )
        except Exception:  # a database outage: retry soon
            return min(1.0, self.max_sleep)
        if due is None:
            return self.max_sleep
        wait = (due - self.clock.now()).total_seconds()
        return max(self.min_sleep, min(self.max_sleep, wait))

    def run(self) -> None:
        """Supervise :meth:`iterations` until stopped: heartbeat, log, sleep."""
        self._register()
        log.info("scheduler %s started on %s", self.name, self.db.safe_url)
        for step in self.iterations():
            if step.error is not None:
                log.error("iteration failed: %s", step.error, exc_info=step.error)
            elif step.result is not None and step.result.slots:
                log.info(
                    "materialized %d slots of %d definitions %s",
                    step.result.slots,
                    step.result.definitions,
                    step.result.by_state,
                )
            self._heartbeat(step.error)
            if not self._stop.is_set() and step.sleep > 0:
                self.clock.sleep(step.sleep)
        log.info("scheduler %s stopped after %d slots", self.name, self.total)

    def _register(self) -> None:
        now = self.clock.now()
        with self.db.session() as session:
            session.execute(
                insert_ignore(
                    SchedulerReplica,
                    [
                        {
                            "name": self.name,
                            "host": socket.gethostname(),
                            "pid": os.getpid(),
                            "started_at": now,
                            "heartbeat_at": now,
                            "slots_materialized": 0,
                            "last_error": None,
                        }
                    ],
                    self.db.dialect,
                )
            )
            session.execute(
                sa.update(SchedulerReplica)
                .where(SchedulerReplica.name == self.name)
                .values(started_at=now, heartbeat_at=now, pid=os.getpid(), last_error=None)
            )

    def _heartbeat(self, error: BaseException | None) -> None:
        try:
            with self.db.session() as session:
                session.execute(
                    sa.update(SchedulerReplica)
                    .where(SchedulerReplica.name == self.name)
                    .values(
                        heartbeat_at=self.clock.now(),
                        slots_materialized=self.total,
                        last_error=None if error is None else str(error)[:2000],
                    )
                )
        except Exception as exc:
            log.warning("heartbeat failed: %s", exc)
