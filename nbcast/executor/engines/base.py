"""The engine contract and the engine registry (``local``, ``ray``, and third parties'
through the entry point group ``nbcast.engines``; see :mod:`nbcast.registry`).

An :class:`Engine` runs attempts (:class:`~nbcast.executor.attempt.AttemptJob`) and
reports how they ended. The worker owns leases and every database write; an engine
only executes. Its contract:

- ``capacity`` is how many attempts it runs at once; the worker never submits more.
- ``submit(job, resources)`` starts the attempt and returns at once.
- ``poll()`` returns the ``(run_id, attempt, outcome)`` of every attempt that ended
  since the last call, each exactly once. An attempt that crashed the engine's
  machinery is reported FAILED with the error, never silently dropped.
- ``cancel(run_id, attempt)`` stops an attempt (its kernel is ended); it is then
  reported CANCELLED by ``poll``.
- ``close()`` stops everything it started.

``resources`` carries the tenant's quota for the attempt: ``num_cpus``,
``memory_mb`` and the tenant name, which the Ray engine turns into task options.

``nbcast worker --engine NAME`` makes its engine with :meth:`Engine.for_worker` when
the registered factory is an :class:`Engine` subclass (each engine reads the worker
options it understands), else by calling the factory with ``capacity`` only.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import TYPE_CHECKING, Self

from nbcast.executor.attempt import AttemptJob, AttemptReport
from nbcast.registry import Registry

if TYPE_CHECKING:
    from nbcast.db import Database

__all__ = ["Engine", "Resources", "engines"]


@dataclass(frozen=True, kw_only=True)
class Resources:
    """What one attempt may use, from its tenant's quota."""

    tenant: str
    num_cpus: float
    memory_mb: int


class Engine(ABC):
    """Runs attempts (see the module docstring for the contract)."""

    name: str = "engine"
    capacity: int = 1

    @classmethod
    def for_worker(
        cls,
        db: Database,
        *,
        capacity: int,
        warm_kernels: bool = True,
        address: str | None = None,
    ) -> Engine:
        """The engine ``nbcast worker`` runs: ``capacity`` attempts at once, kernels
        pre-started unless ``warm_kernels`` is False, joining the cluster at
        ``address`` if the engine has one. This default passes ``capacity`` only."""
        return cls(capacity=capacity)  # type: ignore[call-arg]

    @abstractmethod
    def submit(self, job: AttemptJob, resources: Resources) -> None:
        """Start ``job``; return at once."""

    @abstractmethod
    def poll(self) -> list[tuple[int, int, AttemptReport]]:
        """Attempts that ended since the last call."""

    @abstractmethod
    def cancel(self, run_id: int, attempt: int) -> None:
        """Stop the attempt."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything."""

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


engines: Registry[Engine] = Registry(
    "engine",
    "nbcast.engines",
    {
        "local": "nbcast.executor.engines.local:LocalEngine",
        "ray": "nbcast.executor.engines.ray:RayEngine",
    },
)
"""The process-wide engine registry."""
