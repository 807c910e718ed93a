"""nbcast: scheduled, versioned, audited analytics reports from Jupyter notebooks.

Importing ``nbcast`` is cheap on purpose (it runs inside every kernel and Ray
worker): subpackages are imported when first used.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = ["NbcastError", "RunContext", "__version__", "context"]

__version__ = "0.1.0"

from nbcast.errors import NbcastError

if TYPE_CHECKING:
    from nbcast.run_context import RunContext


def context() -> RunContext:
    """The run this notebook executes for: slot, nominal time, data interval
    (:mod:`nbcast.run_context`). Outside nbcast: an ``interactive`` context for now."""
    from nbcast.run_context import context as current

    return current()


def __getattr__(name: str) -> Any:
    if name == "RunContext":
        from nbcast.run_context import RunContext

        return RunContext
    raise AttributeError(f"module 'nbcast' has no attribute {name!r}")
