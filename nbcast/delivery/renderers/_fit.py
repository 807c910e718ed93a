"""Fitting wide tables on the page: the PDF renderer's policy (see :mod:`.pdf`).

:func:`fit_tables` takes the ``html`` rendition, estimates each table's width
(:mod:`._measure`), chooses a layout (:func:`choose_layout`) and marks the page with
classes that :func:`fit_css` styles; nothing else in the page changes, and the same
page and page size always give the same result.
"""

from __future__ import annotations

import copy
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from nbcast.delivery.renderers._measure import TableMeasure, measure_table
from nbcast.delivery.renderers._pages import PageGeometry
from nbcast.delivery.renderers._styles import CELL_PADDING_X_PX, TABLE_FONT_PT

__all__ = [
    "CAP_EM",
    "STEPS",
    "TIGHT_EM",
    "FontStep",
    "Layout",
    "choose_layout",
    "fit_css",
    "fit_tables",
    "table_width_pt",
]

CAP_EM = 12.0
"""A text column is reckoned at most this wide (about 20 characters a line): longer
text wraps inside its cell, as in any printed table."""
TIGHT_EM = 7.0
"""The same when space is short (about 12 characters a line), before the font gets
smaller than 7.5 pt or the table is split."""
SAFETY = 1.02
"""Room left for what the estimate does not see (kerning aside, rounding)."""
BORDER_PT = 1.0
"""Per column, for the cell borders and the layout's rounding."""
INDENT_PT = 30.0
"""Per enclosing list, block quote or definition: the indent a table inside one gets."""
LANDSCAPE = "nbcast-landscape"
BREAK = "nbcast-break"
FIXED = "nbcast-fit-fixed"
PART = "nbcast-part"


@dataclass(frozen=True)
class FontStep:
    """One font size a table may be set in, with its cell padding."""

    css_class: str
    """The class that sets it; empty for the stylesheet's own size."""
    font_pt: float
    padding_pt: float
    """Left and right padding of each cell, each side."""


STEPS = (
    FontStep("", TABLE_FONT_PT, CELL_PADDING_X_PX * 0.75),
    FontStep("nbcast-fit-small", 7.5, 3.0),
    FontStep("nbcast-fit-smaller", 6.5, 2.25),
)
"""The font sizes, largest first: 8.5 pt (the stylesheet's), 7.5 pt, 6.5 pt."""


@dataclass(frozen=True)
class Layout:
    """How one table is set (see :func:`choose_layout`)."""

    turned: bool
    """On the turned (landscape) page rather than the configured one."""
    step: FontStep
    groups: tuple[tuple[int, ...], ...] = ()
    """When split: the columns of each part, row headers included; else empty."""
    fixed: bool = False
    """Fixed layout at full width, cells wrapping anywhere: the last resort."""


def _want_em(measure: TableMeasure, cap: float = CAP_EM) -> list[float]:
    """Per column, the width reckoned for the table to look right (not just fit):
    its widest cell, or if that is text wider than ``cap``, ``cap`` (it wraps)."""
    return [
        max(low, min(high, cap)) for low, high in zip(measure.min_em, measure.max_em, strict=True)
    ]


def table_width_pt(want_em: Sequence[float], step: FontStep) -> float:
    """The estimated width of columns wanting ``want_em`` when set in ``step``."""
    text = sum(want_em) * step.font_pt * SAFETY
    return text + len(want_em) * (2 * step.padding_pt + BORDER_PT)


def choose_layout(measure: TableMeasure, page: PageGeometry, indent_pt: float = 0.0) -> Layout:
    """The first layout in the policy's order (:mod:`.pdf`) in which the table fits.

    The configured page at 8.5 then 7.5 pt, text columns reckoned at :data:`CAP_EM`,
    then at :data:`TIGHT_EM`; the turned page the same way, and at 6.5 pt; split into
    column groups at 7.5 pt on the turned page; fixed layout at 6.5 pt on it. Without
    a turned page (the configured one is landscape already) all of it on that page.
    """
    comfortable, tight = _want_em(measure), _want_em(measure, TIGHT_EM)
    width = page.text_width_pt - indent_pt
    turned = page.turned_text_width_pt
    wide, wide_width = (False, width) if turned is None else (True, turned - indent_pt)
    usual, small, smallest = STEPS
    pages = [(False, width)] + ([(True, wide_width)] if wide else [])
    candidates: list[tuple[bool, FontStep, list[float], float]] = [
        (is_turned, step, want, available)
        for is_turned, available in pages
        for want in (comfortable, tight)
        for step in (usual, small)
    ]
    candidates.append((wide, smallest, tight, wide_width))
    for is_turned, step, want, available in candidates:
        if table_width_pt(want, step) <= available:
            return Layout(turned=is_turned, step=step)
    groups = _column_groups(measure, tight, STEPS[1], wide_width)
    if groups:
        return Layout(turned=wide, step=STEPS[1], groups=groups)
    return Layout(turned=wide, step=STEPS[-1], fixed=True)


