"""The ``pdf`` renderer: the ``html`` rendition laid out by WeasyPrint.

The page is what :class:`~nbcast.delivery.renderers.html.HtmlRenderer` produces;
its stylesheet's print rules do the paged layout: A4 portrait by default
(``PdfRenderer(page_size="letter")``, ``"A4 landscape"``, ``"210mm 297mm"``; A3–A6,
B4, B5, letter, legal and ledger are known, anything else is a RenderError), margins
16/14/18 mm, "Page X of Y" and the report's name in the footer, table header rows
repeated on every page (``thead {display: table-header-group}``), rows never split
across pages, images scaled to the page width, long lines of text output wrapped.

**Wide tables fit the page.** No table is ever cut off at the page's edge. Before
layout, every table's width is estimated from its text (:mod:`._measure`: per column,
the widest cell and the widest unbreakable word, with DejaVu Sans' glyph widths —
the widest of the stylesheet's fonts — so the estimate errs on the wide side; text
columns are reckoned at most 12 em wide, as they may wrap). The table then gets the
first of these that fits between the margins (:mod:`._fit`):

1. the report's own page, at the table's usual 8.5 pt, then at 7.5 pt; then the same
   with text columns wrapping narrower (reckoned at 7 em, about 12 characters);
2. a **landscape page** (the same sheet turned, e.g. A4 landscape), the same four
   ways, then at 6.5 pt with the narrower text columns. The notebook cell holding
   the table moves to that page, with a Markdown cell of headings just before it;
   the report goes back to its own page after it. So a report with one wide table
   has one landscape page, not a landscape report;
3. **split into column groups** on landscape pages at 7.5 pt, one table per group
   with the row headers (a DataFrame's index) repeated and a caption "columns 13–25
   of 25"; spanning header cells (a MultiIndex) shrink to the columns each group has;
4. the last resort, for tables that cannot be split (rows of unequal length) or a
   column too wide even alone: a fixed layout at 6.5 pt on the landscape page, the
   full width, column widths in proportion to the estimate (summing to 100 %) and
   cells wrapping anywhere, even inside a number.

A word longer than 24 em (about 40 characters: a hash, a URL) may break anywhere, in
any table. A page size that is already landscape has no page to turn to: its steps
are the same on the page itself. A table inside a list or quotation is reckoned
30 pt narrower per level. Tables nested in a cell are measured as their text. The
fitting shows what the HTML has: pandas' own display limits (``display.max_columns``)
still decide which columns a DataFrame's HTML holds at all.

``tests.delivery.pdfcheck.text_outside_page`` checks a PDF for text drawn past a
page's edge; :func:`~nbcast.delivery.renderers.thumbnails.pdf_thumbnail` previews one.

Nothing is fetched: WeasyPrint gets a URL fetcher (:func:`data_url_fetcher`) that
serves ``data:`` URLs and refuses everything else — ``file:``, ``http(s):``,
relative paths (there is no base URL) — so a notebook cannot make the renderer read
a local file or reach the network, even if an ``<img>`` or ``<link>`` got past the
sanitizer. WeasyPrint runs no JavaScript, and the PDF gets no actions.

Determinism: the fitting reads only the page and the page size, so it decides the
same way every time; WeasyPrint 6x writes no dates unless asked; this renderer sets the
PDF's creation and modification dates to ``report.fire_at``, its ``/ID`` to a hash of
the page, and ``SOURCE_DATE_EPOCH`` (the slot's instant) while it writes, because
fontTools stamps the fonts it saves with the current time otherwise. Font subset
tags are hashes of the font's description (WeasyPrint's own, stable).

Speed: WeasyPrint subsets every font face it embeds; without the HarfBuzz subsetter
(Debian: ``libharfbuzz-subset0``) it falls back to fontTools and warns, which costs
about a third of a second per face per document.
"""

from __future__ import annotations

import functools
import hashlib
import logging
from typing import Any, ClassVar

