"""Checking a PDF for text set outside its pages: what a clipped table leaves behind.

A table wider than the page is not cut by the PDF writer: its cells are drawn where
the layout put them, past the page's edge, where no viewer or printer shows them.
:func:`text_outside_page` finds such text with pypdf, for any test that renders a
report (``from tests.delivery.pdfcheck import text_outside_page``)::

    assert text_outside_page(pdf_bytes) == []

How: pypdf's ``extract_text`` walks each page's content stream keeping the current
transformation matrix (``cm``) and the text matrix (``tm``); a visitor called before
every operator sees each text-showing operator (``Tj``, ``TJ``, ``'``, ``"``) with
both. A run starts at the origin of ``tm`` mapped through ``cm``, and ends its
advance further along: the glyphs' widths from the font's ``/W`` (composite fonts,
as WeasyPrint writes them) or ``/Widths`` (simple fonts), times the font size, plus
the character spacing, less the ``TJ`` adjustments, times the horizontal scaling.
Both ends and the baseline must lie within the page's media box. Each run's text is
decoded with the font's ``/ToUnicode`` map, so :func:`visible_text` can say what a
reader of the printed page sees — pypdf's plain ``extract_text`` also returns text
drawn past the edge, where nobody can read it.

Why not ``visitor_text``: pypdf reports a whole line of text once, at the position
where the line starts, so a line whose later cells are past the edge looks fine from
its start (the KPI dashboard's clipped weekly table did).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from pypdf import PdfReader
from pypdf.generic import ArrayObject, NameObject

__all__ = ["OutsideText", "TextRun", "text_outside_page", "text_runs", "visible_text"]

_SHOW = {b"Tj", b"TJ", b"'", b'"'}
_DEFAULT_WIDTH = 1000.0  # /DW's own default, and a safe guess for a font without widths
_BFCHAR = re.compile(r"beginbfchar(.*?)endbfchar", re.DOTALL)
_BFRANGE = re.compile(r"beginbfrange(.*?)endbfrange", re.DOTALL)
_HEX = re.compile(r"<([0-9A-Fa-f]*)>")
_RANGE = re.compile(r"<([0-9A-Fa-f]+)>\s*<([0-9A-Fa-f]+)>\s*(<[0-9A-Fa-f]*>|\[[^\]]*\])")


@dataclass(frozen=True)
class TextRun:
    """One text-showing operator, in PDF points from the page's lower-left corner."""

    page: int
    """1-based page number."""
    x: float
    y: float
    """Where the run starts (on its baseline)."""
    end_x: float
    end_y: float
    """Where the run ends: its start plus its advance."""
    text: str
    """What it shows, decoded with the font's ``/ToUnicode`` map."""


@dataclass(frozen=True)
class OutsideText:
    """A run that does not lie within its page's box."""

    run: TextRun
    page_box: tuple[float, float, float, float]
    """The media box: left, bottom, right, top."""

    def __str__(self) -> str:
        left, bottom, right, top = self.page_box
        return (
            f"page {self.run.page}: text from ({self.run.x:.1f}, {self.run.y:.1f}) to "
            f"({self.run.end_x:.1f}, {self.run.end_y:.1f}) is outside the page box "
            f"[{left:.0f}, {right:.0f}] x [{bottom:.0f}, {top:.0f}]: {self.run.text!r}"
        )


class _Font:
    """Glyph advances of one font, in thousandths of the font size."""

    def __init__(self, font: Any) -> None:
        font = font.get_object() if font is not None else {}
        self.two_byte = font.get("/Subtype") == "/Type0"
        self.unicode: dict[int, str] = {}
        if "/ToUnicode" in font:
            self._read_cmap(font["/ToUnicode"].get_object().get_data().decode("latin-1"))
        self.widths: dict[int, float] = {}
        self.default = _DEFAULT_WIDTH
        if self.two_byte:
            descendant = font["/DescendantFonts"][0].get_object()
            self.default = float(descendant.get("/DW", _DEFAULT_WIDTH))
            self._read_w(descendant.get("/W"))
        elif "/Widths" in font:
            first = int(font.get("/FirstChar", 0))
            for offset, width in enumerate(font["/Widths"].get_object()):
                self.widths[first + offset] = float(width)
            descriptor = font.get("/FontDescriptor")
            missing = descriptor.get_object().get("/MissingWidth") if descriptor else None
            self.default = float(missing) if missing is not None else 0.0

    def _read_w(self, array: Any) -> None:
        items = list(array.get_object()) if array is not None else []
        index = 0
        while index + 1 < len(items):
            first = int(items[index])
            following = items[index + 1].get_object()
            if isinstance(following, ArrayObject):
                for offset, width in enumerate(following):
                    self.widths[first + offset] = float(width)
                index += 2
            elif index + 2 < len(items):
                for code in range(first, int(following) + 1):
                    self.widths[code] = float(items[index + 2])
                index += 3
            else:
                break

    def _read_cmap(self, cmap: str) -> None:
        for block in _BFCHAR.findall(cmap):
            pairs = _HEX.findall(block)
            for source, target in zip(pairs[::2], pairs[1::2], strict=False):
                self.unicode[int(source, 16)] = _utf16(target)
        for block in _BFRANGE.findall(cmap):
            for low, high, target in _RANGE.findall(block):
                first, last = int(low, 16), int(high, 16)
                if target.startswith("["):
                    for code, each in zip(
                        range(first, last + 1), _HEX.findall(target), strict=False
                    ):
                        self.unicode[code] = _utf16(each)
                    continue
                start = _utf16(target[1:-1])
                for offset in range(min(last - first, 0xFFFF) + 1):
                    self.unicode[first + offset] = start[:-1] + chr(ord(start[-1]) + offset)

    def decode(self, data: bytes) -> str:
        """The text a shown string stands for."""
        return "".join(
            self.unicode.get(code, chr(code) if not self.two_byte else "\ufffd")
            for code in self.codes(data)
        )

    def codes(self, data: bytes) -> Iterator[int]:
        """The character codes in a shown string."""
        if self.two_byte:
            for index in range(0, len(data) - 1, 2):
                yield data[index] << 8 | data[index + 1]
        else:
            yield from data

    def advance(self, data: bytes, size: float, char_spacing: float, scale: float) -> float:
        """The horizontal advance of ``data`` in text space units."""
        total = 0.0
        for code in self.codes(data):
            total += self.widths.get(code, self.default) / 1000 * size + char_spacing
        return total * scale


