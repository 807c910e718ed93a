"""The long-running services' one supervisor: signals, graceful stop, logging, heartbeats.

nbcast runs three services — ``nbcast scheduler run``, ``nbcast worker`` and ``nbcast
delivery-worker`` — and they share one shape (Dagster's daemons are the model):

- a :class:`Service` is a generator of :class:`Step` s (:meth:`Service.steps`): it does
  one iteration of its loop, then yields what happened — whether it was busy, how
  long it would like to sleep, the error of a failed iteration, whether it is done —
  and never sleeps, logs a failure or handles a signal itself;
- the :class:`Supervisor` runs the generator: it logs each failed iteration (with its
  traceback) and goes on, sleeps on the service's clock between idle steps (so an
  accelerated or fixed clock drives a service in tests), turns the first SIGTERM or
  SIGINT into :meth:`Service.stop` (finish what is under way, then end) and a second
  into :meth:`Service.halt` (abandon it), and keeps a **heartbeat row** in
  ``service_heartbeats``: kind, name, host, pid, version, started, last beat,
  iterations, errors, the last error and a small ``detail`` of the service's
  counters — written when the service starts, every ``heartbeat_every`` seconds, after
  a failed iteration, and when it stops (state ``stopped``).

The status page and the embedded-services supervisor of the server read these rows:
a row whose ``beat_at`` is older than a few heartbeats belongs to a process that died.
A heartbeat that cannot be written (the database is away) is logged and retried at
the next one; it never stops the service.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime
from enum import StrEnum
from types import FrameType
from typing import Any, ClassVar

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.heartbeats import ServiceHeartbeat

__all__ = [
    "DEFAULT_HEARTBEAT_S",
    "Service",
    "ServiceState",
    "Step",
    "Supervisor",
    "service_name",
]

log = logging.getLogger("nbcast.daemon")


DEFAULT_HEARTBEAT_S = 5.0
"""Seconds between two heartbeats of a service, unless ``NBCAST_HEARTBEAT_SECONDS``
says otherwise. Each row records its own interval (``detail.heartbeat_every_s``), so
whoever reads it (:mod:`nbcast.views.health`) knows when it is overdue."""


class ServiceState(StrEnum):
    """The ``state`` of a heartbeat row."""

    running = "running"
    """Working."""
    stopping = "stopping"
    """A first signal arrived: finishing what is under way."""
    stopped = "stopped"
    """Ended (the row stays: the status page shows when)."""


@dataclass(frozen=True)
class Step:
    """What one iteration of a service did."""

    busy: bool = False
    """It did work: the next step follows at once."""
    sleep: float = 0.0
    """Clock seconds to wait before the next step when it was not busy."""
    error: BaseException | None = None
    """The iteration failed with this (logged by the supervisor; the loop goes on)."""
    done: bool = False
    """The service has ended (stopped and drained, or idle with exit-when-idle)."""
    detail: Mapping[str, Any] = field(default_factory=dict)
    """Counters for the heartbeat row (small, JSON-serializable)."""


class Service(ABC):
    """A long-running loop, one :class:`Step` per iteration (module docstring)."""

    kind: ClassVar[str]
    """``scheduler``, ``worker`` or ``delivery-worker``."""
    name: str
    """This process's name among the services of its kind (default ``host:pid``)."""

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._halting = threading.Event()

    @abstractmethod
    def steps(self) -> Iterator[Step]:
        """Run the loop, yielding after every iteration; return when done."""

    def stop(self) -> None:
        """End after what is under way (first SIGTERM)."""
        self._stopping.set()

    def halt(self) -> None:
        """End now, abandoning what is under way (second SIGTERM)."""
        self._halting.set()
        self._stopping.set()

    @property
    def stopping(self) -> bool:
        """Whether :meth:`stop` (or :meth:`halt`) was called."""
        return self._stopping.is_set()

    def close(self) -> None:  # noqa: B027 - an optional hook
        """Release what the service holds (called once, after its last step)."""


def service_name(name: str | None = None) -> str:
    """``name``, or ``host:pid``."""
    return name or f"{socket.gethostname()}:{os.getpid()}"


