"""The ``html`` renderer: nbconvert's HTMLExporter, made safe, self-contained and stable.

What it produces is one self-contained page:

- **no code** by default (``exclude_input``; ``HtmlRenderer(include_input=True)``
  shows it), no ``In [3]:``/``Out [3]:`` prompts, and no ``stderr`` streams
  (warnings are for the author, not the reader; ``include_stderr=True`` keeps them).
  The usual tags are honoured: ``remove_cell``, ``remove_input``, ``remove_output``.
- **no scripts and no fetches**: the template (nbconvert's ``lab`` one, extended) has
  no require.js, MathJax, Mermaid or widget ``<script src=…>`` tags; JavaScript and
  widget outputs are not rendered (their text/HTML fallback is); the exporter runs
  with ``sanitize_html=True`` and a report-friendly allowlist, the page is swept once
  more and it carries a strict Content-Security-Policy (see :mod:`._sanitize`).
  Consequence: LaTeX in Markdown stays as typed (no MathJax), and pandas Styler
  colours (a ``<style>`` element) are dropped while the table stays.
- **a header**: the report's name, version, slot and when the run finished, in the
  definition's time zone, and — when the report is delivered late — a staleness
  banner: "This report is late by 1 h 20 min".
- **its own small stylesheet** (:mod:`._styles`) instead of JupyterLab's, with the
  print rules the ``pdf`` renderer relies on.

Determinism: nbconvert's only random ids (``uuid4()`` in the JavaScript and widget
blocks) are in blocks this template replaces; cell ids, which papermill makes random
for its injected-parameters cell, are replaced by ``cell-<position>``; nothing is
taken from notebook metadata (papermill's timings, kernel versions) except what the
author wrote; every time shown comes from the :class:`ReportInfo`. So the same
executed notebook gives the same bytes, and so do two executions whose outputs are
the same.
"""

from __future__ import annotations

import copy
import html as html_escaping
from datetime import datetime, timedelta
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nbcast.delivery.renderers._sanitize import (
    CONTENT_SECURITY_POLICY,
    clean_fragment,
    neutralise_document,
)
from nbcast.delivery.renderers._styles import REPORT_CSS
from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.report import ReportInfo
from nbcast.errors import RenderError

__all__ = ["HtmlRenderer", "describe_delay"]

_TEMPLATE_FILE = "nbcast_report.html.j2"
_TEMPLATE = """
{%- extends 'index.html.j2' -%}
{%- block html_head -%}
<meta http-equiv="Content-Security-Policy" content="{{ resources.nbcast.csp }}">
{{ super() }}
{%- endblock html_head -%}
{%- block html_head_js -%}{%- endblock html_head_js -%}
{%- block jupyter_widgets -%}{%- endblock jupyter_widgets -%}
{%- block html_head_js_mathjax -%}{%- endblock html_head_js_mathjax -%}
{%- block html_head_js_mermaidjs -%}{%- endblock html_head_js_mermaidjs -%}
{%- block notebook_css -%}
<style type="text/css">{{ resources.nbcast.css }}</style>
{%- endblock notebook_css -%}
{%- block body_header -%}
{{ super() }}
{{ resources.nbcast.header }}
{%- endblock body_header -%}
{%- block data_javascript -%}{%- endblock data_javascript -%}
{%- block data_widget_view -%}{%- endblock data_widget_view -%}
{%- block footer -%}
</html>
{%- endblock footer -%}
"""

# Highest first; no JavaScript, no widget views: their other representations win.
_DISPLAY_PRIORITY = [
    "text/html",
    "text/markdown",
    "image/svg+xml",
    "image/png",
    "image/jpeg",
    "text/latex",
    "text/plain",
]


