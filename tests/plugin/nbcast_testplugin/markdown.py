"""The ``md`` renderer: the report as Markdown — a header, the notebook's Markdown
cells, and every table recorded with ``nbcast.output.table`` as a pipe table.

Deterministic, as every nbcast renderer must be: the output depends only on the
notebook and the report (no clock, no randomness), so the same run renders to the
same bytes.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.report import ReportInfo
from nbcast.output import TABLE_MIME_TYPE

__all__ = ["MarkdownRenderer"]

MAX_ROWS = 1_000
"""Rows of one table written out; the rest are counted, not shown."""


class MarkdownRenderer(Renderer):
    """Renders a report's Markdown cells and tables as one Markdown file."""

    name: ClassVar[str] = "md"
    media_type: ClassVar[str] = "text/markdown"
    extension: ClassVar[str] = "md"

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The Markdown document for ``notebook`` (module docstring)."""
        lines = [
            f"# {report.title}",
            "",
            f"Version {report.version} · slot {report.slot_key or 'manual'} · run {report.run_id}",
            "",
        ]
        if report.late_by:
            lines += [f"> This report is late by {report.late_by}.", ""]
        for cell in notebook.get("cells", ()):
            if cell.get("cell_type") == "markdown":
                lines += [_text(cell.get("source", "")).rstrip(), ""]
                continue
            for output in cell.get("outputs", ()):
                payload = output.get("data", {}).get(TABLE_MIME_TYPE)
                if isinstance(payload, Mapping):
                    lines += _table(payload)
        return ("\n".join(lines).rstrip() + "\n").encode("utf-8")


def _text(source: Any) -> str:
    return "".join(source) if isinstance(source, list) else str(source)


def _cell(value: Any) -> str:
    text = "" if value is None else str(value)
    return text.replace("|", "\\|").replace("\n", " ")


def _table(payload: Mapping[str, Any]) -> list[str]:
    fields = [str(f.get("name")) for f in payload.get("schema", {}).get("fields", [])]
    rows = payload.get("data", [])
    lines = [f"**{_cell(payload.get('name', 'table'))}**", ""]
    lines.append("| " + " | ".join(_cell(f) for f in fields) + " |")
    lines.append("|" + "---|" * len(fields))
    for row in rows[:MAX_ROWS]:
        lines.append("| " + " | ".join(_cell(row.get(f)) for f in fields) + " |")
    if len(rows) > MAX_ROWS:
        lines.append(f"({len(rows) - MAX_ROWS} more rows)")
    return [*lines, ""]
