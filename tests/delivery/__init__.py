"""Delivery-plane tests, and the one executed sample notebook they share.

:func:`executed_sample` runs :data:`SAMPLE_CELLS` once per test process with
papermill on the installed ``python3`` kernel (so the notebook has papermill's
injected-parameters cell, with its random id, as a real run has) and hands out
copies. It holds every kind of output the renderers must handle: tables recorded
with ``nbcast.output.table`` (mixed types, a long one, an empty one), Markdown, an
image, ``stdout`` and ``stderr`` streams, and hostile HTML, JavaScript and Markdown.
"""

from __future__ import annotations

import base64
import copy
import functools
import json
import struct
import tempfile
import zlib
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

from nbcast.delivery.report import ReportInfo

MIXED_SOURCE = """
import datetime as dt
import numpy as np
import pandas as pd

mixed = pd.DataFrame(
    {
        "region": ["EMEA", None, "APAC"],
        "orders": [120, 0, 7],
        "revenue": [1234.5, np.nan, 0.25],
        "active": [True, False, True],
        "first_order": pd.to_datetime(["2026-06-15 07:30:00", None, "2026-06-14 23:59:59"]),
        "day": [dt.date(2026, 6, 15), None, dt.date(2026, 6, 14)],
        "returns": pd.array([3, None, 1], dtype="Int64"),
    }
)
"""
"""Builds ``mixed``: run in the kernel and in the tests, so both have the same frame."""

LONG_ROWS = 150

HOSTILE_HTML = (
    "<p>hostile output</p>"
    "<script>alert('script-tag')</script>"
    '<img src="x" onerror="alert(\'onerror\')">'
    "<a href=\"javascript:alert('js-url')\">click me</a>"
    '<iframe src="http://127.0.0.1:9/frame"></iframe>'
    '<img src="file:///etc/passwd" alt="passwd">'
    '<link rel="stylesheet" href="http://127.0.0.1:9/x.css">'
    "<style>body { background: url(http://127.0.0.1:9/bg.png) }</style>"
    "<svg onload=\"alert('svg')\"><script>alert('svg-script')</script></svg>"
    '<div style="background-image: url(http://127.0.0.1:9/y.png)">styled div</div>'
    '<object data="http://127.0.0.1:9/o.swf"></object>'
    '<form action="http://127.0.0.1:9/steal"><input name="q"></form>'
    "<table><thead><tr><th>kept</th></tr></thead><tbody><tr><td>cell</td></tr></tbody></table>"
)


def wide_png(width: int = 1600, height: int = 40) -> str:
    """A gradient PNG wider than an A4 page, base64-encoded (no imaging library needed)."""
    rows = b"".join(
        b"\x00" + bytes(value for x in range(width) for value in (x % 256, (y * 6) % 256, 160))
        for y in range(height)
    )

    def chunk(kind: bytes, data: bytes) -> bytes:
        crc = zlib.crc32(kind + data) & 0xFFFFFFFF
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc)

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    png = (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", header)
        + chunk(b"IDAT", zlib.compress(rows, 9))
        + chunk(b"IEND", b"")
    )
    return base64.b64encode(png).decode("ascii")


SAMPLE_CELLS: list[tuple[str, str, list[str]]] = [
    ("markdown", "# Sample report\n\n| a | b |\n|---|---|\n| 1 | 2 |\n", []),
    ("code", f"rows = {LONG_ROWS}\n", ["parameters"]),
    (
        "code",
        "from nbcast import output\n" + MIXED_SOURCE + '\noutput.table(mixed, "mixed types")\n',
        [],
    ),
    (
        "code",
        "long = pd.DataFrame({'long_id': range(rows), "
        "'long_label': [f'row {i}' for i in range(rows)], "
        "'long_value': [i * 1.5 for i in range(rows)]})\n"
        "with pd.option_context('display.max_rows', 1000):\n"
        "    output.table(long, 'long')\n"
        "output.table(long.head(0), 'empty')\n",
        [],
    ),
    (
        "code",
        "from IPython.display import HTML, Image, Javascript, Markdown, display\n"
        f"display(HTML({HOSTILE_HTML!r}))\n"
        "display(Javascript(\"alert('javascript-output')\"))\n"
        "display(Markdown(\"[md link](javascript:alert('md'))\\n\\n\"\n"
        "                 \"<script>alert('md-script')</script>\"))\n"
        "import base64\n"
        f"display(Image(data=base64.b64decode({wide_png()!r}), format='png'))\n",
        [],
    ),
    (
        "code",
        "import sys\nprint('plain stdout text')\nprint('a warning on stderr', file=sys.stderr)\n",
        [],
    ),
]


def sample_notebook() -> dict[str, Any]:
    """The unexecuted sample notebook, as nbformat 4.5 JSON."""
    cells = []
    for index, (kind, source, tags) in enumerate(SAMPLE_CELLS):
        cell: dict[str, Any] = {
            "cell_type": kind,
            "id": f"sample-{index}",
            "metadata": {"tags": tags} if tags else {},
            "source": source,
        }
        if kind == "code":
            cell.update(outputs=[], execution_count=None)
        cells.append(cell)
    return {
        "cells": cells,
        "metadata": {
            "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}
        },
        "nbformat": 4,
        "nbformat_minor": 5,
    }


@functools.cache
def _executed() -> Any:
    import nbformat
    import papermill

    with tempfile.TemporaryDirectory(prefix="nbcast-render-") as folder:
        source = Path(folder) / "sample.ipynb"
        target = Path(folder) / "sample.out.ipynb"
        source.write_text(json.dumps(sample_notebook()))
        papermill.execute_notebook(
            str(source),
            str(target),
            parameters={"rows": LONG_ROWS},
            kernel_name="python3",
            progress_bar=False,
            cwd=folder,
        )
        return nbformat.read(target, as_version=4)


def executed_sample() -> Any:
    """A fresh copy of the executed sample notebook (executed once per process)."""
    return copy.deepcopy(_executed())


def make_report(**changes: Any) -> ReportInfo:
    """A :class:`ReportInfo` for a scheduled run, with ``changes`` applied."""
    fields: dict[str, Any] = {
        "tenant": "acme",
        "definition": "daily-sales",
        "version": 3,
        "run_id": 42,
        "slot_key": "2026-06-15T07:00",
        "fire_at": datetime(2026, 6, 15, 5, 0, tzinfo=UTC),
        "finished_at": datetime(2026, 6, 15, 5, 2, 13, tzinfo=UTC),
        "timezone": "Europe/Berlin",
        "late_by": None,
    }
    fields.update(changes)
    return ReportInfo(**fields)


LATE = timedelta(hours=1, minutes=20)
