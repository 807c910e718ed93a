"""Execution engines: where an attempt's notebook runs.

Registered by name (``local``, ``ray``); third parties add theirs through the entry
point group ``nbcast.engines``.
"""

from __future__ import annotations

from nbcast.executor.engines.base import Engine, engines

__all__ = ["Engine", "engines"]
