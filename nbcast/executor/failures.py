"""Where an attempt failed: its error's fields, and the source line that raised.

A failed attempt keeps papermill's structured error on its row — ``ename``,
``evalue``, ``cell_index`` and IPython's ``traceback`` (:mod:`nbcast.executor.attempt`)
— and the executed notebook in the artifact store. :func:`describe_error` turns that
into an :class:`ErrorInfo` for people and programs (``nbcast runs show``):

- ``cell_index`` is papermill's: the index in the executed notebook *before* papermill
  added its error banner (a markdown cell at the top and an anchor before the failing
  cell, both tagged :data:`PAPERMILL_ERROR_TAG`). :func:`failing_cell` skips those to
  find the cell again in the stored notebook.
- The line is the one IPython's traceback points at in that cell: the traceback names
  it ``Cell In[N], line L`` (``N`` the cell's execution count). The first such frame
  is always the failing cell (it is the code that was run); when the exception was
  raised deeper inside that same cell (a function defined and called there), the last
  frame of that cell is taken. The line's text is read from the cell's source in the
  stored notebook, or, without it, from the traceback's ``----> L`` arrow.

Everything read here came from a notebook, so each figure is checked and each text
cut short (:data:`MAX_TEXT`); a notebook larger than :data:`MAX_NOTEBOOK_BYTES` is
not read (the traceback still gives the line).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbcast.artifacts import ArtifactStore, LocalArtifactStore

__all__ = [
    "MAX_NOTEBOOK_BYTES",
    "MAX_TEXT",
    "PAPERMILL_ERROR_TAG",
    "ErrorInfo",
    "describe_error",
    "failing_cell",
    "read_notebook",
]

PAPERMILL_ERROR_TAG = "papermill-error-cell-tag"
"""The tag of the cells papermill adds to a failed notebook (its ``ERROR_MARKER_TAG``)."""

MAX_TEXT = 2000
"""Characters kept of an error's name, value, message and source line."""

MAX_NOTEBOOK_BYTES = 64 * 1024 * 1024
"""The largest executed notebook read to find a failing line."""

_MAX_TRACEBACK_ENTRIES = 50
_MAX_LINE = 1_000_000
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_FRAME = re.compile(r"Cell In\[(\d+)\], line (\d+)")
_ARROW = re.compile(r"^-*>\s*(\d+)\s?(.*)$", re.MULTILINE)


@dataclass(frozen=True, kw_only=True)
class ErrorInfo:
    """Why an attempt (or a run) failed, as far as it is known."""

    ename: str | None = None
    """The exception's class name (``ZeroDivisionError``)."""
    evalue: str | None = None
    """Its message."""
    cell_index: int | None = None
    """papermill's index of the failing cell in the executed notebook."""
    line_number: int | None = None
    """The failing line, counted from 1 within the cell."""
    source_line: str | None = None
    """That line's source."""
    reason: str | None = None
    """A permanent failure's or the reaper's reason (``no_such_kernel``, ``lease_expired``)."""
    message: str | None = None
    """Text of an error that is not an exception (a timeout, an expired lease)."""

    def summary(self) -> str:
        """One line for people: what was raised, and where."""
        what = ": ".join(p for p in (self.ename, self.evalue) if p) or self.message or ""
        if self.reason and self.reason not in what:
            what = f"{what} ({self.reason})" if what else self.reason
        where = ""
        if self.cell_index is not None:
            where = f"cell {self.cell_index}"
            if self.line_number is not None:
                where += f", line {self.line_number}"
            if self.source_line:
                where += f": {self.source_line.strip()}"
        return f"{what} — in {where}" if where else what

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "ename": self.ename,
            "evalue": self.evalue,
            "cell_index": self.cell_index,
            "line_number": self.line_number,
            "source_line": self.source_line,
            "reason": self.reason,
            "message": self.message,
        }


def _text(value: Any) -> str | None:
    if value is None:
        return None
    return str(value)[:MAX_TEXT]


def _index(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        return None
    return value


def read_notebook(store: ArtifactStore | None, sha256: str | None) -> dict[str, Any] | None:
    """The executed notebook stored as ``sha256``, or None (no store, missing, too
    large, not JSON)."""
    if store is None or sha256 is None:
        return None
    try:
        if isinstance(store, LocalArtifactStore):
            path = store.path(sha256)
            if not path.is_file() or path.stat().st_size > MAX_NOTEBOOK_BYTES:
                return None
        data = store.get(sha256)
        if len(data) > MAX_NOTEBOOK_BYTES:
            return None
        notebook = json.loads(data)
    except (KeyError, OSError, ValueError):
        return None
    return notebook if isinstance(notebook, dict) else None


def failing_cell(notebook: Mapping[str, Any], cell_index: int) -> Mapping[str, Any] | None:
    """Cell ``cell_index`` of an executed notebook as papermill counted it (module
    docstring: the error banner cells are not counted), or None."""
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        return None
    counted = [
        cell
        for cell in cells
        if isinstance(cell, Mapping)
        and PAPERMILL_ERROR_TAG not in (cell.get("metadata", {}).get("tags") or ())
    ]
    return counted[cell_index] if 0 <= cell_index < len(counted) else None


def _source(cell: Mapping[str, Any]) -> str:
    source = cell.get("source", "")
    if isinstance(source, list):
        return "".join(str(part) for part in source)
    return str(source)


def _traceback_line(traceback: Any) -> tuple[int | None, str | None]:
    """The failing line's number and, from the arrow, its text (module docstring)."""
    if not isinstance(traceback, Sequence) or isinstance(traceback, str):
        return None, None
    entries = [_ANSI.sub("", str(e)[: MAX_TEXT * 4]) for e in traceback[:_MAX_TRACEBACK_ENTRIES]]
    frames = [(entry, m) for entry in entries for m in _FRAME.finditer(entry)]
    if frames:
        cell = frames[0][1].group(1)
        entry, match = [f for f in frames if f[1].group(1) == cell][-1]
        number = int(match.group(2))
        arrows = [a for a in _ARROW.finditer(entry[match.end() :]) if int(a.group(1)) == number]
        return number, (arrows[0].group(2) if arrows else None)
    for entry in entries:  # no "Cell In[...]": an older IPython's arrow
        arrow = _ARROW.search(entry)
        if arrow is not None:
            return int(arrow.group(1)), arrow.group(2)
    return None, None


def describe_error(
    error: Mapping[str, Any] | None, notebook: Mapping[str, Any] | None = None
) -> ErrorInfo | None:
    """An attempt's (or run's) ``error`` column read for people (module docstring);
    ``notebook`` is the executed notebook, when it could be read."""
    if not isinstance(error, Mapping) or not error:
        return None
    cell_index = _index(error.get("cell_index"))
    number, text = _traceback_line(error.get("traceback"))
    if number is not None and number > _MAX_LINE:
        number, text = None, None
    if cell_index is not None and number is not None and notebook is not None:
        cell = failing_cell(notebook, cell_index)
        lines = _source(cell).splitlines() if cell is not None else []
        if 1 <= number <= len(lines):
            text = lines[number - 1]
    return ErrorInfo(
        ename=_text(error.get("ename")),
        evalue=_text(error.get("evalue")),
        cell_index=cell_index,
        line_number=number if cell_index is not None else None,
        source_line=_text(text) if cell_index is not None else None,
        reason=_text(error.get("reason")),
        message=_text(error.get("message")),
    )
