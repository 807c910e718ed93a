"""How wide a table wants to be, estimated from its HTML before any layout.

The estimate is in **em** (multiples of the table's font size), per column, from the
text of the cells, so the PDF renderer can pick a page and a font size for a table
without laying the page out twice (:mod:`._fit`).

Glyph widths are DejaVu Sans' (regular for ``td``, bold for ``th`` and for cells with
``<b>``/``<strong>``): it is the stylesheet's last named font and the one a server
without Helvetica or Arial lays out with, and it is wider than both, so on a machine
that has them the estimate errs on the wide side — the safe side. A character outside
ASCII counts 1 em when East Asian wide, nothing when combining, 0.84 em otherwise.
In a cell with code (``<code>``, ``<kbd>``, ``<samp>``, ``<pre>``) each word counts
the wider of its proportional and its monospaced width (DejaVu Sans Mono: 0.602 em).

Per column, two figures, as a browser's table layout sees them: the widest
unbreakable run of any cell (its *min-content* width: a table can never be narrower
than the sum of these) and the widest cell on one line (its *max-content* width). A
word longer than :data:`LONG_WORD_EM` (a hash, a URL) is marked for breaking anywhere
(:attr:`TableMeasure.breaking_cells`) and counts as that long. Cells spanning several
columns share what they need beyond those columns' own needs equally.
"""

from __future__ import annotations

import unicodedata
from dataclasses import dataclass
from typing import Any

__all__ = [
    "LONG_WORD_EM",
    "PlacedCell",
    "PlacedRow",
    "TableMeasure",
    "measure_table",
    "own_rows",
    "place_cells",
    "text_em",
]

LONG_WORD_EM = 24.0
"""An unbreakable run longer than this (about 40 characters) may break anywhere."""
_MAX_SPAN = 1000  # HTML's own limit for colspan
_MAX_ROWSPAN = 65534

# Advance widths of ASCII 32..126 in thousandths of an em, from DejaVu Sans 2.37.
_REGULAR = (
    318, 401, 460, 838, 636, 950, 780, 275, 390, 390, 500, 838, 318, 361, 318, 337,
    636, 636, 636, 636, 636, 636, 636, 636, 636, 636, 337, 337, 838, 838, 838, 531,
    1000, 684, 686, 698, 770, 632, 575, 775, 752, 295, 295, 656, 557, 863, 748, 787,
    603, 787, 695, 635, 611, 732, 684, 989, 685, 611, 685, 390, 337, 390, 838, 500,
    500, 613, 635, 550, 635, 615, 352, 635, 634, 278, 278, 579, 278, 974, 634, 612,
    635, 635, 411, 521, 392, 634, 592, 818, 592, 592, 525, 636, 337, 636, 838,
)  # fmt: skip
_BOLD = (
    348, 456, 521, 838, 696, 1002, 872, 306, 457, 457, 523, 838, 380, 415, 380, 365,
    696, 696, 696, 696, 696, 696, 696, 696, 696, 696, 400, 400, 838, 838, 838, 580,
    1000, 774, 762, 734, 830, 683, 683, 821, 837, 372, 372, 775, 637, 995, 837, 850,
    733, 850, 770, 720, 682, 812, 774, 1103, 771, 724, 725, 457, 365, 457, 838, 500,
    500, 675, 716, 593, 716, 678, 435, 716, 712, 343, 343, 665, 343, 1042, 712, 687,
    716, 716, 493, 595, 478, 712, 652, 924, 645, 652, 582, 712, 365, 712, 838,
)  # fmt: skip
_OTHER = 0.84
_WIDE = 1.0
_MONO = 0.602
_CODE = ["code", "kbd", "samp", "pre", "tt"]


_REGULAR_EM = {chr(32 + index): width / 1000 for index, width in enumerate(_REGULAR)}
_BOLD_EM = {chr(32 + index): width / 1000 for index, width in enumerate(_BOLD)}


def _char_em(char: str, table: tuple[int, ...]) -> float:
    code = ord(char)
    if 32 <= code < 127:
        return table[code - 32] / 1000
    if unicodedata.combining(char) or code < 32:
        return 0.0
    return _WIDE if unicodedata.east_asian_width(char) in ("W", "F") else _OTHER


def text_em(text: str, *, bold: bool = False, code: bool = False) -> float:
    """The width of ``text`` on one line, in em (module docstring); ``code``: the wider
    of its proportional and monospaced widths."""
    table = _BOLD if bold else _REGULAR
    ascii_em = _BOLD_EM if bold else _REGULAR_EM
    try:
        width = sum(map(ascii_em.__getitem__, text))  # the common case, quickly
    except KeyError:
        width = sum(_char_em(char, table) for char in text)
    if code:
        mono = sum(_MONO if _char_em(char, table) < _WIDE else _WIDE for char in text)
        width = max(width, mono)
    return width


@dataclass(frozen=True)
class PlacedCell:
    """A cell and the grid columns it covers."""

    cell: Any
    column: int
    colspan: int
    rowspan: int


@dataclass(frozen=True)
class PlacedRow:
    """A row, its cells placed on the grid, and the columns it covers (its own cells
    and those spanning down into it from rows above)."""

    row: Any
    cells: tuple[PlacedCell, ...]
    covers: int