from nbcast.delivery.renderers._determinism import source_date_epoch
from nbcast.delivery.renderers._fit import fit_css, fit_tables
from nbcast.delivery.renderers._pages import page_geometry
from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.renderers.html import HtmlRenderer
from nbcast.delivery.report import ReportInfo
from nbcast.errors import RenderError

__all__ = ["PdfRenderer", "data_url_fetcher", "html_to_pdf"]


@functools.cache
def _fetcher_class() -> Any:
    from weasyprint.urls import URLFetcher

    class DataUrlFetcher(URLFetcher):  # type: ignore[misc]
        """Serves ``data:`` URLs, refuses the rest and lists them in ``refused``."""

        def __init__(self) -> None:
            super().__init__(allowed_protocols=("data",), allow_redirects=False)
            self.refused: list[str] = []

        def fetch(self, url: str, headers: Any = None) -> Any:
            if not url.lower().startswith("data:"):
                self.refused.append(url)
                raise ValueError(f"nbcast renders fetch nothing but data: URLs ({url[:80]})")
            return super().fetch(url, headers)

    return DataUrlFetcher


def data_url_fetcher() -> Any:
    """A new WeasyPrint URL fetcher that serves ``data:`` URLs only (module docstring).

    Its ``refused`` attribute lists every other URL it was asked for, in order.
    """
    return _fetcher_class()()


def _quiet_weasyprint() -> None:
    # WeasyPrint warns for every refused URL and, without HarfBuzz-subset, for every
    # font it subsets, on every render; unless the application set its level, keep
    # its errors only.
    logger = logging.getLogger("weasyprint")
    if logger.level == logging.NOTSET:
        logger.setLevel(logging.ERROR)


def html_to_pdf(
    html: str, report: ReportInfo, *, page_size: str = "A4", fetcher: Any = None
) -> tuple[bytes, int]:
    """Lay out ``html`` and return the PDF bytes and its page count (module docstring)."""
    import weasyprint

    page = page_geometry(page_size)
    fetcher = fetcher if fetcher is not None else data_url_fetcher()
    _quiet_weasyprint()
    try:
        fitted = fit_tables(html, page)
        stylesheet = weasyprint.CSS(string=fit_css(page), url_fetcher=fetcher)
        document = weasyprint.HTML(string=fitted, url_fetcher=fetcher, media_type="print").render(
            stylesheets=[stylesheet]
        )
        stamp = report.fire_at.isoformat()
        document.metadata.created = stamp
        document.metadata.modified = stamp
        document.metadata.title = report.title
        document.metadata.generator = "nbcast"
        identifier = hashlib.sha256(html.encode("utf-8")).hexdigest()[:32].encode("ascii")
        with source_date_epoch(report.source_date_epoch):
            data = document.write_pdf(pdf_identifier=identifier)
    except RenderError:
        raise
    except Exception as exc:  # WeasyPrint raises whatever its layout hits
        raise RenderError(f"pdf: WeasyPrint could not lay out the report: {exc}") from exc
    return bytes(data), len(document.pages)


class PdfRenderer(Renderer):
    """The ``html`` rendition as a paged PDF (module docstring)."""

    name: ClassVar[str] = "pdf"
    media_type: ClassVar[str] = "application/pdf"
    extension: ClassVar[str] = "pdf"

    def __init__(
        self, *, page_size: str = "A4", include_input: bool = False, include_stderr: bool = False
    ) -> None:
        page_geometry(page_size)  # refuse a size it does not know now, not at render
        self.page_size = page_size
        self._html = HtmlRenderer(include_input=include_input, include_stderr=include_stderr)

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The PDF bytes."""
        return self.render_with_pages(notebook, report)[0]

    def render_with_pages(self, notebook: Any, report: ReportInfo) -> tuple[bytes, int]:
        """The PDF bytes and its page count (the benchmark's per-page figure)."""
        html = self._html.render_html(notebook, report)
        return html_to_pdf(html, report, page_size=self.page_size)
