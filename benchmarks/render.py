"""Renderer speed on the example reports, as JSON: HTML, PDF per page, XLSX, CSV.

Run ``python benchmarks/render.py`` (``--repeat N``, default 5). Each example in
``notebooks/examples`` is first executed once with papermill against the example lake
(generated with ``notebooks/examples/lake/generate.py`` when missing), untimed. An
example that does not yet record tables with ``nbcast.output.table`` gets one extra
cell, tagged ``remove_cell`` (so it is not in the HTML or PDF), that records every
DataFrame left in its namespace — the workload the spreadsheet and CSV renderers
would have. A synthetic report joins them, ``synthetic_wide``: tables of 6, 25 and 60
columns (40 rows each) between paragraphs, the workload of the PDF renderer's table
fitting (a portrait page, a landscape page, column groups). Then each renderer renders
each executed notebook ``repeat`` times.

Every figure is the median of the renders, wall-clock and CPU (``process_time``; on
a shared machine the CPU figure is the steadier one). Beside the HTML renderer is the
reference: plain ``nbconvert --to html`` (``HTMLExporter()`` with its defaults) on
the same notebook, and the ratio of the two. The target is ``pdf_ms_per_page`` ≤ 1000.
Beside the PDF figures: ``pdf_fit_ms``, the part of a PDF render spent estimating and
marking its tables (:mod:`nbcast.delivery.renderers._fit`), and
``pdf_landscape_pages``, how many pages it turned.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = REPO / "notebooks" / "examples"
LAKE = EXAMPLES / "lake"
TARGET_MS_PER_PAGE = 1000.0

RECORD_TABLES = """\
import pandas as _pd
from nbcast import output as _output

for _name, _value in list(globals().items()):
    if isinstance(_value, _pd.DataFrame) and not _name.startswith("_"):
        if _output.TABLE_NAME_PATTERN.fullmatch(_name[:31]):
            _output.table(_value, _name[:31])
