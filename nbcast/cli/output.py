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
) -> None:
    """Print a table; columns named in ``wrap`` (and :data:`FREE_TEXT`) fold."""
    from rich import box
    from rich.table import Table

    folding = FREE_TEXT | set(wrap)
    cells = [["" if v is None else str(v) for v in row] for row in rows]
    grid = Table(title=title, title_justify="left", box=box.SIMPLE_HEAD, padding=(0, 1, 0, 0))
    for index, column in enumerate(columns):
        if column in folding:
            grid.add_column(column, overflow="fold")
        else:  # kept whole: as wide as its widest value, so it is never cut or folded
            widest = max((len(row[index]) for row in cells), default=0)
            grid.add_column(column, no_wrap=True, min_width=max(widest, len(column)))
    for row in cells:
        grid.add_row(*row)
    console().print(grid)


def when(value: Any) -> str:
    """An instant as ``YYYY-MM-DD HH:MM:SSZ`` (empty for None)."""
    return value.strftime("%Y-%m-%d %H:%M:%SZ") if value is not None else ""
