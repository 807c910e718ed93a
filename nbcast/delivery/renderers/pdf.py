"""The ``pdf`` renderer: the ``html`` rendition laid out by WeasyPrint.

The page is exactly what :class:`~nbcast.delivery.renderers.html.HtmlRenderer`
produces; its stylesheet's print rules do the paged layout: A4 by default
(``PdfRenderer(page_size="letter")``, ``"A4 landscape"``, …), margins, "Page X of Y"
and the report's name in the footer, table header rows repeated on every page
(``thead {display: table-header-group}``), rows never split across pages, images
scaled to the page width.

Nothing is fetched: WeasyPrint gets a URL fetcher (:func:`data_url_fetcher`) that
serves ``data:`` URLs and refuses everything else — ``file:``, ``http(s):``,
relative paths (there is no base URL) — so a notebook cannot make the renderer read
a local file or reach the network, even if an ``<img>`` or ``<link>`` got past the
sanitizer. WeasyPrint runs no JavaScript, and the PDF gets no actions.

Determinism: WeasyPrint 6x writes no dates unless asked; this renderer sets the
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
import re
from typing import Any, ClassVar

from nbcast.delivery.renderers._determinism import source_date_epoch
from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.renderers.html import HtmlRenderer
from nbcast.delivery.report import ReportInfo
from nbcast.errors import RenderError

__all__ = ["PdfRenderer", "data_url_fetcher", "html_to_pdf"]

_PAGE_SIZE = re.compile(
    r"[A-Za-z0-9]+( (portrait|landscape))?|\d+(\.\d+)?(mm|cm|in) \d+(\.\d+)?(mm|cm|in)"
)


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

    if _PAGE_SIZE.fullmatch(page_size) is None:
        raise RenderError(f"pdf: unsupported page size {page_size!r}")
    fetcher = fetcher if fetcher is not None else data_url_fetcher()
    page = weasyprint.CSS(string=f"@page {{ size: {page_size}; }}", url_fetcher=fetcher)
    _quiet_weasyprint()
    try:
        document = weasyprint.HTML(string=html, url_fetcher=fetcher, media_type="print").render(
            stylesheets=[page]
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
        if _PAGE_SIZE.fullmatch(page_size) is None:
            raise RenderError(f"pdf: unsupported page size {page_size!r}")
        self.page_size = page_size
        self._html = HtmlRenderer(include_input=include_input, include_stderr=include_stderr)

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The PDF bytes."""
        return self.render_with_pages(notebook, report)[0]

    def render_with_pages(self, notebook: Any, report: ReportInfo) -> tuple[bytes, int]:
        """The PDF bytes and its page count (the benchmark's per-page figure)."""
        html = self._html.render_html(notebook, report)
        return html_to_pdf(html, report, page_size=self.page_size)
