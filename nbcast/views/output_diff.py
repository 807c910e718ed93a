"""Two executed reports compared as a reader compares them (``nbcast runs diff``).

A plain ``nbdiff`` of two executed runs is mostly noise: execution counts, timings,
cell ids, the injected parameters, the HTML of every table. :func:`compare_outputs`
reads what a recipient sees instead, in three kinds:

- **Tables** recorded with :func:`nbcast.output.table`, matched by name (a table only
  in one run is added or removed). Rows are matched by a **key**: the columns that are
  not numbers (text, dates, booleans), in order, as few as make every row's key unique
  in both runs (``region``; ``sku`` beside a ``rank``) — else by position. Matched rows
  are compared cell by cell: a number with its delta and relative change (``revenue
  1,200 → 1,350 (+150, +12.5%)``), any other value as before → after; rows and columns
  only in one run are listed as added or removed.
- **Text**: each cell's markdown, and the text its outputs show (streams, plain text
  or markdown results, errors; an HTML-only output as its text), cells matched by id
  (papermill keeps them; by position when a notebook has none), compared as unified
  lines. Table outputs are left to the table comparison; the injected-parameters cell
  is left out (the parameters are the runs' own, shown by ``runs show``).
- **Images** (PNG, JPEG, GIF, SVG) by cell and position, compared by their bytes'
  SHA-256: unchanged or changed, with both kept for showing side by side.

Everything volatile is ignored by construction: only the values above are read.

**Bounds.** A notebook is hostile input and two may be large: at most
:data:`MAX_CHANGES` cell changes and :data:`MAX_ROWS_LISTED` added or removed rows are
listed per table (``more`` counts the rest), :data:`MAX_CELLS_COMPARED` table values
compared in all, :data:`MAX_TEXT_LINES` diff lines per cell, :data:`MAX_TEXT_CHARS`
characters of text per cell compared, :data:`MAX_TEXTS` changed cells listed, texts of
more than :data:`MAX_DIFFED_LINES` lines or past :data:`MAX_DIFFED_CHARS` characters
in all said to have changed without a line diff, at most :data:`MAX_IMAGES` images; a
value is shown in at most :data:`VALUE_CHARS` characters. A table whose payload is
malformed is reported as such, a notebook of any other shape compared as far as it
goes — never an exception. What is shown is JSON any client parses (:func:`json_safe`:
no lone surrogate, no ``NaN``).
"""

from __future__ import annotations

import base64
import difflib
import hashlib
import html
import json
import math
import re
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbcast.errors import RenderError
from nbcast.output.tables import TABLE_MIME_TYPE, table_payloads
from nbcast.records import internal

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

MAX_CHANGES = 500
"""Cell changes listed per table."""
MAX_ROWS_LISTED = 200
"""Added (or removed) rows listed per table."""
MAX_TEXT_LINES = 400
"""Unified diff lines per cell."""
MAX_TEXT_CHARS = 200_000
"""Characters of one cell's text compared (the rest is cut, with a note)."""
MAX_IMAGES = 100
"""Images compared in all."""
VALUE_CHARS = 120
"""A value longer than this is shown cut, with ``…``."""
MAX_KEY_COLUMNS = 4
"""Key columns tried at most (``region``, then ``region, day``, …)."""
MAX_CELLS_COMPARED = 2_000_000
"""Table values compared in all, in one comparison (the rest are counted as not
compared: ``more``)."""
MAX_TEXTS = 200
"""Cells whose text differs listed at most (``more_texts`` counts the rest)."""
MAX_DIFFED_LINES = 5_000
"""Lines of one cell's text given to the line diff (a longer text is "changed", whole)."""
MAX_DIFFED_CHARS = 2_000_000
"""Characters of text diffed line by line in all, in one comparison."""

IMAGE_TYPES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
_NUMERIC = {"integer", "number"}
_TAGS = re.compile(r"<[^<>]*>")  # linear: never rescans from each "<" of "<<<<…"


@dataclass(frozen=True, kw_only=True)
class CellChange:
    """One value of a matched row that differs."""

    row: str
    """The row's key, as text (``EMEA``; ``#3`` when rows are matched by position)."""
    column: str
    before: Any
    after: Any
    delta: float | None = None
    """For numbers: after − before."""
    percent: float | None = None
    """For numbers: the change relative to before, in percent (None from zero)."""

    def to_json(self) -> dict[str, Any]:
        return {
            "row": self.row,
            "column": self.column,
            "before": self.before,
            "after": self.after,
            "delta": self.delta,
            "percent": self.percent,
        }

    def text(self) -> str:
        """``revenue 1200 → 1350 (+150, +12.5%)``."""
        line = f"{self.column} {_shown(self.before)} → {_shown(self.after)}"
        if self.delta is not None:
            extra = number_text(self.delta, signed=True)
            if self.percent is not None:
                extra += f", {self.percent:+.1f}%"
            line += f" ({extra})"
        return line


