"""The diff of two versions as HTML: nbdime's own diff, rendered on the server.

:func:`diff_html` walks the diff that
:func:`nbcast.definitions.diff.diff_notebooks_bounded` computes (nbdime's structured
diff, bounded against hostile notebooks) and renders it as one self-contained HTML
page — no script, no external asset, inline CSS only — so it can be served under a
``default-src 'none'`` policy and saved as a file. :func:`diff_fragment` is the same
without the page around it, for a page that embeds it (it needs :data:`STYLE`).

nbdime's web diff is a JavaScript application that needs its server and assets, and
its pretty printer writes terminal text, so neither fits; the structure here follows
nbdime's: cells added, removed and modified (their source line by line, ``+``/``-``
with three lines of context, a changed line shown as removed and added), then the
other changes (cell metadata, type, notebook metadata) as paths with their JSON
values.

A notebook is hostile input: every character from it goes through :func:`_text`
(HTML-escaped, quotes included; C0/C1 control characters and the bidirectional
overrides of "Trojan Source" shown as visible ``<U+202E>`` marks). The output is
bounded: it stops at :data:`MAX_HTML_CHARS` characters with a note, every open
element closed (the JSON diff is never cut).
"""

from __future__ import annotations

import html
import json
import re
from typing import Any

from nbdime.diff_format import DiffOp
from nbdime.patching import patch_singleline_string

from nbcast.definitions.diff import Diff, diff_notebooks_bounded
from nbcast.definitions.queries import VersionInfo
from nbcast.definitions.review import SECTIONS, ReviewSummary

__all__ = ["CONTEXT_LINES", "MAX_HTML_CHARS", "STYLE", "diff_fragment", "diff_html"]

MAX_HTML_CHARS = 2_000_000
"""The longest HTML a diff renders to (then it is cut, with a note)."""

CONTEXT_LINES = 3
"""Unchanged lines shown around each change of a cell's source."""

STYLE = """
.nbcast-diff { font: 14px/1.4 system-ui, sans-serif; color: #1b1f23; }
.nbcast-diff h1 { font-size: 1.2em; margin: 0 0 .5em; }
.nbcast-diff .summary { border: 1px solid #d0d7de; border-radius: 6px; padding: .2em .8em .6em;
  margin: 0 0 1em; background: #f6f8fa; }
.nbcast-diff .summary h2 { font-size: 1.05em; margin: .5em 0 .2em; }
.nbcast-diff .summary h3 { font-size: .95em; margin: .5em 0 .1em; }
.nbcast-diff .summary ul { margin: 0; padding-left: 1.4em; overflow-wrap: break-word; }
.nbcast-diff .summary li.warning { color: #9a6700; font-weight: 600; }
.nbcast-diff .summary li.fires { color: #57606a; list-style: none; }
.nbcast-diff .versions { color: #57606a; margin: 0 0 1em; }
.nbcast-diff .cell { border: 1px solid #d0d7de; border-radius: 6px; margin: .6em 0; }
.nbcast-diff .cell > .head { padding: .3em .6em; background: #f6f8fa;
  border-bottom: 1px solid #d0d7de; font-weight: 600; }
.nbcast-diff .cell.added > .head { background: #dafbe1; }
.nbcast-diff .cell.removed > .head { background: #ffebe9; }
.nbcast-diff .unchanged { color: #57606a; font-style: italic; margin: .4em .6em; }
.nbcast-diff pre { margin: 0; padding: .3em 0; overflow-x: auto;
  font: 12px/1.45 ui-monospace, monospace; white-space: pre; }
.nbcast-diff pre span { display: block; padding: 0 .6em; }
.nbcast-diff .add { background: #e6ffec; }
.nbcast-diff .del { background: #ffebe9; }
.nbcast-diff .ctx { color: #24292f; }
.nbcast-diff .gap { color: #57606a; background: #f6f8fa; }
.nbcast-diff .path { font: 12px ui-monospace, monospace; padding: .3em .6em 0; }
.nbcast-diff .cut, .nbcast-diff .same { margin: 1em 0; font-weight: 600; }
.nbcast-diff .mark { color: #cf222e; }
"""

_VISIBLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200e\u200f\u202a-\u202e\u2066-\u2069]")


class _Truncated(Exception):
    """The HTML reached :data:`MAX_HTML_CHARS`."""


class _Out:
    """HTML being written: capped, with a stack of open elements to close when cut."""

    def __init__(self, cap: int) -> None:
        self.parts: list[str] = []
        self.size = 0
        self.cap = cap
        self.stack: list[str] = []

    def raw(self, markup: str) -> None:
        if self.size + len(markup) > self.cap:
            raise _Truncated
        self.parts.append(markup)
        self.size += len(markup)

    def open(self, tag: str, cls: str | None = None) -> None:
        self.raw(f'<{tag} class="{cls}">' if cls else f"<{tag}>")
        self.stack.append(tag)

    def close(self) -> None:
        self.raw(f"</{self.stack.pop()}>")

    def element(self, tag: str, cls: str, text: str) -> None:
        self.raw(f'<{tag} class="{cls}">{_text(text)}</{tag}>')

    def close_all(self, keep: int = 0) -> None:
        """Close the open elements but the outermost ``keep``, whatever the cap (a cut
        diff stays well formed)."""
        while len(self.stack) > keep:
            self.parts.append(f"</{self.stack.pop()}>")

    def html(self) -> str:
        return "".join(self.parts)


def _text(value: str) -> str:
    """``value`` safe as HTML text or attribute (module docstring)."""
    shown = _VISIBLE.sub(lambda m: f"<U+{ord(m.group()):04X}>", value)
    return html.escape(shown, quote=True)


def _json(value: Any) -> str:
    return json.dumps(value, indent=1, ensure_ascii=False, sort_keys=True, default=str)


def diff_fragment(
    old: VersionInfo,
    new: VersionInfo,
    summary: ReviewSummary | None = None,
    *,
    cap: int = MAX_HTML_CHARS,
) -> str:
    """The diff from ``old`` to ``new`` as an HTML ``<div class="nbcast-diff">``
    (styled by :data:`STYLE`), at most about ``cap`` characters; with ``summary``,
    what changes for recipients comes first (:mod:`nbcast.definitions.review`)."""
    import nbformat

    a = nbformat.from_dict(old.notebook)
    b = nbformat.from_dict(new.notebook)
    result = diff_notebooks_bounded(a, b)
    out = _Out(cap)
    out.open("div", "nbcast-diff")
    try:
        out.element("h1", "title", f"{old.definition}: v{old.version} → v{new.version}")
        out.open("p", "versions")
        for sign, info in (("−", old), ("+", new)):
            out.element(
                "span",
                "version",
                f"{sign} v{info.version} {info.sha256[:12]} by {info.author}, "
                f"{info.created_at:%Y-%m-%d %H:%M} UTC: {info.message or '-'} ",
            )
            out.raw("<br>")
        out.close()
        if summary is not None:
            _summary(summary, out)
        if not result:
            out.element("p", "same", "The two versions are identical.")
        _notebook(a, result, out)
    except _Truncated:
        out.close_all(keep=1)
        out.parts.append(
            f'<p class="cut">The diff was cut at {cap:,} characters; its JSON form has all '
            "of it.</p>"
        )
    out.close_all()
    return out.html()


def diff_html(old: VersionInfo, new: VersionInfo, summary: ReviewSummary | None = None) -> str:
    """The diff from ``old`` to ``new`` as a self-contained HTML page (module docstring),
    opening with ``summary`` when given."""
    title = _text(f"{old.definition} v{old.version} → v{new.version}")
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        f"<title>{title}</title><style>{STYLE}</style></head><body>"
        f"{diff_fragment(old, new, summary)}</body></html>\n"
    )


