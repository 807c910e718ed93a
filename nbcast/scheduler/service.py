"""``nbcast scheduler run``: the long-running scheduler service.

A :class:`~nbcast.daemon.Service`: each step syncs definitions and materializes
everything due, then yields to the :class:`~nbcast.daemon.Supervisor`, which records
the heartbeat and any error, so a failure in one iteration — the database
restarting, say — is logged and the loop goes on. It asks to sleep until the earliest
``next_fire_at`` of any definition, but never longer than ``max_sleep`` (so new
definitions and resumed ones are picked up promptly) and never less than
``min_sleep``. SIGTERM and SIGINT (through the supervisor) end the loop after the
current iteration; nothing is left half-written because every iteration commits or
rolls back whole transactions.

With the embedded SQLite database only one scheduler may run: it holds a file lock
beside the database *file* (:func:`scheduler_lock`; two homes pointing at one
database file share it), and a second one exits with a clear message. On
PostgreSQL any number of replicas share the work.

The oversight layer's periodic jobs (the SLA monitor, audit checkpoints, retention)
are a service of their own (:mod:`nbcast.oversight.service`), above the planes.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Iterator
from pathlib import Path

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.daemon import Service, Step, Supervisor, service_name
from nbcast.db import Database
from nbcast.errors import SchedulerLockedError
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import ScheduleState

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


class SchedulerService(Service):
    """The scheduler loop for one replica (see the module docstring)."""

    kind = "scheduler"

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
        super().__init__()
        self.db = db
        self.clock = clock
        self.name = service_name(name)
        self.materializer = Materializer(db, clock, name=self.name, batch=batch)
        self.max_sleep = max_sleep
        self.min_sleep = min_sleep
        self.total = 0
        self.failed = 0
        self.sync_interval = sync_interval
        self._next_sync = 0.0

    def stop(self) -> None:
        """End the loop after the current iteration."""
        super().stop()
        self.clock.wake()

    def steps(self) -> Iterator[Step]:
        """One sync-and-materialize per step."""
        while not self.stopping:
            try:
                # New and changed definitions are looked for every ``sync_interval``
                # seconds, not on every wake-up: it is a scan of all definitions.
                due_sync = time.monotonic() >= self._next_sync
                if due_sync:
                    self._next_sync = time.monotonic() + self.sync_interval
                result = self.materializer.tick(sync=due_sync)
            except Exception as exc:  # the supervisor logs it; the loop goes on
                yield Step(error=exc, sleep=min(1.0, self.max_sleep), detail=self._detail())
                continue
            self.total += result.slots
            self.failed += result.failed
            if result.slots:
                log.info(
                    "materialized %d slots of %d definitions %s",
                    result.slots,
                    result.definitions,
                    result.by_state,
                )
            yield Step(sleep=self._sleep_seconds(), detail=self._detail())
        log.info("scheduler %s stopped after %d slots", self.name, self.total)

    def _detail(self) -> dict[str, int]:
        return {
            "slots_materialized": self.total,
            "definitions_failed": self.failed,
        }

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
        """Run under a :class:`~nbcast.daemon.Supervisor` until stopped."""
        Supervisor(self.db, self.clock, self).run()
