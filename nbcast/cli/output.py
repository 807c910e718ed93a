"""How ``nbcast`` prints: rich tables for people, ``--json`` for programs.

Tables never break a key, a timestamp, an id or a state across lines, even at 80
columns: those columns are ``no_wrap``; free text (reasons, errors, paths) folds
instead, and nothing is ever cut short behind an ellipsis. Piped output is not
squeezed to 80 columns (it is read in logs and CI).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime
from typing import Any

import click

__all__ = ["console", "emit_json", "table", "when"]

FREE_TEXT = frozenset({"reason", "error", "message", "source", "help", "file", "recipient"})
"""Column titles whose values fold over lines; every other column keeps each value whole."""


def console() -> Any:
    """A rich console on stdout (160 columns when piped)."""
    from rich.console import Console

    return Console(highlight=False, soft_wrap=False, width=None if sys.stdout.isatty() else 160)


def emit_json(value: Any) -> None:
    """Print ``value`` as indented JSON (instants as ISO 8601)."""
    click.echo(json.dumps(value, indent=2, default=_default, ensure_ascii=False))


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        from nbcast.clock import format_instant

        return format_instant(value)
    return str(value)


def table(
    title: str | None,
    columns: Sequence[str],
    rows: Iterable[Sequence[Any]],
    *,
    wrap: Iterable[str] = (),
    dim: Iterable[bool] = (),
) -> None:
    """Print a table; columns named in ``wrap`` (and :data:`FREE_TEXT`) fold, rows whose
    flag in ``dim`` is true are dimmed (skipped slots, say).

    A folding column is never narrower than its title (nor than its widest value, up to
    :data:`MIN_FOLD_WIDTH`), so a title never breaks. When the kept-whole columns plus
    those minimums do not fit the console, each row is printed as a block of ``column
    value`` lines instead (as psql's ``\\x auto`` does), so nothing is cut, dropped or
    broken mid-value."""
    from rich import box
    from rich.table import Table

    folding = FREE_TEXT | set(wrap)
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    dimmed = list(dim)
    out = console()
    widths = []
    for index, column in enumerate(columns):
        widest = max((len(row[index]) for row in cells), default=0)
        if column in folding:
            widths.append(max(len(column), min(widest, MIN_FOLD_WIDTH)))
        else:
            widths.append(max(widest, len(column)))
    # Between two columns: a rule character and one padding; nothing at the edges.
    if cells and sum(widths) + 2 * (len(widths) - 1) > out.width:
        _records(out, title, columns, cells)
        return
    grid = Table(
        title=title,
        title_justify="left",
        box=box.SIMPLE_HEAD,
        padding=(0, 1, 0, 0),
        show_edge=False,
        pad_edge=False,
    )
    for column, width in zip(columns, widths, strict=True):
        if column in folding:
            grid.add_column(column, overflow="fold", min_width=width)
        else:  # kept whole: as wide as its widest value, so it is never cut or folded
            grid.add_column(column, no_wrap=True, min_width=width)
    for index, row in enumerate(cells):
        grid.add_row(*row, style="dim" if index < len(dimmed) and dimmed[index] else None)
    out.print(grid)


MIN_FOLD_WIDTH = 12
"""The narrowest a folding column may become before rows are printed as blocks."""


def _records(out: Any, title: str | None, columns: Sequence[str], cells: list[list[str]]) -> None:
    """Each row as a block of ``column  value`` lines (values fold, keys stay whole)."""
    from rich.rule import Rule
    from rich.table import Table

    if title:
        out.print(title)
    label = max(len(c) for c in columns)
    for number, row in enumerate(cells, 1):
        out.print(Rule(f"record {number}", align="left", characters="─"))
        grid = Table.grid(padding=(0, 2, 0, 0))
        grid.add_column(no_wrap=True, min_width=label)
        grid.add_column(overflow="fold")
        for column, value in zip(columns, row, strict=True):
            grid.add_row(column, value)
        out.print(grid)


def when(value: Any) -> str:
    """An instant as ``YYYY-MM-DD HH:MM:SSZ`` (empty for None)."""
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else ""