def _summary(summary: ReviewSummary, out: _Out) -> None:
    """What changes for recipients, by section, before the code."""
    out.open("section", "summary")
    out.element("h2", "summary-title", "What changes for recipients")
    if not summary.items:
        out.element("p", "same", "Nothing that recipients receive changes.")
    for section in SECTIONS:
        mine = [i for i in summary.items if i.section == section]
        if not mine:
            continue
        out.element("h3", "summary-section", section.capitalize())
        out.open("ul", f"summary-list summary-{section}")
        for item in mine:
            out.element("li", "warning" if item.warning else "change", item.text)
        if section == "schedule" and (summary.fires_before or summary.fires_after):
            before = ", ".join(summary.fires_before) or "none"
            after = ", ".join(summary.fires_after) or "none"
            out.element("li", "fires", f"next fires before: {before}")
            out.element("li", "fires", f"next fires after: {after}")
        out.close()
    if summary.more:
        out.element("p", "more", f"… and {summary.more} more changes")
    out.element("h2", "summary-title", "Code")
    out.close()


# -- the walk ---------------------------------------------------------------------------


def _notebook(a: Any, result: Diff, out: _Out) -> None:
    """Cells first, then every other change of the notebook, by key."""
    others: list[dict[str, Any]] = []
    for entry in sorted(result, key=lambda e: str(e["key"])):
        if entry["key"] == "cells" and entry["op"] == DiffOp.PATCH:
            _cells(a["cells"], entry["diff"], out)
        else:
            others.append(entry)
    if others:
        out.open("div", "cell modified")
        out.element("div", "head", "notebook")
        for entry in others:
            _entry(a, entry, "", out)
        out.close()


def _cells(cells: list[Any], di: Diff, out: _Out) -> None:
    """The cell list: runs of unchanged cells collapsed, the others shown."""
    old = 0  # index into the old cells
    new = 0  # the same position among the new cells
    for entry in di:
        key = entry["key"]
        if key > old:
            _unchanged_cells(key - old, out)
            new += key - old
            old = key
        op = entry["op"]
        if op == DiffOp.ADDRANGE:
            for cell in entry["valuelist"]:
                _whole_cell(cell, f"cell {new + 1} added", "added", "add", out)
                new += 1
        elif op == DiffOp.REMOVERANGE:
            for cell in cells[key : key + entry["length"]]:
                _whole_cell(cell, f"old cell {old + 1} removed", "removed", "del", out)
                old += 1
        elif op == DiffOp.PATCH:
            cell = cells[key]
            head = f"cell {new + 1} ({_kind(cell)}) modified"
            if old != new:
                head += f" (cell {old + 1} before)"
            out.open("div", "cell modified")
            out.element("div", "head", head)
            for sub in sorted(entry["diff"], key=lambda e: str(e["key"])):
                _entry(cell, sub, "", out)
            out.close()
            old, new = old + 1, new + 1
    if old < len(cells):
        _unchanged_cells(len(cells) - old, out)


def _kind(cell: Any) -> str:
    kind = cell.get("cell_type") if isinstance(cell, dict) else None
    return str(kind) if isinstance(kind, str) else "cell"


def _unchanged_cells(count: int, out: _Out) -> None:
    out.element("p", "unchanged", f"⋯ {count} unchanged cell{'s' if count != 1 else ''}")


def _whole_cell(cell: Any, head: str, cls: str, line_cls: str, out: _Out) -> None:
    """An added or removed cell: its source, every line marked."""
    out.open("div", f"cell {cls}")
    out.element("div", "head", f"{head} ({_kind(cell)})")
    source = cell.get("source", "") if isinstance(cell, dict) else ""
    if not isinstance(source, str):
        source = _json(source)
    sign = "+" if line_cls == "add" else "-"
    out.open("pre", "source")
    for line in source.splitlines() or [""]:
        out.element("span", line_cls, f"{sign} {line}")
    out.close()
    out.close()


def _entry(parent: Any, entry: dict[str, Any], path: str, out: _Out) -> None:
    """One diff entry of a mapping or list below ``parent`` at ``path``."""
    key = entry["key"]
    here = f"{path}/{key}"
    op = entry["op"]
    if op == DiffOp.PATCH:
        child = parent[key]
        if isinstance(child, str):
            out.element("div", "path", f"{here} modified")
            _string(child, entry["diff"], out)
        elif isinstance(child, dict):
            for sub in sorted(entry["diff"], key=lambda e: str(e["key"])):
                _entry(child, sub, here, out)
        else:
            _list(child, entry["diff"], here, out)
        return
    out.element("div", "path", f"{here} {_VERBS.get(op, op)}")
    out.open("pre", "value")
    if op in (DiffOp.REMOVE, DiffOp.REPLACE):
        _lines(_json(parent[key]), "del", "-", out)
    if op in (DiffOp.ADD, DiffOp.REPLACE):
        _lines(_json(entry["value"]), "add", "+", out)
    out.close()