@dataclass(frozen=True, kw_only=True)
class TableDiff:
    """One recorded table in both runs."""

    name: str
    status: str
    """``added``, ``removed``, ``changed``, ``unchanged`` or ``unreadable``."""
    key: list[str]
    """The columns rows are matched by ([]: by position)."""
    rows_before: int
    rows_after: int
    columns_added: list[str]
    columns_removed: list[str]
    rows_added: list[str]
    rows_removed: list[str]
    changes: list[CellChange]
    more: int = 0
    """Changes and rows left out past the bounds."""

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "status": self.status,
            "key": self.key,
            "rows_before": self.rows_before,
            "rows_after": self.rows_after,
            "columns_added": self.columns_added,
            "columns_removed": self.columns_removed,
            "rows_added": self.rows_added,
            "rows_removed": self.rows_removed,
            "changes": [c.to_json() for c in self.changes],
            "more": self.more,
        }


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
            out += _table_lines(table)
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


def _table_lines(table: TableDiff) -> list[str]:
    head = f"table {table.name}: {table.status}"
    if table.status in ("added", "removed", "unreadable"):
        return [head]
    if table.status == "unchanged":
        return [f"{head} ({table.rows_after} rows)"]
    by = f"rows by {', '.join(table.key)}" if table.key else "rows by position"
    out = [f"{head} ({table.rows_before} → {table.rows_after} rows, {by})"]
    out += [f"  column added: {c}" for c in table.columns_added]
    out += [f"  column removed: {c}" for c in table.columns_removed]
    out += [f"  row added: {r}" for r in table.rows_added]
    out += [f"  row removed: {r}" for r in table.rows_removed]
    out += [f"  {c.row}: {c.text()}" for c in table.changes]
    if table.more:
        out.append(f"  … and {table.more} more")
    return out


def compare_outputs(before: Mapping[str, Any], after: Mapping[str, Any]) -> OutputDiff:
    """Compare two executed notebooks (as plain JSON) the way the module docstring says."""
    images, more = _images(before, after)
    texts, more_texts = _texts(before, after)
    return OutputDiff(
        tables=_tables(before, after, _Budget(MAX_CELLS_COMPARED)),
        texts=texts,
        images=images,
        more_images=more,
        more_texts=more_texts,
    )


class _Budget:
    """Work left for one comparison."""

    def __init__(self, left: int) -> None:
        self.left = left

    def spend(self, amount: int = 1) -> bool:
        self.left -= amount
        return self.left >= 0


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


# -- tables -----------------------------------------------------------------------------


