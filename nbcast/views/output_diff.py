"""Two executed reports compared as a reader compares them (``nbcast runs diff``).

A plain ``nbdiff`` of two executed runs is mostly noise: execution counts, timings,
cell ids, the injected parameters, the HTML of every table. :func:`compare_outputs`
reads what a recipient sees instead, in three kinds:

- **Tables** recorded with :func:`nbcast.output.table`, matched by name, rows by their
  key columns, cell by cell — numbers with their delta and relative change
  (:mod:`nbcast.views.table_diff`).
- **Text**: each cell's markdown, and the text its outputs show (streams, plain text
  or markdown results, errors; an HTML-only output as its text), cells matched by id
  (papermill keeps them; by position when a notebook has none), compared as unified
  lines. Table outputs are left to the table comparison; the injected-parameters cell
  is left out (the parameters are the runs' own, shown by ``runs show``).
- **Images** (PNG, JPEG, GIF, SVG) by cell and position, compared by their bytes'
  SHA-256: unchanged or changed, with both kept for showing side by side.

Everything volatile is ignored by construction: only the values above are read.

**Bounds.** A notebook is hostile input and two may be large: the tables' bounds are
:mod:`nbcast.views.table_diff`'s; at most :data:`MAX_TEXT_LINES` diff lines per cell,
:data:`MAX_TEXT_CHARS` characters of text per cell compared, :data:`MAX_TEXTS` changed
cells listed, texts of more than :data:`MAX_DIFFED_LINES` lines or past
:data:`MAX_DIFFED_CHARS` characters in all said to have changed without a line diff, at
most :data:`MAX_IMAGES` images. A notebook of any shape is compared as far as it goes —
never an exception. What is shown is JSON any client parses (:func:`json_safe`:
no lone surrogate, no ``NaN``).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import math
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from nbcast.output.tables import TABLE_MIME_TYPE
from nbcast.records import internal
from nbcast.views.table_diff import (
    MAX_CHANGES,
    MAX_ROWS_LISTED,
    Budget,
    CellChange,
    TableDiff,
    compare_tables,
    number_text,
    table_lines,
)

__all__ = [
    "IMAGE_TYPES",
    "MAX_CHANGES",
    "MAX_IMAGES",
    "MAX_ROWS_LISTED",
    "MAX_TEXT_CHARS",
    "MAX_TEXT_LINES",
    "CellChange",
    "ImageDiff",
    "OutputDiff",
    "TableDiff",
    "TextDiff",
    "compare_outputs",
    "json_safe",
    "number_text",
    "safe_text",
]

MAX_TEXT_LINES = 400
"""Unified diff lines per cell."""
MAX_TEXT_CHARS = 200_000
"""Characters of one cell's text compared (the rest is cut, with a note)."""
MAX_IMAGES = 100
"""Images compared in all."""
MAX_TEXTS = 200
"""Cells whose text differs listed at most (``more_texts`` counts the rest)."""
MAX_DIFFED_LINES = 5_000
"""Lines of one cell's text given to the line diff (a longer text is "changed", whole)."""
MAX_DIFFED_CHARS = 2_000_000
"""Characters of text diffed line by line in all, in one comparison."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
_TAGS = re.compile(r"<[^<>]*>")  # linear: never rescans from each "<" of "<<<<…"


@dataclass(frozen=True, kw_only=True)
class TextDiff:
    """One cell whose text differs."""

    cell: str
    """Which cell: ``cell 7 (markdown)``."""
    status: str
    """``added``, ``removed`` or ``changed``."""
    lines: list[str]
    """Unified diff lines (``-`` before, ``+`` after, `` `` context; ``@@`` hunks)."""

    def to_json(self) -> dict[str, Any]:
        return {"cell": self.cell, "status": self.status, "lines": self.lines}


@dataclass(frozen=True, kw_only=True)
class ImageDiff:
    """One image output in both runs."""

    cell: str
    index: int
    """Its position among the cell's images (0 first)."""
    media_type: str
    status: str
    """``added``, ``removed``, ``changed`` or ``unchanged``."""
    before_sha256: str | None
    after_sha256: str | None
    before: str | None = internal(default=None)
    """The image before, base64 (SVG: its text), for showing side by side."""
    after: str | None = internal(default=None)

    def to_json(self) -> dict[str, Any]:
        return {
            "cell": self.cell,
            "index": self.index,
            "media_type": self.media_type,
            "status": self.status,
            "before_sha256": self.before_sha256,
            "after_sha256": self.after_sha256,
        }