@dataclass(frozen=True)
class TableMeasure:
    """What a table wants, per column (module docstring)."""

    min_em: tuple[float, ...]
    """Per column: the widest run that cannot wrap."""
    max_em: tuple[float, ...]
    """Per column: the widest cell set on one line."""
    header_columns: int
    """Leading columns that are row headers (``th`` in every body row, as pandas
    writes an index); they are repeated when the table is split into column groups."""
    splittable: bool
    """Every row covers every column (spans included) and sits directly in the table
    or one of its sections: the table can be split into column groups, a spanning
    cell shrinking to the columns each group keeps."""
    breaking_cells: tuple[Any, ...]
    """The cells holding a run longer than :data:`LONG_WORD_EM`, to break anywhere."""
    rows: tuple[PlacedRow, ...]
    """The table's own rows, placed on the grid."""

    @property
    def columns(self) -> int:
        """The number of grid columns."""
        return len(self.min_em)


_SECTIONS = ("table", "thead", "tbody", "tfoot")


def own_rows(table: Any) -> list[Any]:
    """``table``'s rows, not those of tables nested in its cells, in document order."""
    return [row for row in table.find_all("tr") if row.find_parent("table") is table]


def _span(cell: Any, name: str, limit: int) -> int:
    value = cell.attrs.get(name)
    if value is None:
        return 1
    try:
        return min(max(int(str(value).strip()), 1), limit)
    except ValueError:
        return 1


def place_cells(table: Any) -> list[PlacedRow]:
    """``table``'s own rows with their cells placed on the grid, as a browser does."""
    placed: list[PlacedRow] = []
    occupied: dict[int, int] = {}  # column -> rows still covered by a rowspan above
    for row in own_rows(table):
        column = 0
        cells = []
        for cell in row.children:
            if getattr(cell, "name", None) not in ("td", "th"):
                continue
            while occupied.get(column, 0) > 0:
                column += 1
            colspan = _span(cell, "colspan", _MAX_SPAN)
            rowspan = _span(cell, "rowspan", _MAX_ROWSPAN)
            cells.append(PlacedCell(cell=cell, column=column, colspan=colspan, rowspan=rowspan))
            if rowspan > 1:
                for covered in range(column, column + colspan):
                    occupied[covered] = rowspan
            column += colspan
        covers = max([column, *(c + 1 for c, rows in occupied.items() if rows > 0)])
        for covered in list(occupied):
            occupied[covered] -= 1
            if occupied[covered] <= 0:
                del occupied[covered]
        placed.append(PlacedRow(row=row, cells=tuple(cells), covers=covers))
    return placed


def _cell_em(cell: Any) -> tuple[float, float, bool]:
    """(widest unbreakable run, whole text on one line, has a run to break anywhere)."""
    bold = cell.name == "th"
    code = False
    if any(getattr(child, "name", None) for child in cell.contents):
        names = {node.name for node in cell.descendants if getattr(node, "name", None)}
        bold = bold or not names.isdisjoint(("b", "strong"))
        code = not names.isdisjoint(_CODE)
    words = cell.get_text().split()
    if not words:
        return 0.0, 0.0, False
    widths = [text_em(word, bold=bold, code=code) for word in words]
    space = text_em(" ", bold=bold, code=code)
    whole = sum(widths) + space * (len(widths) - 1)
    longest = max(widths)
    if longest > LONG_WORD_EM:
        return LONG_WORD_EM, whole, True
    return longest, whole, False


def measure_table(table: Any) -> TableMeasure:
    """Measure ``table`` (a BeautifulSoup ``<table>`` tag) as the module docstring says."""
    minimum: dict[int, float] = {}
    maximum: dict[int, float] = {}
    spanning: list[tuple[int, int, float, float]] = []
    breaking: list[Any] = []
    body_kinds: dict[int, set[str]] = {}  # column -> kinds of cell covering it in the body
    placed = place_cells(table)
    for placed_row in placed:
        in_body = placed_row.row.find_parent("thead") is None
        for item in placed_row.cells:
            low, high, breaks = _cell_em(item.cell)
            if breaks:
                breaking.append(item.cell)
            if item.colspan == 1:
                minimum[item.column] = max(minimum.get(item.column, 0.0), low)
                maximum[item.column] = max(maximum.get(item.column, 0.0), high)
            else:
                spanning.append((item.column, item.colspan, low, high))
            if in_body:
                for column in range(item.column, item.column + item.colspan):
                    body_kinds.setdefault(column, set()).add(item.cell.name)
    coverage = {placed_row.covers for placed_row in placed}
    columns = max(coverage, default=0)
    low_em = [minimum.get(column, 0.0) for column in range(columns)]
    high_em = [maximum.get(column, 0.0) for column in range(columns)]
    for start, span, low, high in spanning:
        _share(low_em, start, span, low)
        _share(high_em, start, span, high)
    headers = 0
    while headers < columns and body_kinds.get(headers) == {"th"}:
        headers += 1
    if headers == columns:
        headers = 0  # all headers: nothing to repeat beside
    in_sections = all(
        placed_row.row.parent is table
        or (placed_row.row.parent.name in _SECTIONS and placed_row.row.parent.parent is table)
        for placed_row in placed
    )
    return TableMeasure(
        min_em=tuple(low_em),
        max_em=tuple(max(high, low) for high, low in zip(high_em, low_em, strict=True)),
        header_columns=headers,
        splittable=len(coverage) == 1 and columns > 0 and in_sections,
        breaking_cells=tuple(breaking),
        rows=tuple(placed),
    )


def _share(widths: list[float], start: int, span: int, need: float) -> None:
    """Widen ``widths[start:start+span]`` equally until together they hold ``need``."""
    span = min(span, len(widths) - start)
    if span <= 0:
        return
    missing = need - sum(widths[start : start + span])
    if missing > 0:
        for column in range(start, start + span):
            widths[column] += missing / span
