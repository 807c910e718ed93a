"""The engine contract and the engine registry.

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
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from nbcast.errors import ConfigError
from nbcast.executor.attempt import AttemptJob, AttemptOutcome

__all__ = ["Engine", "EngineRegistry", "Resources", "engines"]


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

    @abstractmethod
    def submit(self, job: AttemptJob, resources: Resources) -> None:
        """Start ``job``; return at once."""

    @abstractmethod
    def poll(self) -> list[tuple[int, int, AttemptOutcome]]:
        """Attempts that ended since the last call."""

    @abstractmethod
    def cancel(self, run_id: int, attempt: int) -> None:
        """Stop the attempt."""

    @abstractmethod
    def close(self) -> None:
        """Stop everything."""

    def __enter__(self) -> Engine:
        return self

    def __exit__(self, *_: object) -> None:
        self.close()


class EngineRegistry:
    """Engine factories by name, papermill-style; ``nbcast.engines`` entry points too."""

    def __init__(self) -> None:
        self._factories: dict[str, Callable[..., Engine]] = {}

    def register(self, name: str, factory: Callable[..., Engine]) -> None:
        """Make ``factory`` available as ``name``."""
        self._factories[name] = factory

    def register_entry_points(self) -> None:
        """Register every engine of the ``nbcast.engines`` entry point group."""
        from importlib.metadata import entry_points

        for point in entry_points(group="nbcast.engines"):
            self.register(point.name, point.load())

    def create(self, name: str, **options: Any) -> Engine:
        """A new engine ``name`` built with ``options``."""
        if name not in self._factories:
            self._builtins()
            self.register_entry_points()
        try:
            factory = self._factories[name]
        except KeyError:
            known = ", ".join(sorted(self._factories)) or "none"
            raise ConfigError(f"unknown engine {name!r} (known: {known})") from None
        return factory(**options)

    def _builtins(self) -> None:
        def local(**options: Any) -> Engine:
            from nbcast.executor.engines.local import LocalEngine

            return LocalEngine(**options)

        def ray(**options: Any) -> Engine:
            from nbcast.executor.engines.ray import RayEngine

            return RayEngine(**options)

        self._factories.setdefault("local", local)
        self._factories.setdefault("ray", ray)


engines = EngineRegistry()
"""The process-wide engine registry."""
