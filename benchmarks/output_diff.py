"""Output diff speed and size, as JSON: ``nbcast runs diff`` beside plain ``nbdiff``.

Run ``python -m benchmarks.output_diff`` (``--repeat N``, default 3). Each case is a
pair of executed reports as papermill writes them — execution counts, per-cell
papermill timings, the injected-parameters cell, each table as a recorded payload with
its HTML and plain-text forms, a PNG chart — for two consecutive days whose figures
differ:

- ``daily_sales``: the example report's shape: a headline, a 4-row region table, a
  15-row top-products table, an hourly table of 96 rows, two charts;
- ``wide_tables``: 10 recorded tables of 2,000 rows and 8 columns each;
- ``many_cells``: 300 code cells, each printing a line and showing a small table.

For each case, ``nbcast_s`` is the best of ``repeat`` runs of
:func:`nbcast.views.output_diff.compare_outputs` (what ``nbcast runs diff`` computes)
plus its text (``lines``), and ``nbdiff_s`` of nbdime's ``diff_notebooks`` and its
pretty printer (what ``nbdiff a.ipynb b.ipynb`` prints); ``*_lines`` count the lines a
reader gets from each; ``nbdiff_changes`` counts nbdiff's changes (its ``##`` entries)
and ``nbdiff_volatile_changes`` those about execution counts, metadata (papermill's
timings) or the injected-parameters cell (the first) — nbcast shows none of these by
construction.
``speedup`` is nbdiff's time over nbcast's.
"""

from __future__ import annotations

import argparse
import base64
import copy
import io
import json
import random
import time
from typing import Any

import pandas as pd

from nbcast.output import table_output
from nbcast.views.output_diff import compare_outputs


def _cell(index: int, outputs: list[dict[str, Any]], day: int) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": f"cell-{index}",
        "execution_count": index + 1,
        "metadata": {
            "papermill": {
                "duration": round(random.random(), 6),
                "start_time": f"2026-11-0{day}T06:00:{index % 60:02d}.{random.randint(0, 999999)}",
                "end_time": f"2026-11-0{day}T06:00:{index % 60:02d}.{random.randint(0, 999999)}",
                "status": "completed",
                "exception": False,
            },
            "execution": {
                "iopub.execute_input": f"2026-11-0{day}T06:00:00.{random.randint(0, 9)}Z"
            },
        },
        "outputs": outputs,
        "source": f"# cell {index}\nresult = query({index})\n",
    }


def _png(seed: int) -> str:
    rng = random.Random(seed)
    return base64.b64encode(bytes(rng.randrange(256) for _ in range(20_000))).decode()


def _report(
    day: int, tables: list[tuple[str, int, int]], cells: int, charts: int
) -> dict[str, Any]:
    rng = random.Random(day)
    out = [
        {
            "cell_type": "code",
            "id": f"injected-{day}",
            "execution_count": 1,
            "metadata": {"tags": ["injected-parameters"]},
            "outputs": [],
            "source": f'report_date = "2026-11-0{day}"\n',
        },
        _cell(
            1,
            [
                {
                    "output_type": "display_data",
                    "data": {
                        "text/markdown": f"### Day {day}: revenue {rng.randint(1000, 9999):,}"
                    },
                    "metadata": {},
                }
            ],
            day,
        ),
    ]
    for n, (name, rows, columns) in enumerate(tables):
        frame = pd.DataFrame(
            {"key": [f"k{i}" for i in range(rows)]}
            | {
                f"v{c}": [round(rng.random() * 1000, 2) for _ in range(rows)]
                for c in range(columns - 1)
            }
        )
        out.append(_cell(10 + n, [table_output(frame, name)], day))
    for n in range(cells):
        frame = pd.DataFrame({"k": ["a", "b"], "v": [rng.randint(0, 9), rng.randint(0, 9)]})
        stream = {
            "output_type": "stream",
            "name": "stdout",
            "text": f"step {n}: {rng.random():.4f}\n",
        }
        out.append(_cell(100 + n, [stream, table_output(frame, f"t{n}")], day))
    for n in range(charts):
        image = {
            "output_type": "display_data",
            "data": {"image/png": _png(day * 100 + n), "text/plain": "<Figure>"},
            "metadata": {},
        }
        out.append(_cell(1000 + n, [image], day))
    return {
        "cells": out,
        "metadata": {"papermill": {"duration": rng.random() * 10, "start_time": f"2026-11-0{day}"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


CASES = {
    "daily_sales": (
        [("revenue_by_region", 4, 9), ("top_products", 15, 7), ("hourly", 96, 3)],
        0,
        2,
    ),
    "wide_tables": ([(f"table{i}", 2000, 8) for i in range(10)], 0, 0),
    "many_cells": ([], 300, 0),
}


def _nbdiff(a: dict[str, Any], b: dict[str, Any]) -> str:
    import nbformat
    from nbdime import diff_notebooks
    from nbdime.prettyprint import PrettyPrintConfig, pretty_print_diff

    na, nb = nbformat.from_dict(copy.deepcopy(a)), nbformat.from_dict(copy.deepcopy(b))
    out = io.StringIO()
    config = PrettyPrintConfig(out=out, use_git=False, use_color=False)  # nbdiff, piped
    pretty_print_diff(na, diff_notebooks(na, nb), "", config)
    return out.getvalue()


def _best(repeat: int, work: Any) -> tuple[float, Any]:
    best, result = float("inf"), None
    for _ in range(repeat):
        started = time.perf_counter()
        result = work()
        best = min(best, time.perf_counter() - started)
    return best, result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    random.seed(7)
    results = {}
    for name, (tables, cells, charts) in CASES.items():
        a, b = _report(1, tables, cells, charts), _report(2, tables, cells, charts)
        nbcast_s, lines = _best(args.repeat, lambda a=a, b=b: compare_outputs(a, b).lines())
        nbdiff_s, text = _best(args.repeat, lambda a=a, b=b: _nbdiff(a, b))
        shown = text.splitlines()
        entries = [line for line in shown if line.startswith("## ")]
        volatile = [
            line
            for line in entries
            if any(w in line for w in ("execution_count", "/metadata", "/cells/0/"))
        ]
        results[name] = {
            "nbcast_s": round(nbcast_s, 4),
            "nbcast_lines": len(lines),
            "nbdiff_s": round(nbdiff_s, 4),
            "nbdiff_lines": len(shown),
            "nbdiff_changes": len(entries),
            "nbdiff_volatile_changes": len(volatile),
            "speedup": round(nbdiff_s / nbcast_s, 1) if nbcast_s else None,
        }
    print(
        json.dumps({"benchmark": "output_diff", "repeat": args.repeat, "cases": results}, indent=1)
    )


if __name__ == "__main__":
    main()