def describe_delay(delay: timedelta) -> str:
    """``1 h 20 min``, ``2 days 3 h``, ``45 min``; under a minute: ``less than a minute``."""
    minutes = int(delay.total_seconds() // 60)
    if minutes < 1:
        return "less than a minute"
    days, rest = divmod(minutes, 24 * 60)
    hours, minutes = divmod(rest, 60)
    parts = []
    if days:
        parts.append(f"{days} day" if days == 1 else f"{days} days")
    if hours:
        parts.append(f"{hours} h")
    if minutes and not days:
        parts.append(f"{minutes} min")
    return " ".join(parts)


def _local_time(instant: datetime, zone: str) -> str:
    try:
        tz = ZoneInfo(zone)
    except (ZoneInfoNotFoundError, ValueError):
        tz = ZoneInfo("UTC")
    local = instant.astimezone(tz)
    return f"{local:%Y-%m-%d %H:%M} {local.tzname()}"


def _header(report: ReportInfo) -> str:
    """The page header and, for a late report, the staleness banner (escaped HTML).

    A slot's report names its version and slot, nothing about the run that made it, so
    a dry run of the slot (:mod:`nbcast.scheduler.trial`) and a rerun render the same
    bytes; a manual run, which has no slot, names itself and when it finished."""
    e = html_escaping.escape
    if report.slot_key:
        meta = f"Version {report.version} · slot {report.slot_key}"
    else:
        meta = (
            f"Version {report.version} · manual run {report.run_id} · "
            f"run finished {_local_time(report.finished_at, report.timezone)}"
        )
    parts = [
        '<header class="nbcast-header">',
        f'<h1 class="nbcast-title">{e(report.definition)}</h1>',
        f'<p class="nbcast-meta">{e(meta)}</p>',
    ]
    if report.description:
        parts.append(f'<p class="nbcast-description">{e(report.description)}</p>')
    parts.append("</header>")
    if report.late_by is not None:
        parts.append(
            '<div class="nbcast-stale" role="alert">'
            f"This report is late by {e(describe_delay(report.late_by))}: it shows the data "
            f"of {e(_local_time(report.fire_at, report.timezone))}.</div>"
        )
    return "\n".join(parts)


class HtmlRenderer(Renderer):
    """A self-contained, script-free HTML page of the executed notebook (module docstring).

    ``include_input`` shows the code cells; ``include_stderr`` keeps ``stderr`` streams.
    """

    name: ClassVar[str] = "html"
    media_type: ClassVar[str] = "text/html"
    extension: ClassVar[str] = "html"

    def __init__(self, *, include_input: bool = False, include_stderr: bool = False) -> None:
        self.include_input = include_input
        self.include_stderr = include_stderr
        self._exporter: Any = None

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The page as UTF-8 bytes."""
        return self.render_html(notebook, report).encode("utf-8")

    def render_html(self, notebook: Any, report: ReportInfo) -> str:
        """The page as text (what :class:`~nbcast.delivery.renderers.pdf.PdfRenderer` lays out)."""
        prepared = self._prepare(notebook, report)
        resources = {
            "metadata": {"name": report.title},
            "nbcast": {
                "csp": CONTENT_SECURITY_POLICY,
                "css": REPORT_CSS,
                "header": _header(report),
            },
        }
        try:
            body, _ = self._html_exporter().from_notebook_node(prepared, resources=resources)
        except Exception as exc:  # nbconvert raises anything from its templates and filters
            raise RenderError(f"html: nbconvert could not render the notebook: {exc}") from exc
        return neutralise_document(body)

    def _prepare(self, notebook: Any, report: ReportInfo) -> Any:
        """A copy with stable cell ids, no stderr (unless asked) and the report's title."""
        import nbformat

        try:
            prepared = nbformat.from_dict(copy.deepcopy(dict(notebook)))
        except Exception as exc:
            raise RenderError(f"html: not a notebook: {exc}") from exc
        if not isinstance(prepared.get("cells"), list):
            raise RenderError("html: not a notebook: it has no list of cells")
        prepared.setdefault("metadata", {})
        prepared.metadata["title"] = report.title
        for position, cell in enumerate(prepared.cells):
            if "id" in cell:
                cell["id"] = f"cell-{position}"
            if not self.include_stderr and cell.get("outputs"):
                cell["outputs"] = [
                    output
                    for output in cell["outputs"]
                    if not (
                        output.get("output_type") == "stream" and output.get("name") == "stderr"
                    )
                ]
        return prepared

    def _html_exporter(self) -> Any:
        if self._exporter is None:
            from jinja2 import DictLoader
            from nbconvert import HTMLExporter
            from traitlets.config import Config

            config = Config()
            config.NbConvertBase.display_data_priority = _DISPLAY_PRIORITY
            config.CSSHTMLHeaderPreprocessor.enabled = self.include_input
            config.TagRemovePreprocessor.enabled = True
            config.TagRemovePreprocessor.remove_cell_tags = ["remove_cell"]
            config.TagRemovePreprocessor.remove_input_tags = ["remove_input"]
            config.TagRemovePreprocessor.remove_all_outputs_tags = ["remove_output"]
            self._exporter = HTMLExporter(
                config=config,
                template_name="lab",
                template_file=_TEMPLATE_FILE,
                extra_loaders=[DictLoader({_TEMPLATE_FILE: _TEMPLATE})],
                filters={"clean_html": clean_fragment},
                sanitize_html=True,
                exclude_input=not self.include_input,
                exclude_input_prompt=True,
                exclude_output_prompt=True,
                anchor_link_text="",
            )
        return self._exporter
