"""Plug-ins by name: built-ins plus an entry point group, loaded lazily.

Renderers (``nbcast.renderers``), channels (``nbcast.channels``) and engines
(``nbcast.engines``) are found the same way: a name maps to a factory; the built-ins
are ``"module:attribute"`` strings imported on first use (so ``import nbcast`` stays
cheap), and a third-party package adds its own with an entry point in the group,
as nbcast's own test plug-in does in its ``pyproject.toml`` (``tests/plugin``)::

    [project.entry-points."nbcast.renderers"]
    md = "nbcast_testplugin.markdown:MarkdownRenderer"

    [project.entry-points."nbcast.channels"]
    teams = "nbcast_testplugin.teams:TeamsChannel"

An entry point names the class itself: a :class:`~nbcast.delivery.renderers.base.Renderer`
or :class:`~nbcast.delivery.channels.base.Channel` subclass (a channel's class methods
configure it and judge its recipients).

The registry is the single source of names: a definition's ``outputs`` may name any
renderer it knows and a subscription's ``channel`` any channel it knows
(:mod:`nbcast.definitions.spec`). Listing the names reads the installed
distributions' metadata but imports nothing; an entry point is imported the first
time its name is used.

A registered name wins over a built-in or an entry point of the same name, and a
built-in over an entry point; an unknown name is a
:class:`~nbcast.errors.ConfigError` that lists the known ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Any, Generic, TypeVar

from nbcast.errors import ConfigError

__all__ = ["Registry"]

T = TypeVar("T")


class Registry(Generic[T]):
    """Factories of ``T`` by name (module docstring)."""

    def __init__(self, kind: str, group: str, builtins: dict[str, str]) -> None:
        self.kind = kind
        self.group = group
        self._builtins = dict(builtins)
        self._factories: dict[str, Callable[..., T]] = {}
        self._entry_points: dict[str, Any] | None = None

    def register(self, name: str, factory: Callable[..., T]) -> None:
        """Make ``factory`` available as ``name`` (replacing any earlier one)."""
        self._factories[name] = factory

    def names(self) -> list[str]:
        """Every name known: the built-ins in their documented order, then the
        registered ones and those of entry points, sorted. Imports nothing."""
        builtins = list(self._builtins)
        others = (set(self._factories) | set(self._points())) - set(builtins)
        return builtins + sorted(others)

    def factory(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``."""
        if name in self._factories:
            return self._factories[name]
        if name in self._builtins:
            module, _, attribute = self._builtins[name].partition(":")
            factory: Callable[..., T] = getattr(importlib.import_module(module), attribute)
        elif name in self._points():
            factory = self._points()[name].load()
        else:
            known = ", ".join(self.names()) or "none"
            raise ConfigError(f"unknown {self.kind} {name!r} (known: {known})")
        self._factories[name] = factory
        return factory

    def create(self, name: str, /, **options: object) -> T:
        """A new ``T`` made by the factory ``name`` with ``options``."""
        return self.factory(name)(**options)

    def _points(self) -> dict[str, Any]:
        """The group's entry points by name (read once, not loaded)."""
        if self._entry_points is None:
            from importlib.metadata import entry_points

            found: dict[str, Any] = {}
            for point in entry_points(group=self.group):
                found.setdefault(point.name, point)
            self._entry_points = found
        return self._entry_points
