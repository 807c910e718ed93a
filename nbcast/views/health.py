"""How the services are doing: their heartbeat rows and the scheduler's lag.

Every service process keeps a heartbeat row (:mod:`nbcast.daemon`). A row is
**alive** when its state is not ``stopped`` and its last beat is at most
:func:`stale_after` old — three of its heartbeat intervals (which the row records),
never less than :data:`STALE_AFTER` — otherwise the process stopped or died. The
**scheduler lag** is how long the oldest due slot has waited to be materialized: zero
when the scheduler keeps up. Service rows belong to the installation, not to a
tenant: they name hosts and processes, never a report.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.clock import format_instant
from nbcast.daemon import ServiceState
from nbcast.heartbeats import ServiceHeartbeat

__all__ = ["STALE_AFTER", "Health", "ServiceRecord", "health", "stale_after"]

STALE_AFTER = timedelta(seconds=30)
"""The least age at which a heartbeat belongs to a process that is gone."""

BEATS_MISSED = 3
"""Heartbeat intervals a live service may stay silent (a long iteration, say)."""


def stale_after(detail: dict[str, Any] | None) -> timedelta:
    """How old a row's last beat may be while its process still counts as alive: three
    of the intervals the row records (``detail.heartbeat_every_s``, bounded to an hour),
    at least :data:`STALE_AFTER`."""
    every = (detail or {}).get("heartbeat_every_s")
    if isinstance(every, bool) or not isinstance(every, (int, float)) or not 0 < every <= 3600:
        return STALE_AFTER
    return max(STALE_AFTER, timedelta(seconds=BEATS_MISSED * every))


MAX_SERVICES = 500
"""Heartbeat rows listed at most (newest beats first)."""


@dataclass(frozen=True, kw_only=True)
class ServiceRecord:
    """One service process as its heartbeat row tells it."""

    kind: str
    name: str
    host: str
    pid: int
    version: str
    state: str
    alive: bool
    started_at: datetime
    beat_at: datetime
    lag_s: float
    """Seconds since its last heartbeat."""
    iterations: int
    errors: int
    last_error: str | None
    detail: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "kind": self.kind,
            "name": self.name,
            "host": self.host,
            "pid": self.pid,
            "version": self.version,
            "state": self.state,
            "alive": self.alive,
            "started_at": format_instant(self.started_at),
            "beat_at": format_instant(self.beat_at),
            "lag_s": round(self.lag_s, 3),
            "iterations": self.iterations,
            "errors": self.errors,
            "last_error": self.last_error,
            "detail": self.detail,
        }


REQUIRED_KINDS = ("scheduler", "worker", "delivery-worker", "oversight")
"""The services a healthy installation has alive, one of each at least."""


@dataclass(frozen=True, kw_only=True)
class Health:
    """The services from their heartbeat rows, with their lag, and the scheduler's lag.

    Its fields are its JSON (the API's ``Health`` component is derived from them)."""

    ok: bool
    """A scheduler, a worker, a delivery worker and an oversight service are alive and
    the scheduler keeps up (lag under a minute)."""
    checked_at: datetime
    alive: dict[str, int]
    """How many services of each required kind are alive."""
    scheduler_lag_s: float
    """Seconds the oldest due, unmaterialized slot has waited (0: none waits)."""
    unsandboxed_workers: list[str]
    """Live workers running reports without a sandbox (``--sandbox off``, or a machine
    that cannot sandbox): the status page warns for as long as they run."""
    services: list[ServiceRecord]

    def alive_count(self, kind: str) -> int:
        """How many services of ``kind`` are alive (any kind, required or not)."""
        return _alive(self.services, kind)

    def ray_dashboard(self) -> str | None:
        """The Ray dashboard a live worker reported (its heartbeat's ``ray_dashboard``,
        the freshest beat first), or None."""
        for service in sorted(self.services, key=lambda s: s.lag_s):
            url = service.detail.get("ray_dashboard") if service.alive else None
            if service.kind == "worker" and isinstance(url, str) and url:
                return url
        return None

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "ok": self.ok,
            "checked_at": format_instant(self.checked_at),
            "alive": dict(self.alive),
            "scheduler_lag_s": round(self.scheduler_lag_s, 3),
            "unsandboxed_workers": list(self.unsandboxed_workers),
            "services": [s.to_json() for s in self.services],
        }


def _alive(services: list[ServiceRecord], kind: str) -> int:
    return sum(1 for s in services if s.kind == kind and s.alive)


def health(session: Session, now: datetime) -> Health:
    """The services' heartbeats and the scheduler's lag as of ``now``."""
    from nbcast.scheduler.models import ScheduleState

    rows = session.scalars(
        sa.select(ServiceHeartbeat)
        .order_by(ServiceHeartbeat.beat_at.desc(), ServiceHeartbeat.id)
        .limit(MAX_SERVICES)
    ).all()
    services = [
        ServiceRecord(
            kind=row.kind,
            name=row.name,
            host=row.host,
            pid=row.pid,
            version=row.version,
            state=row.state,
            alive=row.state != ServiceState.stopped
            and now - row.beat_at <= stale_after(row.detail),
            started_at=row.started_at,
            beat_at=row.beat_at,
            lag_s=max((now - row.beat_at).total_seconds(), 0.0),
            iterations=row.iterations,
            errors=row.errors,
            last_error=row.last_error,
            detail=dict(row.detail or {}),
        )
        for row in rows
    ]
    oldest_due = session.scalar(
        sa.select(sa.func.min(ScheduleState.next_fire_at)).where(
            ScheduleState.paused.is_(False), ScheduleState.next_fire_at <= now
        )
    )
    lag = (now - oldest_due).total_seconds() if oldest_due is not None else 0.0
    lag = max(lag, 0.0)
    alive = {k: _alive(services, k) for k in REQUIRED_KINDS}
    return Health(
        ok=all(alive.values()) and lag < 60,
        checked_at=now,
        alive=alive,
        scheduler_lag_s=lag,
        unsandboxed_workers=sorted(
            s.name
            for s in services
            if s.kind == "worker" and s.alive and s.detail.get("sandbox") == "off"
        ),
        services=services,
    )