def _column_groups(
    measure: TableMeasure, want: list[float], step: FontStep, available: float
) -> tuple[tuple[int, ...], ...]:
    """Column groups that each fit, each led by the row headers; () when some column
    cannot fit even alone beside them. As many groups as a greedy cut needs, with the
    columns spread evenly over them when that fits too."""
    if not measure.splittable:
        return ()
    headers = list(range(measure.header_columns))
    data = list(range(measure.header_columns, measure.columns))

    def fits(group: Sequence[int]) -> bool:
        return table_width_pt([want[c] for c in [*headers, *group]], step) <= available

    greedy: list[list[int]] = []
    for column in data:
        if greedy and fits([*greedy[-1], column]):
            greedy[-1].append(column)
        elif fits([column]):
            greedy.append([column])
        else:
            return ()
    if len(greedy) < 2:
        return ()
    count, extra = divmod(len(data), len(greedy))
    even: list[list[int]] = []
    start = 0
    for index in range(len(greedy)):
        size = count + (1 if index < extra else 0)
        even.append(data[start : start + size])
        start += size
    chosen = even if all(fits(group) for group in even) else greedy
    return tuple(tuple([*headers, *group]) for group in chosen)


def _add_class(tag: Any, name: str) -> None:
    classes = tag.get("class") or []
    if isinstance(classes, str):
        classes = classes.split()
    if name not in classes:
        tag["class"] = [*classes, name]


def _indent_pt(table: Any) -> float:
    return INDENT_PT * len(table.find_parents(["ul", "ol", "blockquote", "dd"]))


def _is_heading_cell(cell: Any) -> bool:
    """A Markdown cell holding nothing but headings (it belongs with what follows)."""
    classes = cell.get("class") or []
    if "jp-MarkdownCell" not in classes:
        return False
    headings = cell.find_all(["h1", "h2", "h3", "h4", "h5", "h6"])
    text = "".join(cell.get_text().split())
    return bool(headings) and text == "".join(
        "".join(heading.get_text().split()) for heading in headings
    )


def _turn(table: Any) -> None:
    """Put ``table``'s notebook cell (else the table) on the turned page, and the
    heading-only Markdown cell just before it too, so a heading stays with its table."""
    cell = table.find_parent("div", class_="jp-Cell")
    if cell is None:
        _add_class(table, LANDSCAPE)
        return
    _add_class(cell, LANDSCAPE)
    before = cell.find_previous_sibling("div")
    if before is not None and _is_heading_cell(before):
        _add_class(before, LANDSCAPE)


def _fix_columns(soup: Any, table: Any, want: list[float]) -> None:
    """A ``<colgroup>`` whose widths follow the estimate and sum to 100 %."""
    for old in table.find_all(["colgroup", "col"], recursive=False):
        old.decompose()
    weights = [max(width, 3.0) for width in want]
    total = sum(weights)
    colgroup = soup.new_tag("colgroup")
    for weight in weights:
        colgroup.append(soup.new_tag("col", attrs={"style": f"width: {weight / total:.4%}"}))
    caption = table.find("caption", recursive=False)
    if caption is not None:
        caption.insert_after(colgroup)
    else:
        table.insert(0, colgroup)