class Supervisor:
    """Runs one :class:`Service` until it ends (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        service: Service,
        *,
        heartbeat_every: float = DEFAULT_HEARTBEAT_S,
    ) -> None:
        self.db = db
        self.clock = clock
        self.service = service
        self.heartbeat_every = heartbeat_every
        self.iterations = 0
        self.errors = 0
        self.last_error: str | None = None
        self._signals = 0
        self._next_beat = 0.0
        self._detail: Mapping[str, Any] = {}

    # -- signals -------------------------------------------------------------------

    def install_signal_handlers(self) -> None:
        """SIGTERM/SIGINT: stop gracefully; the second one: halt."""
        signal.signal(signal.SIGTERM, self._on_signal)
        signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, _frame: FrameType | None) -> None:
        self._signals += 1
        name = signal.Signals(signum).name
        if self._signals == 1:
            log.info(
                "received %s; stopping %s %s",
                name,
                self.service.kind,
                self.service.name,
                extra=self._fields("stopping"),
            )
            self.service.stop()
        else:
            log.info(
                "second %s: halting %s now", name, self.service.kind, extra=self._fields("halting")
            )
            self.service.halt()
        self.clock.wake()

    # -- the loop ------------------------------------------------------------------

    def run(self) -> None:
        """Run the service's steps until it is done; heartbeat throughout."""
        service = self.service
        log.info(
            "%s %s started on %s",
            service.kind,
            service.name,
            self.db.safe_url,
            extra=self._fields("started"),
        )
        self._beat(ServiceState.running, started=True)
        try:
            for step in service.steps():
                self.iterations += 1
                if step.detail:
                    self._detail = dict(step.detail)
                if step.error is not None:
                    self.errors += 1
                    self.last_error = f"{type(step.error).__name__}: {step.error}"[:2000]
                    log.error(
                        "%s iteration failed: %s",
                        service.kind,
                        step.error,
                        exc_info=step.error,
                        extra=self._fields("iteration_failed"),
                    )
                    self._beat(self._state())
                elif time.monotonic() >= self._next_beat:
                    self._beat(self._state())
                if step.done:
                    break
                if not step.busy and step.sleep > 0 and not service.stopping:
                    self.clock.sleep(step.sleep)
        finally:
            try:
                service.close()
            finally:
                self._beat(ServiceState.stopped)
                log.info("%s %s stopped", service.kind, service.name, extra=self._fields("stopped"))

    def _fields(self, event: str) -> dict[str, object]:
        """The structured fields of this service's log lines (:mod:`nbcast.logs`)."""
        return {
            "event": event,
            "service": self.service.kind,
            "service_name": self.service.name,
            "iterations": self.iterations,
        }

    def _state(self) -> ServiceState:
        return ServiceState.stopping if self.service.stopping else ServiceState.running

    # -- heartbeats ----------------------------------------------------------------

    def _beat(self, state: ServiceState, *, started: bool = False) -> None:
        self._next_beat = time.monotonic() + self.heartbeat_every
        now = self.clock.now()
        values: dict[str, Any] = {
            "host": socket.gethostname()[:255],
            "pid": os.getpid(),
            "version": _version(),
            "state": state.value,
            "beat_at": now,
            "iterations": self.iterations,
            "errors": self.errors,
            "last_error": self.last_error,
            "detail": {**self._detail, "heartbeat_every_s": self.heartbeat_every},
        }
        if started:
            values.update(started_at=now, stopped_at=None)
        if state == ServiceState.stopped:
            values["stopped_at"] = now
        try:
            with self.db.session() as session:
                key = {"kind": self.service.kind, "name": self.service.name[:255]}
                if started:
                    session.execute(
                        insert_ignore(ServiceHeartbeat, [{**key, **values}], self.db.dialect)
                    )
                session.execute(
                    sa.update(ServiceHeartbeat)
                    .where(
                        ServiceHeartbeat.kind == key["kind"], ServiceHeartbeat.name == key["name"]
                    )
                    .values(**values)
                )
        except Exception as exc:  # the database is away: try again at the next beat
            log.warning(
                "heartbeat of %s %s failed: %s",
                self.service.kind,
                self.service.name,
                exc,
                extra=self._fields("heartbeat_failed"),
            )


def _version() -> str:
    from nbcast import __version__

    return __version__


def heartbeat_age(beat_at: datetime, now: datetime) -> float:
    """Seconds since a heartbeat (the service's lag as the status page shows it)."""
    return max((now - beat_at).total_seconds(), 0.0)
