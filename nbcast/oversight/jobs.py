"""The oversight layer's periodic work, run by the oversight service
(:mod:`nbcast.oversight.service`).

Two kinds, both driven by the service's clock (so an accelerated clock drives them
in tests) and both safe with several replicas of the service:

- **frequent** checks run at most every :data:`FREQUENT_EVERY` of clock time in each
  replica (the SLA monitor). Each is idempotent: what it records is unique in the
  database, so two replicas finding the same thing record it once.
- **daily** jobs run once per UTC day in the whole installation (retention). A
  replica leases the job's row in ``governance_jobs`` (``lease_owner``,
  ``lease_expires_at``); the others skip it while the lease holds, and a replica
  that died mid-job leaves a lease that expires after :data:`DAILY_LEASE`.

A job that fails is logged and retried at the next step (daily ones keep their day
unrecorded); it never stops the other jobs, nor the service's alerts.
"""

from __future__ import annotations

import functools
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.leasing import LeaseColumns, free, held, released, rowcount, taken
from nbcast.oversight.models import OversightJob

if TYPE_CHECKING:
    from pathlib import Path

    from nbcast.tenancy.checkpoints import AuditKey

__all__ = [
    "DAILY_LEASE",
    "FREQUENT_EVERY",
    "JobRunner",
    "daily_jobs",
    "frequent_checks",
]

log = logging.getLogger("nbcast.oversight")

FREQUENT_EVERY = timedelta(seconds=30)
"""Clock time between two runs of the frequent checks in one replica."""

DAILY_LEASE = timedelta(hours=1)
"""How long a replica holds a daily job before another may take it over."""

JOB_LEASE = LeaseColumns(OversightJob.lease_owner, OversightJob.lease_expires_at)
"""A daily job's lease (:mod:`nbcast.leasing`; no fencing token: one job, one day)."""

Job = Callable[[Database, Clock], dict[str, Any]]
"""A job: does its work, returns a small JSON-able summary."""


def frequent_checks(
    audit_key: AuditKey | None = None, checkpoint_export: Path | None = None
) -> dict[str, Job]:
    """The frequent checks, by name: the SLA monitor, and with an ``audit_key`` the
    audit checkpoints (each tenant at most every
    :data:`~nbcast.tenancy.checkpoints.CHECKPOINT_EVERY`, appended to
    ``checkpoint_export`` too when given)."""
    from nbcast.oversight.sla import check_slas

    checks: dict[str, Job] = {"sla": check_slas}
    if audit_key is not None:
        checks["checkpoints"] = functools.partial(
            checkpoint_job, key=audit_key, export=checkpoint_export
        )
    return checks


def checkpoint_job(
    db: Database, clock: Clock, *, key: AuditKey, export: Path | None
) -> dict[str, Any]:
    """Sign the tenants' audit heads that moved (:mod:`nbcast.tenancy.checkpoints`);
    a chain that does not hold is not signed, and said so in the log."""
    from nbcast.tenancy.checkpoints import CHECKPOINT_EVERY, append_export, make_checkpoints

    made, refused = make_checkpoints(db, clock, key, made_by="scheduler", every=CHECKPOINT_EVERY)
    if export is not None and made:
        append_export(export, made)
    for name in refused:
        log.error("the audit chain of tenant %s does not hold: not checkpointed", name)
    return {"made": len(made), "refused": refused}


def daily_jobs() -> dict[str, Job]:
    """The daily jobs, by name."""
    from nbcast.oversight.retention import retention_job

    return {"retention": retention_job}


@dataclass
class JobRunner:
    """Runs the periodic jobs from an oversight replica's loop (module docstring)."""

    db: Database
    clock: Clock
    owner: str
    frequent: dict[str, Job] = field(default_factory=frequent_checks)
    daily: dict[str, Job] = field(default_factory=daily_jobs)
    last_frequent: datetime | None = None
    failures: int = 0
    done_day: dict[str, Any] = field(default_factory=dict)
    """The last UTC day each daily job is known to have run (no database trip until
    the day changes)."""

    def step(self) -> dict[str, dict[str, Any]]:
        """Run what is due now; return the summaries of what ran."""
        now = self.clock.now()
        done: dict[str, dict[str, Any]] = {}
        if self.last_frequent is None or now - self.last_frequent >= FREQUENT_EVERY:
            self.last_frequent = now
            for name, job in self.frequent.items():
                self._run(name, job, done)
        today = now.astimezone(UTC).date()
        for name, job in self.daily.items():
            if self.done_day.get(name) == today:
                continue
            if self._lease(name, now):
                if self._run(name, job, done):
                    self._finish(name, now, done[name])
                    self.done_day[name] = today
                else:
                    self._release(name)
            elif self._ran_today(name, today):
                self.done_day[name] = today
        return done

    def _run(self, name: str, job: Job, done: dict[str, dict[str, Any]]) -> bool:
        started = time.monotonic()
        try:
            summary = job(self.db, self.clock)
        except Exception:
            self.failures += 1
            log.exception("oversight job %s failed; it is retried at the next step", name)
            return False
        done[name] = {**summary, "seconds": round(time.monotonic() - started, 3)}
        return True

    def _lease(self, name: str, now: datetime) -> bool:
        """Take the daily job ``name`` if today's run is still to do and nobody holds it."""
        today = now.astimezone(UTC).date()
        with self.db.session() as session:
            session.execute(insert_ignore(OversightJob, [{"name": name}], self.db.dialect))
            result = session.execute(
                sa.update(OversightJob)
                .where(
                    OversightJob.name == name,
                    sa.or_(OversightJob.last_day.is_(None), OversightJob.last_day < today),
                    sa.or_(free(JOB_LEASE, now), held(JOB_LEASE, self.owner)),
                )
                .values(taken(JOB_LEASE, self.owner, now, DAILY_LEASE))
            )
            return bool(rowcount(result))

    def _ran_today(self, name: str, today: Any) -> bool:
        with self.db.session() as session:
            return bool(
                session.scalar(
                    sa.select(OversightJob.last_day == today).where(OversightJob.name == name)
                )
            )

    def _finish(self, name: str, now: datetime, summary: dict[str, Any]) -> None:
        with self.db.session() as session:
            session.execute(
                sa.update(OversightJob)
                .where(OversightJob.name == name, held(JOB_LEASE, self.owner))
                .values(
                    last_day=now.astimezone(UTC).date(),
                    last_run_at=now,
                    last_result=summary,
                    **released(JOB_LEASE),
                )
            )

    def _release(self, name: str) -> None:
        with self.db.session() as session:
            session.execute(
                sa.update(OversightJob)
                .where(OversightJob.name == name, held(JOB_LEASE, self.owner))
                .values(released(JOB_LEASE))
            )