@dataclass(frozen=True, kw_only=True)
class OutputDiff:
    """Two executed reports compared (module docstring)."""

    tables: list[TableDiff]
    texts: list[TextDiff]
    images: list[ImageDiff]
    more_images: int = 0
    """Images left out past :data:`MAX_IMAGES`."""
    more_texts: int = 0
    """Cells whose text differs left out past :data:`MAX_TEXTS`."""

    @property
    def same(self) -> bool:
        """Whether a reader would see no difference."""
        return (
            all(t.status == "unchanged" for t in self.tables)
            and not self.texts
            and not self.more_texts
            and all(i.status == "unchanged" for i in self.images)
        )

    def to_json(self) -> dict[str, Any]:
        return dict(
            json_safe(
                {
                    "same": self.same,
                    "tables": [t.to_json() for t in self.tables],
                    "texts": [t.to_json() for t in self.texts],
                    "images": [i.to_json() for i in self.images],
                    "more_images": self.more_images,
                    "more_texts": self.more_texts,
                }
            )
        )

    def lines(self) -> list[str]:
        """The comparison as text (``nbcast runs diff``)."""
        out: list[str] = []
        for table in self.tables:
            out += table_lines(table)
        for text in self.texts:
            out.append(f"{text.cell}: text {text.status}")
            out += [f"  {line}" for line in text.lines]
        for image in self.images:
            if image.status != "unchanged":
                out.append(
                    f"{image.cell}: image {image.index + 1} ({image.media_type}) {image.status}"
                )
        if self.more_texts:
            out.append(f"… {self.more_texts} more cells whose text changed")
        if self.more_images:
            out.append(f"… {self.more_images} more images not compared")
        if self.same:
            out.insert(0, "the two reports show the same tables, text and images")
        return [safe_text(line) for line in out]


def compare_outputs(before: Mapping[str, Any], after: Mapping[str, Any]) -> OutputDiff:
    """Compare two executed notebooks (as plain JSON) the way the module docstring says."""
    images, more = _images(before, after)
    texts, more_texts = _texts(before, after)
    return OutputDiff(
        tables=compare_tables(before, after),
        texts=texts,
        images=images,
        more_images=more,
        more_texts=more_texts,
    )


def safe_text(text: str) -> str:
    """``text`` without lone surrogates (a notebook's JSON may hold ``\\ud800``, which
    no UTF-8 answer can carry)."""
    return text.encode("utf-8", "replace").decode("utf-8")