def _part(soup: Any, table: Any, measure: TableMeasure, keep: set[int]) -> Any:
    """A copy of ``table`` with only the columns in ``keep`` (built cell by cell:
    copying the whole table for every group and deleting most of it is slow)."""
    part = soup.new_tag("table", attrs=dict(table.attrs))
    caption = table.find("caption", recursive=False)
    if caption is not None:
        part.append(copy.copy(caption))
    sections: dict[int, Any] = {}
    for placed in measure.rows:
        parent = placed.row.parent
        holder = part
        if parent is not table:
            if id(parent) not in sections:
                sections[id(parent)] = soup.new_tag(parent.name, attrs=dict(parent.attrs))
                part.append(sections[id(parent)])
            holder = sections[id(parent)]
        row = soup.new_tag("tr", attrs=dict(placed.row.attrs))
        for item in placed.cells:
            kept = sum(1 for c in range(item.column, item.column + item.colspan) if c in keep)
            if kept:
                cell = copy.copy(item.cell)
                if kept != item.colspan:
                    cell["colspan"] = str(kept)
                row.append(cell)
        holder.append(row)
    return part


def _split(soup: Any, table: Any, measure: TableMeasure, groups: Sequence[Sequence[int]]) -> Any:
    """Replace ``table`` by one table per column group; return a wrapper holding them."""
    data_columns = measure.columns - measure.header_columns
    wrapper = soup.new_tag("div", attrs={"class": "nbcast-parts"})
    for group in groups:
        part = _part(soup, table, measure, set(group))
        first = group[measure.header_columns] - measure.header_columns + 1
        last = group[-1] - measure.header_columns + 1
        note = f"columns {first}–{last} of {data_columns}"
        caption = part.find("caption", recursive=False)
        if caption is None:
            caption = soup.new_tag("caption")
            caption.string = note
            part.insert(0, caption)
        else:
            caption.append(f" ({note})")
        _add_class(caption, PART)
        wrapper.append(part)
    table.replace_with(wrapper)
    return wrapper


def fit_tables(html: str, page: PageGeometry) -> str:
    """``html`` with every top-level table marked for the layout it gets (module doc)."""
    if "<table" not in html:
        return html
    from bs4 import BeautifulSoup

    soup = BeautifulSoup(html, "html.parser")
    tables = [table for table in soup.find_all("table") if table.find_parent("table") is None]
    changed = False
    for table in tables:
        measure = measure_table(table)
        if not measure.columns:
            continue
        layout = choose_layout(measure, page, _indent_pt(table))
        for cell in measure.breaking_cells:
            _add_class(cell, BREAK)
            changed = True
        if layout.turned:
            _turn(table)
            changed = True
        if layout.step.css_class:
            _add_class(table, layout.step.css_class)
            changed = True
        if layout.fixed:
            _add_class(table, FIXED)
            _fix_columns(soup, table, _want_em(measure))
            changed = True
        if layout.groups:
            _split(soup, table, measure, layout.groups)
            changed = True
    return str(soup) if changed else html


@functools.cache
def fit_css(page: PageGeometry) -> str:
    """The stylesheet the PDF renderer adds: page sizes and the classes above.

    WeasyPrint takes it as a *user* stylesheet, below the page's own (author) rules
    in the cascade, hence ``!important`` wherever the page's stylesheet says otherwise.
    """
    rules = [f"@page {{ size: {page.size_css}; }}"]
    if page.turned_css is not None:
        rules += [
            f"@page {LANDSCAPE} {{ size: {page.turned_css}; }}",
            # Every other box gets a page name too: WeasyPrint breaks to a new page
            # when the name changes, but not when it goes back to the unnamed page.
            "html { page: nbcast-report; }",
            f".{LANDSCAPE} {{ page: {LANDSCAPE} !important; }}",
        ]
    for step in STEPS[1:]:
        name = step.css_class
        rules += [
            f"table.{name} {{ font-size: {step.font_pt}pt !important; }}",
            f"table.{name} th, table.{name} td {{ padding-left: {step.padding_pt}pt !important; "
            f"padding-right: {step.padding_pt}pt !important; }}",
        ]
    rules += [
        f"table.{FIXED} {{ table-layout: fixed !important; width: 100% !important; }}",
        f"table.{FIXED} th, table.{FIXED} td, .{BREAK} {{ overflow-wrap: anywhere !important; }}",
        f"caption.{PART} {{ caption-side: top; text-align: left; color: #57606a; "
        "font-style: italic; padding: 0 0 2pt; }",
        ".nbcast-parts table { margin-bottom: 10pt; }",
    ]
    return "\n".join(rules) + "\n"
