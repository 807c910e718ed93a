"""The stylesheet every HTML rendition carries, screen and print in one.

JupyterLab's own stylesheet (what ``nbconvert --to html`` inlines, ~270 kB of CSS
custom properties) is replaced by this small one: a report is read, not edited, and
WeasyPrint spends most of a page's time parsing CSS, so a small sheet is what keeps
a PDF page under a second. The ``@media print`` and ``@page`` rules are in the same
document, which is why the PDF is "that same HTML": a browser printing the HTML
gets the same page breaks, repeated table headers and scaled images. Fitting wide
tables to the page (landscape pages, smaller type, column groups) depends on the PDF's
page size, so the ``pdf`` renderer does it on its own copy of the page (:mod:`._fit`),
with the margins and the table type size below.

Page numbers ("Page 3 of 7") and the report's title in the footer use CSS paged
media (``counter(pages)``, ``string-set``), so no text from the notebook is ever
pasted into CSS.
"""

from __future__ import annotations

from string import Template

__all__ = [
    "CELL_PADDING_X_PX",
    "PAGE_MARGINS_MM",
    "REPORT_CSS",
    "TABLE_FONT_PT",
]

PAGE_MARGINS_MM = (16, 14, 18, 14)
"""The page margins, top, right, bottom, left, in millimetres: the PDF renderer's table
fitting (:mod:`._fit`) computes the text width from them."""
TABLE_FONT_PT = 8.5
"""A table's font size in print, before any step down for a wide table."""
CELL_PADDING_X_PX = 6
"""A table cell's left and right padding in print, in CSS pixels (0.75 pt)."""


def _margins() -> str:
    top, right, bottom, left = PAGE_MARGINS_MM
    return f"{top}mm {right}mm {bottom}mm" + ("" if left == right else f" {left}mm")


_CSS = """
html { color-scheme: light; }
body {
  margin: 0; background: #fff; color: #1f2328;
  font-family: "Helvetica Neue", Helvetica, Arial, "DejaVu Sans", sans-serif;
  font-size: 15px; line-height: 1.5;
}
main { max-width: 1100px; margin: 0 auto; padding: 24px 32px 48px; }
.nbcast-header { border-bottom: 2px solid #d0d7de; margin: 0 0 20px; padding: 0 0 10px; }
.nbcast-title { font-size: 1.6em; line-height: 1.25; margin: 0 0 4px; }
.nbcast-meta { color: #57606a; font-size: 0.9em; margin: 0; }
.nbcast-description { margin: 6px 0 0; }
.nbcast-stale {
  border: 2px solid #bf8700; border-left-width: 8px; border-radius: 4px;
  background: #fff8c5; color: #4d2d00; font-weight: bold;
  margin: 0 0 20px; padding: 10px 14px;
}
.jp-Cell { margin: 0 0 12px; }
.jp-InputPrompt, .jp-OutputPrompt, .jp-Collapser, a.anchor-link { display: none; }
.jp-InputArea-editor {
  background: #f6f8fa; border: 1px solid #d0d7de; border-radius: 4px;
  margin: 0 0 6px; padding: 6px 10px; overflow-x: auto;
}
.jp-InputArea-editor .highlight { background: transparent; }
pre {
  font-family: "DejaVu Sans Mono", Menlo, Consolas, monospace; font-size: 13px;
  line-height: 1.4; margin: 0; white-space: pre-wrap; overflow-wrap: anywhere;
}
.jp-OutputArea-output { overflow-x: auto; }
.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] {
  background: #fff5f5; padding: 4px 8px;
}
img { max-width: 100%; height: auto; }
h1, h2, h3, h4 { line-height: 1.25; margin: 1.2em 0 0.5em; }
h2 { border-bottom: 1px solid #eaeef2; padding-bottom: 0.2em; }
table {
  border-collapse: collapse; margin: 6px 0 14px; font-size: 13px;
  font-variant-numeric: tabular-nums;
}
th, td { padding: 4px 10px; border-bottom: 1px solid #d0d7de; vertical-align: top; }
table.dataframe td, table.dataframe th { text-align: right; }
thead th { border-bottom: 2px solid #8c959f; background: #f6f8fa; }
tbody tr:nth-child(even) { background: #fafbfc; }

@page {
  margin: ${margins};
  @bottom-left { content: string(nbcast-title); color: #57606a; font-size: 8pt; }
  @bottom-right {
    content: "Page " counter(page) " of " counter(pages); color: #57606a; font-size: 8pt;
  }
}
@media print {
  body { font-size: 10pt; }
  main { max-width: none; padding: 0; }
  .nbcast-title { string-set: nbcast-title content(text); }
  pre { font-size: 8.5pt; }
  table { font-size: ${table_pt}pt; }
  th, td { padding: 2px ${padding_px}px; }
  thead { display: table-header-group; }
  tfoot { display: table-footer-group; }
  tr, img, pre, .nbcast-stale { break-inside: avoid; }
  h1, h2, h3, h4 { break-after: avoid; }
  .jp-OutputArea-output { overflow: visible; }
  img { max-width: 100%; height: auto; }
}
"""

REPORT_CSS = Template(_CSS).substitute(
    margins=_margins(), table_pt=TABLE_FONT_PT, padding_px=CELL_PADDING_X_PX
)
"""Inlined into every HTML rendition (module docstring)."""
