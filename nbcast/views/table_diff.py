"""Recorded tables of two reports compared as a reader compares them: matched by
name, rows by a key, cell by cell (:mod:`nbcast.views.output_diff` compares the rest of
the two reports: text and images).

A table only in one report is added or removed. Rows are matched by a **key**: the
columns that are not numbers (text, dates, booleans), in order, as few as make every
row's key unique in both (``region``; ``sku`` beside a ``rank``) — else by position.
Matched rows are compared cell by cell: a number with its delta and relative change
(``revenue 1,200 → 1,350 (+150, +12.5%)``; none when either is not finite), any other
value as before → after; rows and columns only in one table are listed as added or
removed. A table whose payload is malformed is ``unreadable``, never an exception.

Bounds: :data:`MAX_CHANGES` changed values and :data:`MAX_ROWS_LISTED` added (or
removed) rows listed per table, :data:`MAX_CELLS_COMPARED` values compared in all (the
rest counted in ``more``), :data:`MAX_KEY_COLUMNS` key columns tried; a value is shown
in at most :data:`VALUE_CHARS` characters.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbcast.errors import RenderError
from nbcast.output.tables import table_payloads

__all__ = [
    "MAX_CELLS_COMPARED",
    "MAX_CHANGES",
    "MAX_KEY_COLUMNS",
    "MAX_ROWS_LISTED",
    "VALUE_CHARS",
    "Budget",
    "CellChange",
    "TableDiff",
    "compare_tables",
    "number_text",
    "table_lines",
]

MAX_CHANGES = 500
"""Cell changes listed per table."""
MAX_ROWS_LISTED = 200
"""Added (or removed) rows listed per table."""
VALUE_CHARS = 120
"""A value longer than this is shown cut, with ``…``."""
MAX_KEY_COLUMNS = 4
"""Key columns tried at most (``region``, then ``region, day``, …)."""
MAX_CELLS_COMPARED = 2_000_000
"""Table values compared in all, in one comparison (the rest are counted as not
compared: ``more``)."""

_NUMERIC = {"integer", "number"}


class Budget:
    """Work left for one comparison."""

    def __init__(self, left: int) -> None:
        self.left = left

    def spend(self, amount: int = 1) -> bool:
        self.left -= amount
        return self.left >= 0


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


def table_lines(table: TableDiff) -> list[str]:
    """A table's comparison as text lines (``nbcast runs diff``)."""
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


def _payloads(notebook: Mapping[str, Any]) -> dict[str, dict[str, Any]] | None:
    try:
        return table_payloads(notebook)
    except (RenderError, AttributeError, TypeError, KeyError):  # a malformed notebook
        return None


def compare_tables(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[TableDiff]:
    """The recorded tables of two executed notebooks compared (module docstring)."""
    budget = Budget(MAX_CELLS_COMPARED)
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


def _table(name: str, a: Mapping[str, Any], b: Mapping[str, Any], budget: Budget) -> TableDiff:
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