def _payloads(notebook: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    try:
        return table_payloads(notebook)
    except (RenderError, AttributeError, TypeError, KeyError):  # a malformed notebook
        return None


def _tables(
    before: Mapping[str, Any], after: Mapping[str, Any], budget: _Budget
) -> list[TableDiff]:
    old, new = _payloads(before), _payloads(after)
    if old is None or new is None:
        return [_bare("(recorded tables)", "unreadable", 0, 0)]
    out = []
    for name, payload in new.items():
        if name not in old:
            out.append(_bare(name, "added", 0, len(payload["data"])))
        else:
            out.append(_table(name, old[name], payload, budget))
    out += [_bare(name, "removed", len(p["data"]), 0) for name, p in old.items() if name not in new]
    return out


def _bare(name: str, status: str, before: int, after: int) -> TableDiff:
    return TableDiff(
        name=name,
        status=status,
        key=[],
        rows_before=before,
        rows_after=after,
        columns_added=[],
        columns_removed=[],
        rows_added=[],
        rows_removed=[],
        changes=[],
    )


def _fields(payload: Mapping[str, Any]) -> dict[str, str]:
    return {
        str(f.get("name")): str(f.get("type", "string"))
        for f in payload["schema"]["fields"]
        if isinstance(f, Mapping)
    }


def _rows(payload: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [r if isinstance(r, Mapping) else {} for r in payload["data"]]


def _table(name: str, a: Mapping[str, Any], b: Mapping[str, Any], budget: _Budget) -> TableDiff:
    fa, fb = _fields(a), _fields(b)
    ra, rb = _rows(a), _rows(b)
    common = [c for c in fb if c in fa]
    key = _key(common, fa, fb, ra, rb)
    ka = _keyed(ra, key)
    kb = _keyed(rb, key)
    added = [k for k in kb if k not in ka]
    removed = [k for k in ka if k not in kb]
    changes: list[CellChange] = []
    more = 0
    compared = [c for c in common if c not in key]
    wanted = set(compared)
    order = {c: i for i, c in enumerate(compared)}
    for k, row in kb.items():
        old = ka.get(k)
        if old is None:
            continue
        if len(row) + len(old) < len(compared):  # sparse rows: only the keys they hold
            keys = {str(c) for c in (*row.keys(), *old.keys())} & wanted
            present = sorted(keys, key=order.__getitem__)
        else:
            present = compared
        if not budget.spend(len(present)):
            more += len(present)
            continue
        for column in present:
            x, y = old.get(column), row.get(column)
            if _equal(x, y):
                continue
            if len(changes) >= MAX_CHANGES:
                more += 1
                continue
            changes.append(_change(k, column, x, y, fa[column] in _NUMERIC))
    more += max(0, len(added) - MAX_ROWS_LISTED) + max(0, len(removed) - MAX_ROWS_LISTED)
    columns_added = [c for c in fb if c not in fa]
    columns_removed = [c for c in fa if c not in fb]
    changed = bool(changes or added or removed or columns_added or columns_removed or more)
    return TableDiff(
        name=name,
        status="changed" if changed else "unchanged",
        key=list(key),
        rows_before=len(ra),
        rows_after=len(rb),
        columns_added=columns_added,
        columns_removed=columns_removed,
        rows_added=added[:MAX_ROWS_LISTED],
        rows_removed=removed[:MAX_ROWS_LISTED],
        changes=changes,
        more=more,
    )


def _key(
    common: Sequence[str],
    fa: Mapping[str, str],
    fb: Mapping[str, str],
    ra: Sequence[Mapping[str, Any]],
    rb: Sequence[Mapping[str, Any]],
) -> tuple[str, ...]:
    """The fewest of the common columns that are not numbers, taken in order, whose
    values key every row of both tables uniquely; () for none (rows then match by
    position)."""
    leading: list[str] = []
    for column in common:
        if fa.get(column) in _NUMERIC or fb.get(column) in _NUMERIC:
            continue
        leading.append(column)
        if len(leading) > MAX_KEY_COLUMNS:
            return ()
        if _unique(ra, leading) and _unique(rb, leading):
            return tuple(leading)
    return ()


def _unique(rows: Sequence[Mapping[str, Any]], columns: Sequence[str]) -> bool:
    seen = set()
    for row in rows:
        key = _row_key(row, columns)
        if key in seen:
            return False
        seen.add(key)
    return True


def _row_key(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    return ", ".join(
        _shown(row.get(c)) if not isinstance(row.get(c), str) else str(row.get(c)) for c in columns
    )


def _keyed(rows: Sequence[Mapping[str, Any]], key: Sequence[str]) -> dict[str, Mapping[str, Any]]:
    if not key:
        return {f"#{i + 1}": row for i, row in enumerate(rows)}
    return {_row_key(row, key): row for row in rows}


def _equal(x: Any, y: Any) -> bool:
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return bool(x == y and type(x) is type(y)) or (_is_number(x) and _is_number(y) and x == y)


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _change(row: str, column: str, x: Any, y: Any, numeric: bool) -> CellChange:
    delta: float | None = None
    percent: float | None = None
    if numeric and _is_number(x) and _is_number(y):
        try:
            exact = y - x  # ints exactly, however large
            delta = float(exact)
            percent = 100 * float(exact) / abs(float(x)) if x else None
        except (OverflowError, ZeroDivisionError):
            delta = percent = None
        if delta is not None and not math.isfinite(delta):
            delta = None
        if percent is not None and not math.isfinite(percent):
            percent = None
        delta = round(delta, 10) if delta is not None else None
        percent = round(percent, 4) if percent is not None else None
    return CellChange(row=row, column=column, before=x, after=y, delta=delta, percent=percent)


def number_text(value: float, *, signed: bool = False) -> str:
    """A number as a reader reads it: whole numbers whole, others to two decimals (to
    four significant digits below 1)."""
    sign = "+" if signed else ""
    if value.is_integer() and abs(value) < 1e15:
        return f"{value:{sign},.0f}"
    if abs(value) >= 1:
        return f"{value:{sign},.2f}"
    return f"{value:{sign}.4g}"


def _shown(value: Any) -> str:
    if _is_number(value):
        return number_text(float(value)) if isinstance(value, float) else f"{value:,}"
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


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
    budget = _Budget(MAX_DIFFED_CHARS)
    out = [
        TextDiff(cell=label, status=status, lines=_diff(a, b, budget))
        for label, status, a, b in changed[:MAX_TEXTS]
    ]
    return out, max(0, len(changed) - MAX_TEXTS)


def _diff(a: str, b: str, budget: _Budget) -> list[str]:
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
