"""Renderers by name: ``html``, ``pdf``, ``xlsx``, ``csv``; third parties add theirs
through the entry point group ``nbcast.renderers`` (see :mod:`nbcast.registry`)."""

from __future__ import annotations

from nbcast.delivery.renderers.base import Renderer
from nbcast.plugins import renderers

__all__ = ["Renderer", "renderers"]
