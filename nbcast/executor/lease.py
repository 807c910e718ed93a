"""What a claim hands a worker (:class:`Lease`) and what the worker hands back when an
attempt succeeds (:class:`Success`); how long a failed run waits (:class:`Backoff`).

The records only: the fenced writes that use them are :mod:`nbcast.executor.leases`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from nbcast.clock import format_instant
from nbcast.errors import LeaseLostError
from nbcast.executor import bounds
from nbcast.executor.attempt import AttemptJob
from nbcast.executor.engines.base import Resources
from nbcast.executor.quotas import Quota
from nbcast.retry import backoff
from nbcast.sandbox.policy import SandboxTemplate

__all__ = ["Backoff", "Lease", "Success", "lease_lost"]


@dataclass(frozen=True, kw_only=True)
class Lease:
    """A claimed attempt at a run: everything a worker needs to execute it."""

    run_id: int
    attempt: int
    owner: str
    expires_at: datetime
    tenant_id: int
    tenant: str
    definition_id: int
    definition: str
    version: int
    slot_key: str | None
    kind: str
    fire_at: datetime
    parameters: dict[str, Any]
    notebook_json: str
    quota: Quota
    warehouse: dict[str, Any] | None = None
    context: dict[str, Any] | None = None
    """The run's frozen context (:mod:`nbcast.scheduler.period`), read when the lease
    starts (:meth:`~nbcast.executor.leases.Leases.start_many`); None for a run made
    before runs had one."""
    audience: str = ""
    """The recipient scope the run is for (:mod:`nbcast.definitions.audiences`)."""
    row_filter: dict[str, Any] | None = None
    """The scope's row filter, applied by the warehouse to every query of the run."""
    budget_bytes_left: int | None = None
    """Warehouse bytes the tenant's daily budget had left at the claim (None: none)."""
    sandbox_network: str = "host"
    """What the tenant's kernels reach (:class:`nbcast.sandbox.policy.Network`)."""
    retry_on: tuple[str, ...] = ()
    """The exception names of the report's own code worth another attempt (its
    version's ``retry_on``; any other fails the run at once)."""

    @property
    def label(self) -> str:
        """``nbcast:<tenant>/<definition>@<slot>``: how the run appears in Ray and logs."""
        return f"nbcast:{self.tenant}/{self.definition}@{self.slot_key or f'manual-{self.run_id}'}"

    def job(
        self,
        *,
        work_dir: str,
        artifacts: str,
        lake: str | None = None,
        sandbox: SandboxTemplate | None = None,
    ) -> AttemptJob:
        """The attempt as an engine runs it: no database handles, the run timeout
        bounded (:func:`nbcast.executor.bounds.run_timeout`), in a sandbox made from
        ``sandbox`` and the tenant's settings (None: the worker runs unsandboxed)."""
        spec = None
        if sandbox is not None:
            spec = sandbox.spec(
                tenant=self.tenant,
                tenant_id=self.tenant_id,
                network=self.sandbox_network,
                memory_mb=self.quota.memory_mb_per_run,
                processes=self.quota.max_processes_per_run,
                concurrency=self.quota.max_concurrent_runs,
            )
        return AttemptJob(
            run_id=self.run_id,
            attempt=self.attempt,
            tenant=self.tenant,
            definition=self.definition,
            label=self.label,
            notebook_json=self.notebook_json,
            parameters=self.parameters,
            timeout_s=bounds.run_timeout(self.quota.run_timeout_s),
            work_dir=work_dir,
            artifacts=artifacts,
            warehouse=self.warehouse,
            lake=lake,
            run=self.run_context(),
            row_filter=self.row_filter,
            budget_bytes_left=self.budget_bytes_left,
            sandbox=spec,
            retry_on=self.retry_on,
        )

    def run_context(self) -> dict[str, Any]:
        """What ``nbcast.context()`` returns inside the kernel (JSON): the run's stored
        context with who and which attempt it is. A run made before runs had a context
        gets the empty interval at its fire time."""
        fire = format_instant(self.fire_at)
        stored = self.context or {
            "kind": self.kind,
            "slot_key": self.slot_key,
            "timezone": "UTC",
            "nominal": self.fire_at.isoformat(),
            "fire_at": fire,
            "interval_start": self.fire_at.isoformat(),
            "interval_end": self.fire_at.isoformat(),
        }
        return {
            **stored,
            "tenant": self.tenant,
            "definition": self.definition,
            "version": self.version,
            "run_id": self.run_id,
            "attempt": self.attempt,
        }

    def resources(self) -> Resources:
        """What the attempt may use, from its tenant's quota."""
        return Resources(
            tenant=self.tenant,
            num_cpus=self.quota.cpus_per_run,
            memory_mb=self.quota.memory_mb_per_run,
        )


@dataclass(frozen=True, kw_only=True)
class Success:
    """A successful attempt to record (:meth:`~nbcast.executor.leases.Leases.succeed_many`)."""

    lease: Lease
    artifact_sha256: str | None
    duration_s: float
    kernel_start_s: float | None = None
    usage: list[dict[str, Any]] = field(default_factory=list)
    host: str = ""
    """Where it actually ran (a Ray node), when not the claiming host."""
    reason: str | None = None
    """The run's reason: None, or ``ended_early`` (:mod:`nbcast.executor.early_exit`)."""
    cpu_s: float | None = None
    """CPU seconds the kernel used."""
    peak_mem_mb: float | None = None
    """The kernel's peak resident memory, MB."""


@dataclass(frozen=True)
class Backoff:
    """How long a run waits before its next attempt (module docstring: Retries)."""

    base: float = 30.0
    cap: float = 3600.0

    @classmethod
    def checked(cls, base: float, cap: float) -> Backoff:
        """A backoff from configured figures: ``ConfigError`` for nonsense, at most
        :data:`nbcast.executor.bounds.MAX_BACKOFF_S` each."""
        return cls(bounds.backoff_seconds(base), bounds.backoff_seconds(cap, "retry backoff cap"))

    def delay(self, attempt: int) -> timedelta:
        """The wait after failed attempt number ``attempt`` (random, full jitter)."""
        return backoff(attempt, base=self.base, cap=self.cap)


def lease_lost(lease: Lease) -> LeaseLostError:
    """The error of a fenced write that matched no row: the attempt lost its run."""
    return LeaseLostError(
        f"run {lease.run_id} attempt {lease.attempt} is no longer held by {lease.owner}"
    )
