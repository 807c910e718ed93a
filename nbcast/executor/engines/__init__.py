"""Execution engines: where an attempt's notebook runs.

Registered by name in :data:`engines` (``local``, ``ray``); third parties add theirs
through the entry point group ``nbcast.engines``. That registry is the one list of
engine names: ``nbcast worker --engine`` accepts any name it knows
(:func:`check_engine_name`) and makes the engine with :func:`open_engine`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from nbcast.errors import ConfigError
from nbcast.executor.engines.base import Engine, engines
from nbcast.limits import clip

if TYPE_CHECKING:
    from nbcast.db import Database

__all__ = ["Engine", "check_engine_name", "engines", "open_engine"]


def check_engine_name(name: str) -> str:
    """``name`` if an engine is registered under it, else a one-line
    :class:`~nbcast.errors.ConfigError` listing the names that are."""
    known = engines.names()
    if name not in known:
        raise ConfigError(f"unknown engine {clip(name)} (known: {', '.join(known) or 'none'})")
    return name


def open_engine(
    db: Database,
    name: str,
    *,
    capacity: int,
    warm_kernels: bool = True,
    address: str | None = None,
) -> Engine:
    """The engine registered as ``name``, made for a worker
    (:meth:`Engine.for_worker <nbcast.executor.engines.base.Engine.for_worker>`, or the
    factory called with ``capacity`` when it is not an :class:`Engine` class)."""
    factory = engines.factory(check_engine_name(name))
    if isinstance(factory, type) and issubclass(factory, Engine):
        return factory.for_worker(db, capacity=capacity, warm_kernels=warm_kernels, address=address)
    return engines.create(name, capacity=capacity)
