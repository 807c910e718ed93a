"""Plug-ins by name: built-ins plus an entry point group, loaded lazily.

Renderers (``nbcast.renderers``) and channels (``nbcast.channels``) are found the same
way: a name maps to a factory; the built-ins are ``"module:attribute"`` strings
imported on first use (so ``import nbcast`` stays cheap), and a third-party package
adds its own with an entry point in the group, e.g. in its ``pyproject.toml``::

    [project.entry-points."nbcast.renderers"]
    pptx = "nbcast_pptx:PptxRenderer"

A registered name wins over an entry point of the same name; an unknown name is a
:class:`~nbcast.errors.ConfigError` that lists the known ones.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from typing import Generic, TypeVar

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
        self._loaded_entry_points = False

    def register(self, name: str, factory: Callable[..., T]) -> None:
        """Make ``factory`` available as ``name`` (replacing any earlier one)."""
        self._factories[name] = factory

    def names(self) -> list[str]:
        """Every name known: registered, built in and from entry points."""
        self._load_entry_points()
        return sorted(set(self._factories) | set(self._builtins))

    def factory(self, name: str) -> Callable[..., T]:
        """The factory registered as ``name``."""
        if name in self._factories:
            return self._factories[name]
        if name in self._builtins:
            module, _, attribute = self._builtins[name].partition(":")
            factory: Callable[..., T] = getattr(importlib.import_module(module), attribute)
            self._factories[name] = factory
            return factory
        self._load_entry_points()
        if name in self._factories:
            return self._factories[name]
        known = ", ".join(self.names()) or "none"
        raise ConfigError(f"unknown {self.kind} {name!r} (known: {known})")

    def create(self, name: str, /, **options: object) -> T:
        """A new ``T`` made by the factory ``name`` with ``options``."""
        return self.factory(name)(**options)

    def _load_entry_points(self) -> None:
        if self._loaded_entry_points:
            return
        from importlib.metadata import entry_points

        for point in entry_points(group=self.group):
            self._factories.setdefault(point.name, point.load())
        self._loaded_entry_points = True