"""


def synthetic_wide() -> Any:
    """A notebook whose outputs are tables of 6, 25 and 60 columns, as recorded by
    ``nbcast.output.table`` (built here, not executed: its outputs are the point)."""
    import nbformat
    import pandas as pd

    from nbcast.output import TABLE_MIME_TYPE
    from nbcast.output.tables import encode_table

    cells = [nbformat.v4.new_markdown_cell("# Synthetic wide tables\n\nThree tables.")]
    for columns in (6, 25, 60):
        frame = pd.DataFrame(
            {f"metric_{c:02d}": [1000.25 * (r + 1) + c for r in range(40)] for c in range(columns)},
            index=pd.Index([f"row {r:02d}" for r in range(40)], name="row"),
        )
        with pd.option_context("display.max_columns", None, "display.max_rows", None):
            html = frame._repr_html_()
        name = f"wide_{columns}"
        output = nbformat.v4.new_output(
            "display_data",
            data={"text/html": html, TABLE_MIME_TYPE: encode_table(frame, name)},
            metadata={"nbcast": {"table": name}},
        )
        cells.append(nbformat.v4.new_markdown_cell(f"## {columns} columns\n\nSome text."))
        cells.append(nbformat.v4.new_code_cell("", outputs=[output]))
    return nbformat.v4.new_notebook(cells=cells)


def landscape_pages(pdf: bytes) -> int | None:
    """How many pages are wider than tall (None without pypdf, the dev extra's)."""
    try:
        import io

        from pypdf import PdfReader
    except ImportError:
        return None
    pages = PdfReader(io.BytesIO(pdf)).pages
    return sum(1 for page in pages if page.mediabox.width > page.mediabox.height)


def _ensure_lake() -> None:
    if not (LAKE / "orders.parquet").is_file():
        subprocess.run([sys.executable, str(LAKE / "generate.py"), "-q"], check=True)


def execute(example: Path, folder: Path) -> Any:
    """Execute a copy of ``example`` with papermill (untimed); return the notebook."""
    import nbformat
    import papermill

    notebook = nbformat.read(example, as_version=4)
    if "output.table" not in json.dumps(notebook):
        cell = nbformat.v4.new_code_cell(RECORD_TABLES)
        cell.metadata["tags"] = ["remove_cell"]
        notebook.cells.append(cell)
    source = folder / example.name
    target = folder / f"{example.stem}.executed.ipynb"
    nbformat.write(notebook, source)
    papermill.execute_notebook(
        str(source), str(target), kernel_name="python3", progress_bar=False, cwd=str(folder)
    )
    return nbformat.read(target, as_version=4)


def timed(render: Callable[[], Any], repeat: int) -> tuple[float, float, Any]:
    """Median wall and CPU milliseconds of ``repeat`` calls, after one warm-up call."""
    result = render()
    walls, cpus = [], []
    for _ in range(repeat):
        wall, cpu = time.perf_counter(), time.process_time()
        result = render()
        walls.append((time.perf_counter() - wall) * 1000)
        cpus.append((time.process_time() - cpu) * 1000)
    return statistics.median(walls), statistics.median(cpus), result


def measure(notebook: Any, repeat: int) -> dict[str, Any]:
    """Time every renderer, and the nbconvert reference, on one executed notebook."""
    import copy

    from nbconvert import HTMLExporter

    from nbcast.delivery.renderers.csv import CsvRenderer
    from nbcast.delivery.renderers.html import HtmlRenderer
    from nbcast.delivery.renderers.pdf import PdfRenderer
    from nbcast.delivery.renderers.xlsx import XlsxRenderer
    from nbcast.delivery.report import ReportInfo
    from nbcast.delivery.tables import read_tables

    fire_at = datetime(2026, 6, 15, 5, 0, tzinfo=UTC)
    report = ReportInfo(
        tenant="bench",
        definition=notebook.metadata.get("nbcast", {}).get("name", "example"),
        version=1,
        run_id=1,
        slot_key="2026-06-15T07:00",
        fire_at=fire_at,
        finished_at=fire_at,
        timezone="Europe/Berlin",
    )
    shown = copy.deepcopy(notebook)
    shown.cells = [c for c in shown.cells if "remove_cell" not in c.metadata.get("tags", [])]
    reference = HTMLExporter()
    ref_ms, ref_cpu, _ = timed(lambda: reference.from_notebook_node(shown), repeat)
    html = HtmlRenderer()
    html_ms, html_cpu, page = timed(lambda: html.render(notebook, report), repeat)
    pdf = PdfRenderer()
    pdf_ms, pdf_cpu, (pdf_bytes, pages) = timed(
        lambda: pdf.render_with_pages(notebook, report), repeat
    )
    fit_ms = None
    try:
        from nbcast.delivery.renderers._fit import fit_tables
        from nbcast.delivery.renderers._pages import page_geometry
    except ImportError:  # a renderer from before the table fitting: nothing to time
        pass
    else:
        text, geometry = html.render_html(notebook, report), page_geometry(pdf.page_size)
        fit_ms, _, _ = timed(lambda: fit_tables(text, geometry), repeat)
    figures: dict[str, Any] = {
        "html_ms": round(html_ms, 1),
        "html_cpu_ms": round(html_cpu, 1),
        "html_kb": round(len(page) / 1024, 1),
        "reference_nbconvert_html_ms": round(ref_ms, 1),
        "reference_nbconvert_html_cpu_ms": round(ref_cpu, 1),
        "html_vs_reference": round(html_ms / ref_ms, 2),
        "pdf_pages": pages,
        "pdf_ms": round(pdf_ms, 1),
        "pdf_ms_per_page": round(pdf_ms / pages, 1),
        "pdf_cpu_ms_per_page": round(pdf_cpu / pages, 1),
        "pdf_fit_ms": None if fit_ms is None else round(fit_ms, 1),
        "pdf_landscape_pages": landscape_pages(pdf_bytes),
        "tables": len(read_tables(notebook)),
    }
    if figures["tables"]:
        xlsx_ms, xlsx_cpu, _ = timed(lambda: XlsxRenderer().render(notebook, report), repeat)
        csv_ms, csv_cpu, _ = timed(lambda: CsvRenderer().render(notebook, report), repeat)
        figures.update(
            xlsx_ms=round(xlsx_ms, 1),
            xlsx_cpu_ms=round(xlsx_cpu, 1),
            csv_ms=round(csv_ms, 1),
            csv_cpu_ms=round(csv_cpu, 1),
        )
    return figures


def main() -> None:
    """Print the figures as one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    _ensure_lake()
    os.environ.setdefault("NBCAST_LAKE", str(LAKE))
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="nbcast-bench-render-") as folder:
        for example in sorted(EXAMPLES.glob("*.ipynb")):
            notebook = execute(example, Path(folder))
            results[example.stem] = measure(notebook, args.repeat)
    results["synthetic_wide"] = measure(synthetic_wide(), args.repeat)
    worst = max(figures["pdf_ms_per_page"] for figures in results.values())
    worst_cpu = max(figures["pdf_cpu_ms_per_page"] for figures in results.values())
    print(
        json.dumps(
            {
                "repeat": args.repeat,
                "statistic": "median",
                "cpus": os.cpu_count(),
                "load_average_1m": round(os.getloadavg()[0], 2),
                "examples": results,
                "worst_pdf_ms_per_page": worst,
                "worst_pdf_cpu_ms_per_page": worst_cpu,
                "target_pdf_ms_per_page": TARGET_MS_PER_PAGE,
                "meets_target": worst <= TARGET_MS_PER_PAGE,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
