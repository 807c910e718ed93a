"""Renderers by name: ``html``, ``pdf``, ``xlsx``, ``csv``; third parties add theirs
through the entry point group ``nbcast.renderers`` (see :mod:`nbcast.registry`)."""

from __future__ import annotations

from nbcast.delivery.renderers.base import Renderer
from nbcast.registry import Registry

__all__ = ["Renderer", "renderers"]

renderers: Registry[Renderer] = Registry(
    "renderer",
    "nbcast.renderers",
    {
        "html": "nbcast.delivery.renderers.html:HtmlRenderer",
        "pdf": "nbcast.delivery.renderers.pdf:PdfRenderer",
        "xlsx": "nbcast.delivery.renderers.xlsx:XlsxRenderer",
        "csv": "nbcast.delivery.renderers.csv:CsvRenderer",
    },
)
"""The process-wide renderer registry: ``renderers.create("pdf")``."""