_VERBS = {DiffOp.ADD: "added", DiffOp.REMOVE: "removed", DiffOp.REPLACE: "replaced"}


def _list(items: list[Any], di: Diff, path: str, out: _Out) -> None:
    """A diff of a list other than the cells (metadata lists, outputs)."""
    for entry in di:
        key, op = entry["key"], entry["op"]
        if op == DiffOp.PATCH:
            _entry(items, entry, path, out)
            continue
        out.element("div", "path", f"{path}/{key} {'inserted' if op == 'addrange' else 'removed'}")
        out.open("pre", "value")
        if op == DiffOp.ADDRANGE:
            for value in entry["valuelist"]:
                _lines(_json(value), "add", "+", out)
        elif op == DiffOp.REMOVERANGE:
            for value in items[key : key + entry["length"]]:
                _lines(_json(value), "del", "-", out)
        out.close()


def _lines(text: str, cls: str, sign: str, out: _Out) -> None:
    for line in text.splitlines() or [""]:
        out.element("span", cls, f"{sign} {line}")


def _string(a: str, di: Diff, out: _Out) -> None:
    """A line-wise nbdime string diff of ``a`` as +/- lines with context."""
    lines = a.splitlines(True)
    rows: list[tuple[str, str]] = []  # (class, line without its newline)
    take = 0
    for entry in di:
        index, op = entry["key"], entry["op"]
        rows.extend(("ctx", line) for line in lines[take:index])
        take = max(take, index)
        if op == DiffOp.ADDRANGE:
            values = entry["valuelist"]
            added = values.splitlines(True) if isinstance(values, str) else list(values)
            rows.extend(("add", line) for line in added)
        elif op == DiffOp.REMOVERANGE:
            rows.extend(("del", line) for line in lines[index : index + entry["length"]])
            take = max(take, index + entry["length"])
        elif op == DiffOp.PATCH:
            rows.append(("del", lines[index]))
            rows.append(("add", patch_singleline_string(lines[index], entry["diff"])))
            take = max(take, index + 1)
    rows.extend(("ctx", line) for line in lines[take:])
    rows = _removed_first(rows)
    out.open("pre", "source")
    signs = {"ctx": " ", "add": "+", "del": "-"}
    for cls, line in _with_context(rows):
        text = line[:-1] if line.endswith("\n") else line
        out.element("span", cls, text if cls == "gap" else f"{signs[cls]} {text}")
    out.close()


def _removed_first(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Each run of changed lines with its removed lines before its added ones (nbdime
    lists an insertion before a removal at the same line)."""
    out: list[tuple[str, str]] = []
    run: list[tuple[str, str]] = []
    for row in [*rows, ("ctx", "")]:
        if row[0] == "ctx":
            out.extend(r for r in run if r[0] == "del")
            out.extend(r for r in run if r[0] == "add")
            run = []
            out.append(row)
        else:
            run.append(row)
    return out[:-1]


def _with_context(rows: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """``rows`` with runs of unchanged lines longer than the context collapsed."""
    keep = [False] * len(rows)
    for i, (cls, _) in enumerate(rows):
        if cls != "ctx":
            for j in range(max(0, i - CONTEXT_LINES), min(len(rows), i + CONTEXT_LINES + 1)):
                keep[j] = True
    shown: list[tuple[str, str]] = []
    hidden = 0
    for row, kept in zip(rows, keep, strict=True):
        if kept:
            if hidden:
                shown.append(("gap", f"⋯ {hidden} unchanged line{'s' if hidden != 1 else ''}"))
                hidden = 0
            shown.append(row)
        else:
            hidden += 1
    if hidden:
        shown.append(("gap", f"⋯ {hidden} unchanged line{'s' if hidden != 1 else ''}"))
    return shown
