"""A page of a PDF rendition as a small PNG: the README's and the status page's previews.

:func:`pdf_thumbnail` rasterises one page (the first by default) with PDFium, through
`pypdfium2 <https://pypi.org/project/pypdfium2/>`_, which the ``thumbnails`` extra
installs (``pip install 'nbcast[thumbnails]'``; the ``dev`` extra includes it). It is
imported only when a thumbnail is asked for, so the renderers work without it.

The PNG is exactly ``width`` pixels wide and ``round(width × page height / page
width)`` high, drawn on white; it carries no text chunks or timestamps, so the same PDF gives the
same bytes. PDFium only draws: nothing in the PDF is run, fetched or filled in (no
forms, no annotations' actions).
"""

from __future__ import annotations

import importlib
import io
from typing import Any

from nbcast.errors import RenderError

__all__ = ["MAX_WIDTH", "MIN_WIDTH", "pdf_thumbnail"]

MIN_WIDTH = 16
"""Narrower thumbnails are refused."""
MAX_WIDTH = 4000
"""Wider thumbnails are refused (about 480 dpi for A4: past a preview's needs)."""


def _pdfium() -> Any:
    try:
        return importlib.import_module("pypdfium2")  # untyped: it ships no stubs
    except ImportError as exc:
        raise RenderError(
            "thumbnails need pypdfium2, which the 'thumbnails' extra installs: "
            "pip install 'nbcast[thumbnails]'"
        ) from exc


def pdf_thumbnail(pdf: bytes, *, width: int = 600, page: int = 0) -> bytes:
    """Page ``page`` (0-based) of ``pdf`` as PNG bytes, ``width`` pixels wide.

    Raises RenderError when pypdfium2 is missing, the width is out of bounds
    (:data:`MIN_WIDTH`–:data:`MAX_WIDTH`), the PDF cannot be read or has no such page.
    """
    if not MIN_WIDTH <= width <= MAX_WIDTH:
        raise RenderError(f"thumbnail width must be {MIN_WIDTH} to {MAX_WIDTH} px, not {width}")
    pdfium = _pdfium()
    try:
        document = pdfium.PdfDocument(pdf)
    except Exception as exc:  # PdfiumError and friends: the bytes are not a PDF it reads
        raise RenderError(f"thumbnail: not a PDF PDFium can read: {exc}") from exc
    try:
        if not 0 <= page < len(document):
            raise RenderError(f"thumbnail: the PDF has {len(document)} pages, no page {page + 1}")
        sheet = document[page]
        try:
            points_wide, points_high = sheet.get_size()
            height = max(1, round(width * points_high / points_wide))
            bitmap = sheet.render(scale=width / points_wide, fill_color=(255, 255, 255, 255))
            image = bitmap.to_pil()
        finally:
            sheet.close()
    finally:
        document.close()
    if image.size != (width, height):
        # PDFium rounds the scaled size up: a pixel too many is cropped, anything
        # else (it has not happened) resampled, so the size is exactly as documented.
        if 0 <= image.width - width <= 1 and 0 <= image.height - height <= 1:
            image = image.crop((0, 0, width, height))
        else:
            from PIL import Image

            image = image.resize((width, height), Image.Resampling.LANCZOS)
    output = io.BytesIO()
    image.convert("RGB").save(output, format="PNG", optimize=True)
    return output.getvalue()