def json_safe(value: Any) -> Any:
    """``value`` as JSON any client parses: strings without lone surrogates, numbers
    that are not finite as text (``NaN`` is not JSON)."""
    if isinstance(value, str):
        return safe_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {safe_text(str(k)): json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [json_safe(v) for v in value]
    return value


# -- text -------------------------------------------------------------------------------


def _cells(notebook: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """The cells a reader sees, by id (else position), with a label."""
    cells = notebook.get("cells")
    out: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for index, cell in enumerate(cells if isinstance(cells, list) else ()):
        if not isinstance(cell, Mapping):
            continue
        metadata = cell.get("metadata")
        tags = metadata.get("tags") if isinstance(metadata, Mapping) else None
        if isinstance(tags, list | tuple) and "injected-parameters" in tags:
            continue
        key = str(cell.get("id") or f"#{index}")
        out[key] = (f"cell {index + 1} ({cell.get('cell_type', '?')})", cell)
    return out


def _outputs(cell: Mapping[str, Any]) -> list[Any]:
    outputs = cell.get("outputs")
    return outputs if isinstance(outputs, list) else []


def _joined(value: Any) -> str:
    return "".join(str(v) for v in value) if isinstance(value, list) else str(value or "")


def _cell_text(cell: Mapping[str, Any]) -> str:
    """What a reader reads in a cell: markdown's source, or a code cell's text outputs."""
    if cell.get("cell_type") == "markdown":
        return _joined(cell.get("source"))
    parts = []
    for output in _outputs(cell):
        if not isinstance(output, Mapping):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(_joined(output.get("text")))
        elif kind == "error":
            parts.append(f"{output.get('ename', 'Error')}: {output.get('evalue', '')}\n")
        elif kind in ("display_data", "execute_result"):
            data = output.get("data")
            if not isinstance(data, Mapping) or TABLE_MIME_TYPE in data:
                continue  # a recorded table: compared as a table
            if any(t in data for t in IMAGE_TYPES) and "text/markdown" not in data:
                continue  # an image: compared as an image (its text/plain is a repr)
            for mime in ("text/markdown", "text/plain", "text/html"):
                if mime in data:
                    text = _joined(data[mime])[:MAX_TEXT_CHARS]
                    if mime == "text/html":
                        text = html.unescape(_TAGS.sub(" ", text))
                        text = re.sub(r"[ \t]+", " ", text)
                    parts.append(text if text.endswith("\n") else text + "\n")
                    break
    return "".join(parts)


def _texts(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[TextDiff], int]:
    """The cells whose text differs (at most :data:`MAX_TEXTS`), and how many more."""
    old, new = _cells(before), _cells(after)
    changed: list[tuple[str, str, str, str]] = []  # label, status, before, after
    for key, (label, cell) in new.items():
        text = _cell_text(cell)[:MAX_TEXT_CHARS]
        if key not in old:
            if text:
                changed.append((label, "added", "", text))
            continue
        previous = _cell_text(old[key][1])[:MAX_TEXT_CHARS]
        if previous != text:
            changed.append((label, "changed", previous, text))
    for key, (label, cell) in old.items():
        if key not in new and (text := _cell_text(cell)[:MAX_TEXT_CHARS]):
            changed.append((label, "removed", text, ""))
    budget = Budget(MAX_DIFFED_CHARS)
    out = [
        TextDiff(cell=label, status=status, lines=_diff(a, b, budget))
        for label, status, a, b in changed[:MAX_TEXTS]
    ]
    return out, max(0, len(changed) - MAX_TEXTS)


def _diff(a: str, b: str, budget: Budget) -> list[str]:
    old, new = a.splitlines(), b.splitlines()
    if max(len(old), len(new)) > MAX_DIFFED_LINES or not budget.spend(len(a) + len(b)):
        return [f"(changed: {len(old):,} → {len(new):,} lines, too large to compare line by line)"]
    lines = list(difflib.unified_diff(old, new, lineterm="", n=1))[2:]
    if len(lines) > MAX_TEXT_LINES:
        cut = len(lines) - MAX_TEXT_LINES
        lines = [*lines[:MAX_TEXT_LINES], f"… {cut} more lines"]
    return lines


# -- images -----------------------------------------------------------------------------


def _image_outputs(notebook: Mapping[str, Any]) -> Iterator[tuple[str, str, int, str, str]]:
    """(cell key, label, index, media type, data) for each image, in notebook order."""
    for key, (label, cell) in _cells(notebook).items():
        index = 0
        for output in _outputs(cell):
            data = output.get("data") if isinstance(output, Mapping) else None
            if not isinstance(data, Mapping):
                continue
            for mime in IMAGE_TYPES:
                if mime in data:
                    yield key, label, index, mime, _joined(data[mime]).strip()
                    index += 1
                    break


def _digest(mime: str, data: str) -> str:
    raw = _bytes(data) if mime == "image/svg+xml" else _decoded(data)
    return hashlib.sha256(raw).hexdigest()


def _bytes(text: str) -> bytes:
    return text.encode("utf-8", "surrogatepass")


def _decoded(data: str) -> bytes:
    try:
        return base64.b64decode(data, validate=False)
    except (ValueError, TypeError):
        return _bytes(data)


def _images(before: Mapping[str, Any], after: Mapping[str, Any]) -> tuple[list[ImageDiff], int]:
    old = {(k, i): (label, mime, data) for k, label, i, mime, data in _image_outputs(before)}
    new = {(k, i): (label, mime, data) for k, label, i, mime, data in _image_outputs(after)}
    out: list[ImageDiff] = []
    more = 0
    for place in [*new, *(p for p in old if p not in new)]:
        if len(out) >= MAX_IMAGES:
            more += 1
            continue
        a, b = old.get(place), new.get(place)
        label, mime = (b or a)[0], (b or a)[1]  # type: ignore[index]
        da = _digest(a[1], a[2]) if a else None
        db = _digest(b[1], b[2]) if b else None
        status = (
            "added"
            if a is None
            else "removed"
            if b is None
            else "unchanged"
            if da == db
            else "changed"
        )
        out.append(
            ImageDiff(
                cell=label,
                index=place[1],
                media_type=mime,
                status=status,
                before_sha256=da,
                after_sha256=db,
                before=a[2] if a else None,
                after=b[2] if b else None,
            )
        )
    return out, more
