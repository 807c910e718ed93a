"""``nbcast oversight``: the oversight layer's own service.

A :class:`~nbcast.daemon.Service` like the scheduler, the worker and the delivery
worker, started the same way (a command, a systemd unit, one of ``nbcast serve``'s
embedded services). Each step:

1. runs the periodic jobs (:mod:`nbcast.oversight.jobs`): the SLA monitor and the
   audit checkpoints often, retention once a UTC day — each job safe with several
   replicas of this service;
2. sends the due SLA alerts (:mod:`nbcast.oversight.sla_alerts`) through the channels
   the environment configures, as the delivery worker builds them.

A failure in one stage is logged (the supervisor records the step's error) and the
other goes on. The planes never wait for it: slots, runs and deliveries go on while
it is stopped, and what it checks (misses, checkpoints, retention) is caught up when
it starts again, since each job looks at what happened since it last ran.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from nbcast.clock import Clock
from nbcast.daemon import Service, Step, Supervisor, service_name
from nbcast.db import Database
from nbcast.oversight.jobs import JobRunner, frequent_checks
from nbcast.oversight.sla_alerts import AlertWorker

if TYPE_CHECKING:
    from nbcast.delivery.channels.base import Channel
    from nbcast.tenancy.checkpoints import AuditKey

__all__ = ["DEFAULT_INTERVAL", "OversightService", "OversightStep"]

log = logging.getLogger("nbcast.oversight")

DEFAULT_INTERVAL = 5.0
"""Seconds between two steps (the jobs themselves keep their own cadence)."""


@dataclass
class OversightStep:
    """What one step did."""

    jobs: int = 0
    """Jobs that ran and found something to do."""
    alerted: int = 0
    """SLA alerts handled (sent, retried or failed)."""
    error: BaseException | None = None
    """The first stage's failure (the supervisor logs it; a second is logged here)."""

    @property
    def busy(self) -> bool:
        return bool(self.jobs or self.alerted)


class OversightService(Service):
    """Runs the oversight jobs and sends SLA alerts (module docstring)."""

    kind = "oversight"

    def __init__(
        self,
        db: Database,
        clock: Clock,
        channels: Mapping[str, Channel],
        *,
        name: str | None = None,
        base_url: str | None = None,
        lease: timedelta = timedelta(minutes=2),
        audit_key: AuditKey | None = None,
        checkpoint_export: Path | None = None,
        interval: float = DEFAULT_INTERVAL,
        batch: int = 20,
    ) -> None:
        super().__init__()
        self.db = db
        self.clock = clock
        self.name = service_name(name)
        self.interval = interval
        self.batch = batch
        self.jobs = JobRunner(
            db, clock, owner=self.name, frequent=frequent_checks(audit_key, checkpoint_export)
        )
        self.alerts = AlertWorker(
            db, clock, channels, owner=self.name, lease=lease, base_url=base_url
        )
        self.alerted = 0

    def stop(self) -> None:
        """End after the current step."""
        super().stop()
        self.clock.wake()

    def step(self) -> OversightStep:
        """One step: the jobs, then the alerts; a failing stage is logged and the other
        still runs."""
        done = OversightStep()
        try:
            ran = self.jobs.step()
            for job, summary in ran.items():
                if any(v for k, v in summary.items() if k != "seconds"):
                    done.jobs += 1
                    log.info("oversight %s: %s", job, summary)
        except Exception as exc:  # the database is away: the alerts may still go out
            done.error = exc
        try:
            done.alerted = self.alerts.send_due(self.batch)
            self.alerted += done.alerted
        except Exception as exc:
            if done.error is None:
                done.error = exc
            else:
                log.exception("SLA alerts failed")
        return done

    def steps(self) -> Iterator[Step]:
        """One :meth:`step` per step, :attr:`interval` apart while idle."""
        while not self.stopping:
            done = self.step()
            yield Step(busy=done.busy, sleep=self.interval, error=done.error, detail=self._detail())

    def _detail(self) -> dict[str, int]:
        return {"job_failures": self.jobs.failures, "alerts_handled": self.alerted}

    def run(self) -> None:
        """Run under a :class:`~nbcast.daemon.Supervisor` until stopped."""
        Supervisor(self.db, self.clock, self).run()
