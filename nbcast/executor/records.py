"""The records the execution plane's queries return (:mod:`nbcast.executor.queries`).

Each is an immutable dataclass with a ``to_json()`` that gives instants as ISO 8601
UTC with ``Z`` — the form ``nbcast runs list|show --json`` prints and the REST API
will serve.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from nbcast.clock import format_instant
from nbcast.executor.failures import ErrorInfo

__all__ = ["AttemptRecord", "RunRecord", "instant_json"]


def instant_json(value: datetime | None) -> str | None:
    """``value`` in ISO 8601 UTC with ``Z``; None stays None."""
    return format_instant(value) if value is not None else None


@dataclass(frozen=True, kw_only=True)
class RunRecord:
    """A run as listed (``nbcast runs list``)."""

    id: int
    definition: str
    slot_key: str | None
    kind: str
    state: str
    reason: str | None
    fire_at: datetime
    version: int
    parameters: dict[str, Any]
    created_at: datetime
    attempt: int = 0
    """Attempts made so far (the current attempt's number)."""
    artifact_sha256: str | None = None
    """The executed notebook, once the run has ended with one."""
    started_at: datetime | None = None
    finished_at: datetime | None = None
    context: dict[str, Any] | None = None
    """The period it covers (:mod:`nbcast.scheduler.period`); None for a run made
    before runs had one."""
    rerun_of: int | None = None
    """The run a ``rerun`` repeats."""
    test_to: list[str] | None = None
    """A test run's addresses (``[]``: no one); None for every other kind."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (the keys of ``runs list --json``)."""
        return {
            "id": self.id,
            "definition": self.definition,
            "slot_key": self.slot_key,
            "kind": self.kind,
            "state": self.state,
            "reason": self.reason,
            "fire_at": format_instant(self.fire_at),
            "version": self.version,
            "parameters": self.parameters,
            "created_at": format_instant(self.created_at),
            "attempt": self.attempt,
            "artifact_sha256": self.artifact_sha256,
            "started_at": instant_json(self.started_at),
            "finished_at": instant_json(self.finished_at),
            "context": self.context,
            "rerun_of": self.rerun_of,
            "test_to": self.test_to,
        }


@dataclass(frozen=True, kw_only=True)
class AttemptRecord:
    """One attempt at a run: who ran it, where, for how long, and how it ended."""

    attempt: int
    outcome: str | None
    """An :class:`~nbcast.executor.models.Outcome`; None while it runs."""
    worker: str
    host: str
    engine: str
    started_at: datetime
    ended_at: datetime | None = None
    duration_s: float | None = None
    kernel_start_s: float | None = None
    artifact_sha256: str | None = None
    """Its executed notebook (kept for failures too)."""
    error: ErrorInfo | None = None

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "attempt": self.attempt,
            "outcome": self.outcome,
            "worker": self.worker,
            "host": self.host,
            "engine": self.engine,
            "started_at": format_instant(self.started_at),
            "ended_at": instant_json(self.ended_at),
            "duration_s": self.duration_s,
            "kernel_start_s": self.kernel_start_s,
            "artifact_sha256": self.artifact_sha256,
            "error": self.error.to_json() if self.error is not None else None,
        }
