"""The extension's handlers, one module per area; each registers its routes with
:func:`nbcast.server_extension.routes.route` when imported (:func:`load_all`)."""

from __future__ import annotations

import importlib
import pkgutil

__all__ = ["load_all"]


def load_all() -> None:
    """Import every handler module of this package (registering its routes)."""
    for module in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if not module.name.startswith("_"):
            importlib.import_module(f"{__name__}.{module.name}")