def _utf16(hex_text: str) -> str:
    return bytes.fromhex(hex_text).decode("utf-16-be", "replace") or "\ufffd"


def _bytes(value: Any) -> bytes:
    if isinstance(value, bytes):
        return value
    original = getattr(value, "get_original_bytes", None)
    if callable(original):
        return bytes(original())
    return str(value).encode("latin-1", "replace")


def _apply(matrix: list[float], x: float, y: float) -> tuple[float, float]:
    a, b, c, d, e, f = matrix
    return a * x + c * y + e, b * x + d * y + f


class _PageWalker:
    """Follows one page's text state and collects its runs and its lines."""

    def __init__(self, number: int, page: Any) -> None:
        self.number = number
        resources = page.get("/Resources")
        resources = resources.get_object() if resources is not None else {}
        fonts = resources.get("/Font")
        self.font_resources = fonts.get_object() if fonts is not None else {}
        self.fonts: dict[str, _Font] = {}
        self.state: list[tuple[str | None, float, float, float]] = []
        self.font: str | None = None
        self.size = 0.0
        self.char_spacing = 0.0
        self.scale = 1.0
        self.runs: list[TextRun] = []

    def _font(self) -> _Font:
        name = self.font or ""
        if name not in self.fonts:
            self.fonts[name] = _Font(self.font_resources.get(name))
        return self.fonts[name]

    def before(self, operator: bytes, operands: Any, cm: Any, tm: Any) -> None:
        if operator == b"q":
            self.state.append((self.font, self.size, self.char_spacing, self.scale))
        elif operator == b"Q" and self.state:
            self.font, self.size, self.char_spacing, self.scale = self.state.pop()
        elif operator == b"Tf" and len(operands) >= 2:
            self.font = str(operands[0]) if isinstance(operands[0], NameObject) else None
            self.size = float(operands[1])
        elif operator == b"Tc" and operands:
            self.char_spacing = float(operands[0])
        elif operator == b"Tz" and operands:
            self.scale = float(operands[0]) / 100
        elif operator in _SHOW:
            self._show(operator, operands, list(map(float, cm)), list(map(float, tm)))

    def _show(self, operator: bytes, operands: Any, cm: list[float], tm: list[float]) -> None:
        font = self._font()
        advance = 0.0
        shown = []
        if operator == b"TJ" and operands and isinstance(operands[0], ArrayObject):
            items = list(operands[0])
        else:
            items = [operands[-1]] if operands else []
        for item in items:
            if isinstance(item, (int, float)) or hasattr(item, "as_numeric"):
                advance -= float(item) / 1000 * self.size * self.scale
            else:
                data = _bytes(item)
                advance += font.advance(data, self.size, self.char_spacing, self.scale)
                shown.append(font.decode(data))
        start = _apply(cm, *_apply(tm, 0.0, 0.0))
        end = _apply(cm, *_apply(tm, advance, 0.0))
        self.runs.append(
            TextRun(
                page=self.number,
                x=start[0],
                y=start[1],
                end_x=end[0],
                end_y=end[1],
                text="".join(shown),
            )
        )


def _walk(pdf: bytes) -> Iterator[tuple[_PageWalker, tuple[float, float, float, float]]]:
    reader = PdfReader(io.BytesIO(pdf))
    for number, page in enumerate(reader.pages, start=1):
        walker = _PageWalker(number, page)
        page.extract_text(visitor_operand_before=walker.before)
        box = page.mediabox
        yield walker, (float(box.left), float(box.bottom), float(box.right), float(box.top))


def text_runs(pdf: bytes) -> list[TextRun]:
    """Every text run of every page of ``pdf``, in content-stream order."""
    return [run for walker, _box in _walk(pdf) for run in walker.runs]


def _inside(run: TextRun, box: tuple[float, float, float, float], tolerance: float) -> bool:
    left, bottom, right, top = box
    return all(
        left - tolerance <= x <= right + tolerance and bottom - tolerance <= y <= top + tolerance
        for x, y in ((run.x, run.y), (run.end_x, run.end_y))
    )


def text_outside_page(pdf: bytes, *, tolerance: float = 0.5) -> list[OutsideText]:
    """The runs of ``pdf`` that start or end outside their page's media box.

    ``tolerance`` (points) forgives rounding at the edges. An empty list means every
    character of the document is on its page.
    """
    return [
        OutsideText(run=run, page_box=box)
        for walker, box in _walk(pdf)
        for run in walker.runs
        if not _inside(run, box, tolerance)
    ]


def visible_text(pdf: bytes, *, tolerance: float = 0.5) -> list[str]:
    """Per page, the text of the runs that lie within the page, joined by spaces:
    what a reader of the printed page can read."""
    return [
        " ".join(run.text for run in walker.runs if _inside(run, box, tolerance))
        for walker, box in _walk(pdf)
    ]
