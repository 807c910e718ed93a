"""nbcast: scheduled, versioned, audited analytics reports from Jupyter notebooks.

The package is a one-way stack (``tests/test_architecture.py`` enforces it): the base
(this package's modules, :mod:`nbcast.sandbox`, and the kernel side —
:mod:`nbcast.warehouse`, :mod:`nbcast.output`); :mod:`nbcast.tenancy` (who may do
what, and the audit chain); the four planes in the data's order —
:mod:`nbcast.definitions` (definition) → :mod:`nbcast.scheduler` (slot, run) →
:mod:`nbcast.executor` (attempt, outbox) → :mod:`nbcast.delivery` (rendition,
delivery); :mod:`nbcast.oversight` (retention, SLA, cost, their service) and
:mod:`nbcast.views` (read models across planes) above them; the faces on top (the
CLI, :mod:`nbcast.cli`, and the server, :mod:`nbcast.server_extension`). Each layer
imports only those below it.

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
