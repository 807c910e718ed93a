"""The renderer boundary: an executed notebook in, one file's bytes out.

A renderer is **deterministic**: the same executed notebook and the same
:class:`~nbcast.delivery.report.ReportInfo` give byte-identical output, in any
process, on any day. Every timestamp it writes comes from ``report.fire_at``
(``SOURCE_DATE_EPOCH``), never from the clock; ids are derived from content, never
random. The delivery plane relies on this: renditions are stored content-addressed,
so an unchanged report is stored once and ``only_if: changed`` compares hashes.

A renderer must not execute or fetch anything the notebook names: outputs are data,
not instructions (no scripts run, no URLs followed, no local files read).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any, ClassVar

from nbcast.delivery.report import ReportInfo

__all__ = ["Renderer"]


class Renderer(ABC):
    """Turns an executed notebook into one format (module docstring)."""

    name: ClassVar[str]
    """Registry name and the format's name in ``outputs``: ``html``, ``pdf``, …"""
    media_type: ClassVar[str]
    """The MIME type of what :meth:`render` returns."""
    extension: ClassVar[str]
    """The file suffix, without the dot."""

    @abstractmethod
    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """Render ``notebook`` (an executed ``nbformat.NotebookNode``) for ``report``.

        Raises :class:`~nbcast.errors.RenderError` when the notebook cannot be
        rendered to this format (for example, no table to put in a spreadsheet).
        """

    def filename(self, report: ReportInfo) -> str:
        """The attachment's file name: ``daily-sales_2026-10-30T0700.pdf``."""
        return f"{report.stem}.{self.extension}"

    def media_type_for(self, notebook: Any) -> str:
        """The media type of what :meth:`render` returns for ``notebook``; a renderer
        whose output kind depends on the content (CSV: one file, or a zip of several)
        overrides this and :meth:`filename_for`."""
        return self.media_type

    def filename_for(self, notebook: Any, report: ReportInfo) -> str:
        """The file name of what :meth:`render` returns for ``notebook``."""
        return self.filename(report)
