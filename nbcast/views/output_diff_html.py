"""A comparison of two runs' reports (:mod:`nbcast.views.run_compare`) as one
self-contained HTML page: no script, inline CSS, images as ``data:`` URIs — served under
``default-src 'none'; style-src 'unsafe-inline'; img-src data:`` by the API and framed
by the status page and the Lab.

Tables list their changed cells (row, column, before, after, change) and their added
and removed rows and columns; text is shown as its unified lines; a changed image is
shown before and after, side by side. Every character from a notebook is escaped;
an image's data is used only after it decodes as base64 (an SVG's text is
base64-encoded here, and an SVG in an ``<img>`` runs no script).
"""

from __future__ import annotations

import base64
import binascii
import html

from nbcast.views.output_diff import ImageDiff, TableDiff, number_text, safe_text
from nbcast.views.run_compare import RunComparison

__all__ = ["STYLE", "comparison_html"]

STYLE = """
body { font: 14px/1.45 system-ui, sans-serif; color: #1b1f23; margin: 16px; }
h1 { font-size: 1.2em; margin: 0 0 .3em; } h2 { font-size: 1.05em; margin: 1.2em 0 .3em; }
.sides { color: #57606a; margin: 0 0 1em; }
.same { color: #1a7f37; font-weight: 600; }
table { border-collapse: collapse; margin: .3em 0 .8em; }
th, td { border: 1px solid #d0d7de; padding: 2px 8px; text-align: left; vertical-align: top;
  overflow-wrap: anywhere; }
th { background: #f6f8fa; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.up { color: #1a7f37; } .down { color: #cf222e; }
.added { color: #1a7f37; } .removed { color: #cf222e; }
pre { background: #f6f8fa; padding: 6px 8px; overflow-x: auto; margin: .2em 0 .8em; }
pre .add { color: #1a7f37; } pre .del { color: #cf222e; } pre .hunk { color: #8250df; }
.images { display: flex; gap: 12px; flex-wrap: wrap; }
.images figure { margin: 0; max-width: 48%; } .images img { max-width: 100%;
  border: 1px solid #d0d7de; } figcaption { color: #57606a; font-size: .9em; }
"""


def _e(value: object) -> str:
    return html.escape(safe_text(str(value)), quote=True)


def comparison_html(comparison: RunComparison) -> str:
    """The page (module docstring)."""
    a, b = comparison.a, comparison.b
    diff = comparison.diff
    parts = [
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{_e(f'run {a.id} → run {b.id}')}</title><style>{STYLE}</style></head><body>",
        f'<h1>Reports compared: run {a.id} → run {b.id}</h1><p class="sides">',
        f"− {_e(a.title())}<br>+ {_e(b.title())}</p>",
    ]
    if diff.same:
        parts.append('<p class="same">The two reports show the same tables, text and images.</p>')
    for table in diff.tables:
        parts.append(_table(table))
    if diff.texts:
        parts.append("<h2>Text</h2>")
    for text in diff.texts:
        parts.append(f"<h3>{_e(text.cell)}: {_e(text.status)}</h3><pre>")
        for line in text.lines:
            cls = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
            parts.append(f'<span class="{cls}">{_e(line)}</span>\n' if cls else f"{_e(line)}\n")
        parts.append("</pre>")
    changed = [i for i in diff.images if i.status != "unchanged"]
    if diff.images:
        same = len(diff.images) - len(changed)
        parts.append(f"<h2>Images</h2><p>{same} unchanged, {len(changed)} changed</p>")
    for image in changed:
        parts.append(_image(image))
    if diff.more_texts:
        parts.append(f"<p>{diff.more_texts} more cells whose text changed are not listed.</p>")
    if diff.more_images:
        parts.append(f"<p>{diff.more_images} more images were not compared.</p>")
    parts.append("</body></html>\n")
    return "".join(parts)


def _table(table: TableDiff) -> str:
    title = f"<h2>Table {_e(table.name)}: {_e(table.status)}</h2>"
    if table.status in ("added", "removed", "unreadable", "unchanged"):
        rows = table.rows_after if table.status != "removed" else table.rows_before
        return f"{title}<p>{rows} rows</p>" if table.status != "unreadable" else title
    by = f"rows matched by {', '.join(table.key)}" if table.key else "rows matched by position"
    parts = [title, f"<p>{table.rows_before} → {table.rows_after} rows, {_e(by)}</p>"]
    for label, items, cls in (
        ("columns added", table.columns_added, "added"),
        ("columns removed", table.columns_removed, "removed"),
        ("rows added", table.rows_added, "added"),
        ("rows removed", table.rows_removed, "removed"),
    ):
        if items:
            parts.append(f'<p class="{cls}">{label}: {_e(", ".join(items))}</p>')
    if table.changes:
        parts.append(
            "<table><thead><tr><th>row</th><th>column</th><th>before</th><th>after</th>"
            "<th>change</th></tr></thead><tbody>"
        )
        for c in table.changes:
            change = ""
            if c.delta is not None:
                cls = "up" if c.delta > 0 else "down"
                pct = f" ({c.percent:+.1f}%)" if c.percent is not None else ""
                change = f'<span class="{cls}">{number_text(c.delta, signed=True)}{pct}</span>'
            parts.append(
                f"<tr><td>{_e(c.row)}</td><td>{_e(c.column)}</td>"
                f'<td class="num">{_e(_value(c.before))}</td>'
                f'<td class="num">{_e(_value(c.after))}</td><td class="num">{change}</td></tr>'
            )
        parts.append("</tbody></table>")
    if table.more:
        parts.append(f"<p>… and {table.more} more changes.</p>")
    return "".join(parts)


def _value(value: object) -> str:
    if isinstance(value, bool) or value is None:
        return "—" if value is None else str(value).lower()
    if isinstance(value, int | float):
        return number_text(float(value)) if isinstance(value, float) else f"{value:,}"
    return str(value)


def _image(image: ImageDiff) -> str:
    figures = []
    for label, data in (("before", image.before), ("after", image.after)):
        uri = _data_uri(image.media_type, data)
        inner = f'<img alt="{label}" src="{uri}">' if uri else "<p>—</p>"
        figures.append(f"<figure>{inner}<figcaption>{label}</figcaption></figure>")
    head = f"<h3>{_e(image.cell)}, image {image.index + 1}: {_e(image.status)}</h3>"
    return f'{head}<div class="images">{"".join(figures)}</div>'


def _data_uri(media_type: str, data: str | None) -> str | None:
    if not data:
        return None
    if media_type == "image/svg+xml":
        encoded = base64.b64encode(safe_text(data).encode()).decode()
    else:
        encoded = "".join(data.split())  # notebooks wrap base64 in lines
        try:
            base64.b64decode(encoded, validate=True)
        except (binascii.Error, ValueError):
            return None
    return f"data:{media_type};base64,{encoded}"
