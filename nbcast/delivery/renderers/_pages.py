"""Page geometry for the PDF renderer: the configured page, its turned twin, text widths.

A page size is what CSS ``@page { size }`` accepts, in the subset
:class:`~nbcast.delivery.renderers.pdf.PdfRenderer` allows: a name (``A4``, ``letter``,
…) with an optional ``portrait`` or ``landscape``, or two lengths in ``mm``, ``cm`` or
``in`` (width, then height). Its **turned twin** is the same sheet on its side — the
landscape page a wide table is moved to — and exists only when the configured page is
taller than it is wide. The **text width** is the page's width less the left and right
margins of the report's stylesheet (:data:`._styles.PAGE_MARGINS_MM`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from nbcast.delivery.renderers._styles import PAGE_MARGINS_MM
from nbcast.errors import RenderError

__all__ = ["PT_PER_MM", "PageGeometry", "page_geometry"]

PT_PER_MM = 72 / 25.4

# Portrait width and height in millimetres (CSS Paged Media's names, the common ones).
_NAMED_MM: dict[str, tuple[float, float]] = {
    "a3": (297, 420),
    "a4": (210, 297),
    "a5": (148, 210),
    "a6": (105, 148),
    "b4": (250, 353),
    "b5": (176, 250),
    "letter": (215.9, 279.4),
    "legal": (215.9, 355.6),
    "ledger": (279.4, 431.8),
}
_UNIT_MM = {"mm": 1.0, "cm": 10.0, "in": 25.4}
_NAMED = re.compile(r"([a-z0-9]+)(?: (portrait|landscape))?")
_LENGTHS = re.compile(r"(\d+(?:\.\d+)?)(mm|cm|in) (\d+(?:\.\d+)?)(mm|cm|in)")
# Lengths beyond these are a typo, not a page: 2 m is larger than A0's long side.
_MIN_MM, _MAX_MM = 50.0, 2000.0


@dataclass(frozen=True)
class PageGeometry:
    """One configured page size and what the table fitting needs to know about it."""

    size_css: str
    """The configured size as CSS ``size`` says it: ``A4``, ``letter landscape``, …"""
    turned_css: str | None
    """The same sheet turned on its side (``A4 landscape``), or None when the
    configured page is already at least as wide as it is tall."""
    width_mm: float
    """The configured page's width."""
    height_mm: float
    """The configured page's height."""

    @property
    def text_width_pt(self) -> float:
        """The width between the left and right margins of the configured page."""
        return _text_width_pt(self.width_mm)

    @property
    def turned_text_width_pt(self) -> float | None:
        """The width between the margins of the turned page; None without one."""
        return None if self.turned_css is None else _text_width_pt(self.height_mm)


def _text_width_pt(width_mm: float) -> float:
    _top, right, _bottom, left = PAGE_MARGINS_MM
    return (width_mm - right - left) * PT_PER_MM


def page_geometry(page_size: str) -> PageGeometry:
    """Parse ``page_size`` (module docstring); a size it does not know is a RenderError."""
    text = " ".join(page_size.split()).lower()
    named = _NAMED.fullmatch(text)
    if named is not None:
        name, orientation = named.group(1), named.group(2)
        if name in ("auto", "portrait", "landscape") and orientation is None:
            orientation, name = (name if name != "auto" else None), "a4"
        if name in _NAMED_MM:
            width, height = _NAMED_MM[name]
            css = name if orientation is None else f"{name} {orientation}"
            if orientation == "landscape":
                return PageGeometry(size_css=css, turned_css=None, width_mm=height, height_mm=width)
            return PageGeometry(
                size_css=css, turned_css=f"{name} landscape", width_mm=width, height_mm=height
            )
    lengths = _LENGTHS.fullmatch(text)
    if lengths is not None:
        width = float(lengths.group(1)) * _UNIT_MM[lengths.group(2)]
        height = float(lengths.group(3)) * _UNIT_MM[lengths.group(4)]
        if min(width, height) >= _MIN_MM and max(width, height) <= _MAX_MM:
            first = f"{lengths.group(1)}{lengths.group(2)}"
            second = f"{lengths.group(3)}{lengths.group(4)}"
            turned = f"{second} {first}" if height > width else None
            return PageGeometry(
                size_css=f"{first} {second}", turned_css=turned, width_mm=width, height_mm=height
            )
    names = ", ".join(name.upper() if len(name) == 2 else name for name in _NAMED_MM)
    raise RenderError(
        f"pdf: unsupported page size {page_size[:80]!r}: use one of {names}, optionally "
        f"followed by 'portrait' or 'landscape', or a width and a height such as "
        f"'210mm 297mm' (each between {_MIN_MM:.0f} and {_MAX_MM:.0f} mm)"
    )
