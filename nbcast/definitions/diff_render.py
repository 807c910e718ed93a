"""Rendering a bounded notebook diff for a terminal, with nbdime's printer.

:func:`render_diff` prints what :func:`nbcast.definitions.diff.diff_notebooks_bounded`
found the way ``nbdiff`` prints: a changed source as unified hunks with three lines
of context (``@@ -1,4 +1,4 @@``, difflib's, in process — never the external ``diff``
program, whose ed-style ``3c3,4`` hunks have no context). Two differences keep it
bounded: changed strings are patched line by line (:func:`patch_text`; nbdime rebuilds
a string one character at a time), and the text stops at
:data:`~nbcast.definitions.diff.MAX_RENDER_CHARS` characters with a note (``--json``
is never cut).

The versions are diffed and printed as plain JSON (``json.loads``), never converted
to ``NotebookNode`` (:mod:`nbcast.definitions.diff`). nbdime's printer reads one
thing by attribute, a printed cell's ``metadata``, so the cells it may print — the
old version's and those the diff inserts — are given as shallow ``NotebookNode``
views (:func:`~nbcast.definitions.diff.attribute_view`): a dict copy per cell, their
contents shared.
"""

from __future__ import annotations

import io
from typing import Any

from nbdime.diff_format import DiffOp
from nbdime.patching import patch_singleline_string
from nbdime.prettyprint import (
    DIFF_ENTRY_END,
    PrettyPrintConfig,
    diff_render,
    format_value,
    pretty_print_diff_action,
    pretty_print_diff_entry,
    pretty_print_value_at,
)

from nbcast.definitions.diff import (
    MAX_RENDER_CHARS,
    Diff,
    attribute_view,
    collector_paused,
    diff_notebooks_bounded,
)
from nbcast.definitions.queries import VersionInfo

__all__ = ["patch_text", "render_diff"]


def render_diff(old: VersionInfo, new: VersionInfo, *, color: bool = False) -> str:
    """A readable terminal diff from ``old`` to ``new`` (empty string if identical)."""
    with collector_paused():  # see nbcast.definitions.diff
        return _render(old, new, color)


def _render(old: VersionInfo, new: VersionInfo, color: bool) -> str:
    a, b = old.notebook, new.notebook
    result = diff_notebooks_bounded(a, b)
    if not result:
        return ""
    a = _printable_notebook(a)
    for e in result:
        _printable_entry(e)
    out = _CappedText(MAX_RENDER_CHARS)
    config = PrettyPrintConfig(out=out, use_git=False, use_diff=False, use_color=color)
    header = (
        f"--- {old.definition} v{old.version}  {old.sha256[:12]}  {old.author}\n"
        f"+++ {new.definition} v{new.version}  {new.sha256[:12]}  {new.author}\n"
    )
    try:
        _print_diff(a, result, "", config)
    except _Truncated:
        cut = f"\n## diff cut at {MAX_RENDER_CHARS:,} characters; --json has all of it\n"
        return header + out.getvalue() + cut
    return header + out.getvalue()


class _Truncated(Exception):
    """The rendered diff reached its cap."""


class _CappedText(io.StringIO):
    """Text that stops the printer, by raising, once it holds ``cap`` characters."""

    def __init__(self, cap: int) -> None:
        super().__init__()
        self.cap = cap
        self.size = 0

    def write(self, text: str) -> int:
        room = self.cap - self.size
        if len(text) > room:
            self.size += super().write(text[:room])
            raise _Truncated
        self.size += super().write(text)
        return len(text)


def _printable_notebook(notebook: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``notebook`` whose cells are attribute views (module docstring)."""
    cells = notebook.get("cells")
    return {**notebook, "cells": _views(cells)} if isinstance(cells, list) else notebook


def _printable_entry(entry: Any) -> None:
    """Make the cells a top-level diff entry holds attribute views, in place: an added
    or replaced ``cells`` list, the cells a ``cells`` patch inserts."""
    if entry.get("key") != "cells":
        return
    if isinstance(entry.get("value"), list):
        entry["value"] = _views(entry["value"])
    for e in entry.get("diff") or ():
        if e.get("op") == DiffOp.ADDRANGE:
            e["valuelist"] = _views(e["valuelist"])


def _views(cells: list[Any]) -> list[Any]:
    return [attribute_view(cell) for cell in cells]


def _print_diff(a: Any, di: Diff, path: str, config: Any) -> None:
    """nbdime's ``pretty_print_diff`` walk, with changed strings printed by us."""
    entries = sorted(di, key=lambda e: e["key"]) if isinstance(a, dict) else di
    for e in entries:
        if e["op"] != DiffOp.PATCH:
            pretty_print_diff_entry(a, e, path, config)
        elif not config.should_ignore_path(path):
            child, nextpath = a[e["key"]], f"{path}/{e['key']}"
            if isinstance(child, str):
                _print_string_diff(child, e["diff"], nextpath, config)
            else:
                _print_diff(child, e["diff"], nextpath, config)


def _print_string_diff(a: str, di: Diff, path: str, config: Any) -> None:
    # What nbdime's pretty_print_string_diff prints, with a line-wise patch.
    pretty_print_diff_action("modified", path, config)
    b = patch_text(a, di)
    ta, tb = format_value(a), format_value(b)
    if ta != a or tb != b:
        for value, short, mark in ((a, ta, config.REMOVE), (b, tb, config.ADD)):
            if short != value:
                config.out.write(f"{mark}{short}\n")
            else:
                pretty_print_value_at(value, path, mark, config)
    elif "\n" in a or "\n" in b:
        config.out.write(diff_render(a, b, config))
    else:
        config.out.write(f"{config.REMOVE}{a}\n")
        config.out.write(f"{config.ADD}{b}\n")
    config.out.write(DIFF_ENTRY_END + config.RESET)


def patch_text(a: str, di: Diff) -> str:
    """Apply a line-wise nbdime string diff to ``a``, as ``nbdime.patch`` would.

    nbdime flattens the diff to characters and rebuilds the string one character at
    a time; this keeps whole lines and patches only the lines with character diffs.
    """
    lines = a.splitlines(True)
    out: list[str] = []
    take = 0
    for e in di:
        index, op = e["key"], e["op"]
        out.extend(lines[take:index])
        skip = 0
        if op == DiffOp.ADDRANGE:
            out.extend(e["valuelist"])
        elif op == DiffOp.REMOVERANGE:
            skip = e["length"]
        elif op == DiffOp.PATCH:
            out.append(patch_singleline_string(lines[index], e["diff"]))
            skip = 1
        else:
            raise ValueError(f"unexpected op {op!r} in a string diff")
        take = max(take, index + skip)
    out.extend(lines[take:])
    return "".join(out)
