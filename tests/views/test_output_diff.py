"""Output diffs (:mod:`nbcast.views.output_diff`): two executed reports compared as a
reader compares them — tables by name and key with numeric deltas, text by cell,
images by digest — ignoring everything volatile, and bounded against hostile input."""

from __future__ import annotations

import base64
import copy
import json
from typing import Any

import pandas as pd
import pytest

from nbcast.output import table_output
from nbcast.output.tables import TABLE_MIME_TYPE
from nbcast.views.output_diff import MAX_CHANGES, MAX_IMAGES, compare_outputs

PNG_A = base64.b64encode(b"\x89PNG a").decode()
PNG_B = base64.b64encode(b"\x89PNG b").decode()


def code(ident: str, outputs: list[dict[str, Any]], count: int = 1) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": ident,
        "execution_count": count,
        "metadata": {"papermill": {"duration": 0.5, "start_time": "2026-11-02T06:00:01"}},
        "outputs": outputs,
        "source": "...",
    }


def report(day: str, revenue: list[float], top: list[str], chart: str = PNG_A) -> dict[str, Any]:
    regions = pd.DataFrame(
        {
            "region": ["EMEA", "AMER", "APAC"][: len(revenue)],
            "revenue": revenue,
            "orders": [3, 4, 5][: len(revenue)],
        }
    )
    products = pd.DataFrame({"rank": range(1, len(top) + 1), "sku": top})
    return {
        "cells": [
            {"cell_type": "markdown", "id": "title", "metadata": {}, "source": "# Daily sales"},
            {
                "cell_type": "code",
                "id": "injected",
                "metadata": {"tags": ["injected-parameters"]},
                "outputs": [],
                "source": f'report_date = "{day}"',
            },
            code("when", [{"output_type": "stream", "name": "stdout", "text": [f"Day: {day}\n"]}]),
            code("regions", [table_output(regions, "by_region")], count=7),
            code("top", [table_output(products, "top_products")], count=8),
            code(
                "chart",
                [
                    {
                        "output_type": "display_data",
                        "data": {"image/png": chart, "text/plain": "<Figure size 1000x450>"},
                        "metadata": {},
                    }
                ],
            ),
        ],
        "metadata": {"papermill": {"start_time": "2026-11-02T06:00:00", "duration": 4.2}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }


def test_two_days_show_the_changed_figures_and_nothing_volatile() -> None:
    before = report("2026-10-30", [1200.0, 800.0, 500.0], ["A", "B", "C"])
    after = report("2026-11-02", [1350.0, 800.0, 450.0], ["B", "A", "D"], chart=PNG_B)
    # Everything volatile differs too: counts, timings, metadata.
    after["metadata"]["papermill"]["duration"] = 9.9
    for cell in after["cells"]:
        if cell["cell_type"] == "code":
            cell["execution_count"] = 99
    diff = compare_outputs(before, after)
    by_region, top = diff.tables
    assert (by_region.name, by_region.status, by_region.key) == ("by_region", "changed", ["region"])
    assert [c.text() for c in by_region.changes] == [
        "revenue 1,200 → 1,350 (+150, +12.5%)",
        "revenue 500 → 450 (-50, -10.0%)",
    ]
    assert [c.row for c in by_region.changes] == ["EMEA", "APAC"]
    # Products matched by sku (the first column that is not a number): ranks moved.
    assert top.key == ["sku"]
    assert top.rows_added == ["D"]
    assert top.rows_removed == ["C"]
    assert [(c.row, c.before, c.after) for c in top.changes] == [("B", 2, 1), ("A", 1, 2)]
    ((text),) = diff.texts
    assert (text.cell, text.lines) == (
        "cell 3 (code)",
        ["@@ -1 +1 @@", "-Day: 2026-10-30", "+Day: 2026-11-02"],
    )
    ((image),) = diff.images
    assert (image.status, image.before, image.after) == ("changed", PNG_A, PNG_B)
    lines = "\n".join(diff.lines())
    assert "execution_count" not in lines
    assert "duration" not in lines
    assert "report_date" not in lines  # the injected parameters are the run's, not its output
    assert not diff.same


def test_the_same_report_twice_is_the_same() -> None:
    one = report("2026-10-30", [1.0, 2.0], ["A"])
    two = copy.deepcopy(one)
    two["cells"][3]["execution_count"] = 42
    two["cells"][1]["source"] = 'report_date = "2099-01-01"'  # the injected cell differs
    diff = compare_outputs(one, two)
    assert diff.same
    assert diff.lines() == [
        "the two reports show the same tables, text and images",
        "table by_region: unchanged (2 rows)",
        "table top_products: unchanged (1 rows)",
    ]


def test_tables_only_in_one_report_and_rows_by_position_without_a_key() -> None:
    numbers = pd.DataFrame({"a": [1, 2], "b": [3.0, 4.0]})
    before = {
        "cells": [
            code("x", [table_output(numbers, "n")]),
            code("y", [table_output(numbers, "old")]),
        ]
    }
    after = {
        "cells": [
            code("x", [table_output(numbers.assign(b=[3.0, 0.0]), "n")]),
            code("z", [table_output(numbers, "new")]),
        ]
    }
    diff = compare_outputs(before, after)
    assert [(t.name, t.status) for t in diff.tables] == [
        ("n", "changed"),
        ("new", "added"),
        ("old", "removed"),
    ]
    (change,) = diff.tables[0].changes
    assert (change.row, change.column, change.delta, change.percent) == ("#2", "b", -4.0, -100.0)


def test_a_change_from_zero_has_a_delta_and_no_percent() -> None:
    before = {"cells": [code("x", [table_output(pd.DataFrame({"k": ["a"], "v": [0]}), "t")])]}
    after = {"cells": [code("x", [table_output(pd.DataFrame({"k": ["a"], "v": [5]}), "t")])]}
    (change,) = compare_outputs(before, after).tables[0].changes
    assert (change.delta, change.percent, change.text()) == (5.0, None, "v 0 → 5 (+5)")


def test_huge_tables_and_many_images_are_bounded() -> None:
    rows = MAX_CHANGES + 300
    a = pd.DataFrame({"k": [f"r{i}" for i in range(rows)], "v": list(range(rows))})
    b = a.assign(v=a["v"] + 1)
    images = [
        {"output_type": "display_data", "data": {"image/png": PNG_A}, "metadata": {}}
        for _ in range(MAX_IMAGES + 5)
    ]
    before = {"cells": [code("x", [table_output(a, "t")]), code("i", images)]}
    after = {"cells": [code("x", [table_output(b, "t")]), code("i", images)]}
    diff = compare_outputs(before, after)
    table = diff.tables[0]
    assert len(table.changes) == MAX_CHANGES
    assert table.more == 300
    assert len(diff.images) == MAX_IMAGES
    assert diff.more_images == 5


@pytest.mark.parametrize(
    "hostile",
    [
        {"cells": "not a list"},
        {"cells": [None, 3, {"cell_type": "code", "outputs": [None, {"data": []}]}]},
        {
            "cells": [
                code(
                    "x",
                    [
                        {
                            "output_type": "display_data",
                            "data": {TABLE_MIME_TYPE: {"x": 1}},
                            "metadata": {"nbcast": {"table": "t"}},
                        }
                    ],
                )
            ]
        },
        {
            "cells": [
                code(
                    "x",
                    [
                        {
                            "output_type": "display_data",
                            "data": {TABLE_MIME_TYPE: {}},
                            "metadata": {"nbcast": {"table": "bad/name"}},
                        }
                    ],
                )
            ]
        },
        {"cells": [{"cell_type": "code", "id": "a", "metadata": {"tags": 5}, "outputs": 5}]},
        {
            "cells": [
                {"cell_type": "code", "id": "a", "outputs": True},
                {"cell_type": "markdown", "id": "b", "source": "\ud800"},
            ]
        },
        {
            "cells": [
                code(
                    "c",
                    [
                        {
                            "output_type": "display_data",
                            "data": {"image/svg+xml": "\ud800", "image/png": "\ud800"},
                            "metadata": {},
                        }
                    ],
                )
            ]
        },
        {
            "cells": [
                code(
                    "h",
                    [
                        {
                            "output_type": "display_data",
                            "data": {"text/html": "<" * 1_000_000},
                            "metadata": {},
                        }
                    ],
                )
            ]
        },
    ],
)
def test_malformed_notebooks_compare_without_raising(hostile: dict[str, Any]) -> None:
    good = report("2026-10-30", [1.0], ["A"])
    for pair in ((hostile, good), (good, hostile)):
        diff = compare_outputs(*pair)
        assert diff.lines()
        # What the API and the CLI print is JSON any client parses (no NaN, no lone
        # surrogate).
        json.dumps(diff.to_json(), allow_nan=False).encode("utf-8")
        assert all(line.encode("utf-8") for line in diff.lines())


@pytest.mark.parametrize(
    ("before", "after", "delta", "percent"),
    [
        (1, 10**400, None, None),  # too large for a float: no delta, no error
        (1e-300, 1e300, 1e300, None),  # the relative change is not finite
        (2**63 - 2, 2**63 - 1, 1.0, 0.0),  # ints subtracted exactly
        (float("nan"), 1.0, None, None),
    ],
)
def test_numbers_any_json_holds_give_finite_changes_or_none(
    before: Any, after: Any, delta: float | None, percent: float | None
) -> None:
    def one(value: Any) -> dict[str, Any]:
        fields = [{"name": "k", "type": "string"}, {"name": "v", "type": "number"}]
        payload = {"name": "t", "schema": {"fields": fields}, "data": [{"k": "a", "v": value}]}
        output = {
            "output_type": "display_data",
            "data": {TABLE_MIME_TYPE: payload},
            "metadata": {"nbcast": {"table": "t"}},
        }
        return {"cells": [code("x", [output])]}

    diff = compare_outputs(one(before), one(after))
    (change,) = diff.tables[0].changes
    assert (change.delta, change.percent) == (delta, percent)
    json.dumps(diff.to_json(), allow_nan=False)


def test_every_list_is_bounded(monkeypatch: pytest.MonkeyPatch) -> None:
    from nbcast.views import output_diff, table_diff

    monkeypatch.setattr(table_diff, "MAX_CELLS_COMPARED", 10)
    monkeypatch.setattr(output_diff, "MAX_TEXTS", 3)
    a = pd.DataFrame({"k": [f"r{i}" for i in range(20)], "v": list(range(20))})

    def printed(suffix: str) -> list[dict[str, Any]]:
        return [
            code(f"p{i}", [{"output_type": "stream", "name": "stdout", "text": f"{i}{suffix}\n"}])
            for i in range(8)
        ]

    before = {"cells": [code("x", [table_output(a, "t")]), *printed("")]}
    after = {"cells": [code("x", [table_output(a.assign(v=a["v"] + 1), "t")]), *printed("!")]}
    diff = compare_outputs(before, after)
    assert len(diff.tables[0].changes) == 10
    assert diff.tables[0].more == 10  # the values past the budget, counted
    assert (len(diff.texts), diff.more_texts) == (3, 5)
    assert diff.lines()[-1] == "… 5 more cells whose text changed"
