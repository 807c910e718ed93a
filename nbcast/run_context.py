"""``nbcast.context()``: which run a notebook is executing for, inside the kernel.

::

    import nbcast

    ctx = nbcast.context()
    ctx.slot_key          # "2026-11-02T07:00"
    ctx.nominal           # 2026-11-02 07:00+01:00 (aware, the definition's zone)
    ctx.interval_start    # 2026-10-30 07:00+01:00 — the data interval [start, end)
    ctx.interval_end      # 2026-11-02 07:00+01:00
    ctx.missed_before     # 0 — MISSED slots right before this one

The context travels with the run, like its parameters: the executor writes it into
the run-context file it points ``NBCAST_RUN_CONTEXT`` at before the notebook's first
cell, so this needs no database and every attempt of a run sees the same values
(but ``attempt``). It is frozen: a notebook cannot change what it reports about its
run. Outside nbcast — a notebook opened in JupyterLab, run by nbval — there is no
run, and ``context()`` describes *now*: kind ``interactive``, the zone UTC, an empty
interval at the current instant, no tenant or definition.

This module runs in every kernel: it imports only the standard library.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

__all__ = ["RunContext", "context"]


@dataclass(frozen=True, kw_only=True)
class RunContext:
    """The run a notebook executes for (module docstring)."""

    tenant: str | None
    definition: str | None
    version: int | None
    run_id: int | None
    attempt: int | None
    kind: str
    """``scheduled``, ``backfill``, ``manual`` — or ``interactive`` outside nbcast."""
    slot_key: str | None
    timezone: str
    nominal: datetime
    """The slot's wall time in its zone (a manual run: the instant it was asked for)."""
    fire_at: datetime
    """When the slot fires, UTC."""
    interval_start: datetime
    interval_end: datetime
    missed_before: int = 0
    """MISSED slots right before this run's (the scheduler was down, say): its interval
    starts where theirs end, so a report that should cover them widens its own query —
    or an admin backfills them."""
    test: bool = False
    """A test run (``nbcast run --test``): it goes to no subscriber. A dry run of a slot
    otherwise sees exactly that slot's context, so it runs what the slot will run; a
    report with side effects of its own (writing a table, calling a service) should
    skip them when this is true."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form, as the executed notebook's metadata records it."""
        return {
            "tenant": self.tenant,
            "definition": self.definition,
            "version": self.version,
            "run_id": self.run_id,
            "attempt": self.attempt,
            "kind": self.kind,
            "slot_key": self.slot_key,
            "timezone": self.timezone,
            "nominal": self.nominal.isoformat(),
            "fire_at": self.fire_at.astimezone(UTC).isoformat().replace("+00:00", "Z"),
            "interval_start": self.interval_start.isoformat(),
            "interval_end": self.interval_end.isoformat(),
            "missed_before": self.missed_before,
            "test": self.test,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> RunContext:
        """The context a run-context file's ``run`` section describes."""
        return cls(
            tenant=data.get("tenant"),
            definition=data.get("definition"),
            version=data.get("version"),
            run_id=data.get("run_id"),
            attempt=data.get("attempt"),
            kind=str(data["kind"]),
            slot_key=data.get("slot_key"),
            timezone=str(data.get("timezone", "UTC")),
            nominal=_instant(data["nominal"]),
            fire_at=_instant(data["fire_at"]),
            interval_start=_instant(data["interval_start"]),
            interval_end=_instant(data["interval_end"]),
            missed_before=_count(data.get("missed_before")),
            test=data.get("test") is True,
        )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def _instant(text: str) -> datetime:
    value = datetime.fromisoformat(str(text))
    return value if value.tzinfo is not None else value.replace(tzinfo=UTC)


def context() -> RunContext:
    """The current run's context; outside nbcast, an ``interactive`` one for now."""
    path = os.environ.get("NBCAST_RUN_CONTEXT")
    if path:
        try:
            with open(path, encoding="utf-8") as handle:
                run = json.load(handle).get("run")
        except (OSError, ValueError, AttributeError):
            run = None
        if isinstance(run, dict):
            return RunContext.from_json(run)
    now = datetime.now(UTC)
    return RunContext(
        tenant=None,
        definition=None,
        version=None,
        run_id=None,
        attempt=None,
        kind="interactive",
        slot_key=None,
        timezone="UTC",
        nominal=now,
        fire_at=now,
        interval_start=now,
        interval_end=now,
    )
