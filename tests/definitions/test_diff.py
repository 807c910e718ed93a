"""Bounded notebook diffs: nbdime's diff for ordinary cells, coarse and cheap for the rest.

No timings here: the bounds are shown by the diff's structure (no character diff of a
long line, anchored alignment, the budget's effect), and every diff must patch the
old notebook into the new one with nbdime's own ``patch``.
"""

from __future__ import annotations

import copy
import gc
import io
import json
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import nbdime
import nbformat
import pytest
from nbdime.diff_utils import to_diffentry_dicts
from nbdime.prettyprint import PrettyPrintConfig, pretty_print_diff

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.diff import (
    CELL_GAP_PAIRS,
    LONG_LINE,
    MAX_RENDER_CHARS,
    collector_paused,
    diff_notebooks_bounded,
    diff_versions,
)
from nbcast.definitions.diff_render import patch_text, render_diff
from nbcast.definitions.notebook import canonical_json, notebook_sha256
from nbcast.definitions.queries import VersionInfo
from nbcast.definitions.versions import publish
from tests.definitions.reads import get_version
from tests.members import grant
from tests.notebooks import make_notebook


def _cell(ident: str, source: str, kind: str = "code", **extra: Any) -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "id": ident, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    cell.update(extra)
    return cell


def _notebook(cells: list[dict[str, Any]], **metadata: Any) -> dict[str, Any]:
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def _version(notebook: dict[str, Any], number: int) -> VersionInfo:
    return VersionInfo(
        definition="report",
        version=number,
        sha256=notebook_sha256(notebook),
        author="ana",
        message="",
        created_at=datetime(2026, 1, 1, tzinfo=UTC),
        schema=(),
        block={},
        notebook_json=canonical_json(notebook),
    )


def _diff(a: dict[str, Any], b: dict[str, Any]) -> list[dict[str, Any]]:
    """diff_versions of two notebooks, checked to patch ``a`` into ``b``."""
    structured = diff_versions(_version(a, 1), _version(b, 2))
    # Read back from JSON as nbdime reads a stored diff, then patched by nbdime.
    as_read = to_diffentry_dicts(json.loads(json.dumps(structured)))
    assert nbdime.patch(nbformat.from_dict(a), as_read) == nbformat.from_dict(b)
    return structured


def _source_diff(structured: list[dict[str, Any]], cell: int) -> list[dict[str, Any]]:
    (cells,) = [e for e in structured if e["key"] == "cells"]
    (patched,) = [e for e in cells["diff"] if e["op"] == "patch" and e["key"] == cell]
    (source,) = [e for e in patched["diff"] if e["key"] == "source"]
    ops: list[dict[str, Any]] = source["diff"]
    return ops


def _one_char_changed(line: str) -> str:
    middle = len(line) // 2
    return line[:middle] + ("#" if line[middle] != "#" else "%") + line[middle + 1 :]


def _prose(length: int) -> str:
    words = "sales by region grew where the forecast said it would not "
    return (words * (length // len(words) + 1))[:length]


@pytest.mark.parametrize(
    "line",
    [
        pytest.param(_prose(LONG_LINE + 500), id="just_over_the_limit"),
        pytest.param(_prose(20_000), id="prose_20k"),
        pytest.param("a" * 50_000, id="repetitive_50k"),
        pytest.param("|---" * 12_500, id="markdown_table_rule_50k"),
    ],
)
def test_a_changed_long_line_is_replaced_whole(line: str) -> None:
    old = _notebook([_cell("intro", f"# Sales\n{line}\nend\n", "markdown"), _cell("x", "x = 1")])
    new = copy.deepcopy(old)
    new["cells"][0]["source"] = f"# Sales\n{_one_char_changed(line)}\nend\n"
    ops = _source_diff(_diff(old, new), 0)
    # Line 1 out, its new version in: no character-level sub-diff.
    assert ops == [
        {"op": "addrange", "key": 1, "valuelist": [_one_char_changed(line) + "\n"]},
        {"op": "removerange", "key": 1, "length": 1},
    ]


def test_an_ordinary_line_keeps_nbdimes_character_diff() -> None:
    old = _notebook([_cell("p", 'region = "EMEA"\ntop_n = 5\n'), _cell("b", "print(region)\n")])
    new = copy.deepcopy(old)
    new["cells"][0]["source"] = 'region = "EMEA"\ntop_n = 20\n'
    ops = _source_diff(_diff(old, new), 0)
    assert [(e["op"], e["key"]) for e in ops] == [("patch", 1)]
    assert {e["op"] for e in ops[0]["diff"]} <= {"addrange", "removerange"}


_BASE = _notebook(
    [
        _cell("params", 'region = "EMEA"\ntop_n = 5\n', metadata={"tags": ["parameters"]}),
        _cell("load", "import pandas as pd\ndf = pd.read_parquet(path)\ndf.head()\n"),
        _cell(
            "notes",
            "# Weekly sales\n\nNumbers are net of returns.\n![logo](attachment:logo.svg)\n",
            "markdown",
            attachments={"logo.svg": {"image/svg+xml": "<svg>\n<rect/>\n</svg>\n"}},
        ),
        _cell("plot", "df.plot(x='day', y='sales')\n"),
    ],
    nbcast={"name": "weekly", "outputs": ["html", "pdf"]},
)


def _edit(change: str) -> dict[str, Any]:
    nb = copy.deepcopy(_BASE)
    cells = nb["cells"]
    if change == "line":
        cells[1]["source"] = "import pandas as pd\ndf = pd.read_parquet(path).dropna()\ndf.head()\n"
    elif change == "insert_cell":
        cells.insert(2, _cell("new", "df.describe()\n"))
    elif change == "delete_cell":
        del cells[3]
    elif change == "retype_and_move":
        cells[1], cells[3] = cells[3], cells[1]
    elif change == "copy_with_new_id":
        cells.append(_cell("copy", cells[1]["source"] + "df.tail()\n"))
    elif change == "tags":
        cells[0]["metadata"]["tags"] = ["parameters", "injected"]
    elif change == "block":
        nb["metadata"]["nbcast"]["outputs"] = ["html", "xlsx", "pdf"]
    elif change == "attachment":
        cells[2]["attachments"]["logo.svg"]["image/svg+xml"] = "<svg>\n<circle/>\n</svg>\n"
    return nb


@pytest.mark.parametrize(
    "change",
    [
        "line",
        "insert_cell",
        "delete_cell",
        "retype_and_move",
        "copy_with_new_id",
        "tags",
        "block",
        "attachment",
    ],
)
def test_ordinary_notebooks_diff_exactly_as_nbdime(change: str) -> None:
    new = _edit(change)
    expected = nbdime.diff_notebooks(nbformat.from_dict(_BASE), nbformat.from_dict(new))
    assert _diff(_BASE, new) == json.loads(json.dumps(expected))


def test_rendering_matches_nbdimes_printer_for_ordinary_diffs() -> None:
    """nbdime's printer with its unified (difflib) hunks, as nbdiff shows them."""
    new = _edit("line")
    new["cells"].insert(0, _cell("new", "df.describe()\n"))
    a, b = nbformat.from_dict(_BASE), nbformat.from_dict(new)
    out = io.StringIO()
    config = PrettyPrintConfig(out=out, use_git=False, use_diff=False, use_color=False)
    pretty_print_diff(a, nbdime.diff_notebooks(a, b), "", config)
    text = render_diff(_version(_BASE, 1), _version(new, 2))
    assert text.split("\n", 2)[2] == out.getvalue()


def test_the_budget_leaves_later_changes_coarse_but_correct() -> None:
    # A 900-character run of one letter costs difflib 900 x 900 steps: the first
    # change spends the budget on its character diff, the later ones are replaced.
    line = "a" * 900
    old = _notebook([_cell(f"c{i}", f"{line}\nkeep\n", "markdown") for i in range(3)])
    new = copy.deepcopy(old)
    for cell in new["cells"]:
        cell["source"] = f"{_one_char_changed(line)}\nkeep\n"
    structured = _diff(old, new)
    assert [(e["op"], e["key"]) for e in _source_diff(structured, 0)] == [("patch", 0)]
    for index in (1, 2):
        # Still aligned on equal lines: only the changed line is replaced.
        assert _source_diff(structured, index) == [
            {"op": "addrange", "key": 0, "valuelist": [_one_char_changed(line) + "\n"]},
            {"op": "removerange", "key": 0, "length": 1},
        ]


def test_a_long_source_aligns_on_its_unique_lines() -> None:
    lines = [f"total_{i} = sales[{i}] * rate\n" for i in range(20_000)]
    edited = list(lines)
    edited[12_345] = "total_12345 = sales[12345] * rate * 2\n"
    edited.insert(17_000, "print('checkpoint')\n")
    old = _notebook([_cell("big", "".join(lines))])
    new = _notebook([_cell("big", "".join(edited))])
    ops = _source_diff(_diff(old, new), 0)
    assert [(e["op"], e["key"]) for e in ops] == [("patch", 12_345), ("addrange", 17_000)]


def test_a_wide_gap_without_anchors_is_removed_and_inserted() -> None:
    side = int(CELL_GAP_PAIRS**0.5) + 10
    old = _notebook([_cell(f"a{i}", f"x = {i}\n") for i in range(side)])
    new = _notebook([_cell(f"b{i}", f"x = {i} + 1\n") for i in range(side)])
    (cells,) = _diff(old, new)
    assert [(e["op"], e["key"]) for e in cells["diff"]] == [("addrange", 0), ("removerange", 0)]


def test_cells_with_new_ids_still_align_on_their_content() -> None:
    cells = [_cell(f"a{i}", f"step_{i}()\n") for i in range(200)]
    old = _notebook(cells)
    new = _notebook([_cell(f"b{i}", c["source"]) for i, c in enumerate(cells)])
    new["cells"][100]["source"] = "step_100(fast=True)\n"
    (cells_diff,) = _diff(old, new)
    patched = [e["key"] for e in cells_diff["diff"] if e["op"] == "patch"]
    assert patched == list(range(200))  # aligned one to one: only their ids differ


def test_long_metadata_strings_and_lists_are_bounded_too() -> None:
    line = _prose(20_000)
    old = _notebook(
        [_cell("x", "x = 1\n")], nbcast={"note": f"a\n{line}\n", "rows": list(range(30_000))}
    )
    new = copy.deepcopy(old)
    new["metadata"]["nbcast"]["note"] = f"a\n{_one_char_changed(line)}\n"
    new["metadata"]["nbcast"]["rows"][15_000] = -1
    (metadata,) = _diff(old, new)
    (block,) = metadata["diff"]
    note, rows = sorted(block["diff"], key=lambda e: e["key"])
    assert [e["op"] for e in note["diff"]] == ["addrange", "removerange"]
    assert [(e["op"], e["key"]) for e in rows["diff"]] == [
        ("addrange", 15_000),
        ("removerange", 15_000),
    ]


@pytest.mark.parametrize(
    ("a", "b"),
    [
        pytest.param("x = 1\ny = 2\n", "x = 1\ny = 3\nz = 4\n", id="char_and_line"),
        pytest.param("a\n" + "b" * 5_000 + "\nc", "a\n" + "b" * 4_999 + "\nc\nd", id="long"),
        pytest.param("", "new\n", id="from_empty"),
        pytest.param("one\ntwo\nthree\n", "three\n", id="removals"),
    ],
)
def test_patch_text_is_nbdimes_patch(a: str, b: str) -> None:
    d = diff_notebooks_bounded({"s": a}, {"s": b})
    ops = d[0]["diff"] if d else []
    assert patch_text(a, ops) == nbdime.patch(a, ops) == b


def test_changed_sources_print_as_unified_hunks_with_context() -> None:
    """Like nbdiff: ``@@`` hunks with the unchanged lines around a change, never the
    external diff's ed-style ``3c3`` with ``<``/``>`` and no context."""
    source = "".join(f"line{i} = {i}\n" for i in range(10))
    old = _notebook([_cell("c", source)])
    new = _notebook([_cell("c", source.replace("line5 = 5", "line5 = 50"))])
    text = render_diff(_version(old, 1), _version(new, 2))
    assert "@@ -3,7 +3,7 @@" in text
    hunk = text[text.index("@@") :].splitlines()
    assert hunk[1:8] == [
        "   line2 = 2",
        "   line3 = 3",
        "   line4 = 4",
        "-  line5 = 5",
        "+  line5 = 50",
        "   line6 = 6",
        "   line7 = 7",
    ]
    assert "5c5" not in text
    assert "> " not in text


def test_a_huge_rendering_is_cut_with_a_note() -> None:
    old = _notebook([_cell("big", "x\n" + "y" * MAX_RENDER_CHARS + "\n", "markdown")])
    new = _notebook([_cell("big", "x\n" + "z" * MAX_RENDER_CHARS + "\n", "markdown")])
    text = render_diff(_version(old, 1), _version(new, 2))
    body, note = text.rsplit("\n## ", 1)
    assert note.startswith("diff cut at 2,000,000 characters")
    assert len(body) <= MAX_RENDER_CHARS + 200  # the header is outside the cap
    assert _diff(old, new)  # the structured diff is whole: it patches old into new


def test_published_versions_diff_bounded(db: Database, tmp_path: Path) -> None:
    grant(db, "default", "ana")
    grant(db, "default", "tester", "viewer")
    line = _prose(20_000)
    path = tmp_path / "sales.ipynb"
    make_notebook(path, extra_cells=[_cell("long", f"# Sales\n{line}\n", "markdown")])
    publish(db, path, caller=Caller(tenant="default", user="ana"))
    changed = _one_char_changed(line)
    make_notebook(path, extra_cells=[_cell("long", f"# Sales\n{changed}\n", "markdown")])
    publish(db, path, caller=Caller(tenant="default", user="ana"))
    old, new = get_version(db, "default", "sales", 1), get_version(db, "default", "sales", 2)
    ops = _source_diff(diff_versions(old, new), 2)
    assert [(e["op"], e["key"]) for e in ops] == [("addrange", 1), ("removerange", 1)]
    text = render_diff(old, new)
    assert "modified /cells/2/source" in text
    assert f"+  {changed}" in text


def _output(kind: str, **fields: Any) -> dict[str, Any]:
    return {"output_type": kind, **fields}


def test_plain_json_diffs_as_nbdime_diffs_notebook_nodes() -> None:
    """The diff takes notebooks as ``json.loads`` gives them — no ``NotebookNode``
    anywhere — and finds what nbdime finds in their nodes, paired outputs included
    (nbdime reads those by attribute); the notebooks themselves are left unchanged."""
    table = _output(
        "execute_result", execution_count=1, metadata={}, data={"text/plain": "   a\n0  1\n"}
    )
    old = _notebook(
        [
            _cell("params", 'region = "EMEA"\n', metadata={"tags": ["parameters"]}),
            _cell(
                "load",
                "df = load(region)\ndf.head()\n",
                outputs=[
                    _output("stream", name="stdout", text="loaded 1000 rows from the lake\n"),
                    table,
                ],
            ),
        ]
    )
    new = copy.deepcopy(old)
    new["cells"][1]["outputs"][0]["text"] = "loaded 1002 rows from the lake\n"
    new["cells"][1]["outputs"][1]["data"]["text/plain"] = "   a\n0  1\n1  2\n"
    new["cells"][1]["outputs"][1]["execution_count"] = 2
    a, b = json.loads(json.dumps(old)), json.loads(json.dumps(new))
    expected = nbdime.diff_notebooks(nbformat.from_dict(old), nbformat.from_dict(new))
    got = diff_notebooks_bounded(a, b)
    assert json.loads(json.dumps(got)) == json.loads(json.dumps(expected))
    (cells,) = got
    (patched,) = cells["diff"]
    (outputs,) = patched["diff"]
    assert [e["op"] for e in outputs["diff"]] == ["patch", "patch"]  # paired, not replaced
    assert (a, b) == (old, new)
    assert type(a["cells"][1]["outputs"][1]) is dict


def test_plain_versions_render_added_and_removed_cells_as_nbdime_prints_them() -> None:
    """Cells printed whole (inserted, removed; with metadata, which nbdime's printer
    reads by attribute) print as nbdime prints them from notebook nodes."""
    new = _edit("line")
    del new["cells"][0]  # the parameters cell, tagged
    new["cells"].insert(1, _cell("tagged", "df.describe()\n", metadata={"tags": ["summary"]}))
    new["cells"].append(_cell("notes2", "More *notes*.\n", "markdown", metadata={"k": 1}))
    a, b = nbformat.from_dict(_BASE), nbformat.from_dict(new)
    out = io.StringIO()
    config = PrettyPrintConfig(out=out, use_git=False, use_diff=False, use_color=False)
    pretty_print_diff(a, nbdime.diff_notebooks(a, b), "", config)
    text = render_diff(_version(_BASE, 1), _version(new, 2))
    assert "tags" in out.getvalue()
    assert text.split("\n", 2)[2] == out.getvalue()


def test_the_collector_is_paused_for_a_diff_and_restored_after() -> None:
    """Pauses nest and overlap (threads), survive an exception, and leave a collector
    that was already off as it was."""
    states = []
    with collector_paused():
        states.append(gc.isenabled())
        with collector_paused():
            states.append(gc.isenabled())
        states.append(gc.isenabled())
    assert states == [False, False, False]
    assert gc.isenabled()
    with pytest.raises(ValueError, match="fails"), collector_paused():
        raise ValueError("a diff that fails")
    assert gc.isenabled()
    old = _notebook([_cell(f"c{i}", f"a = {i}\n") for i in range(300)])
    new = _notebook([_cell(f"c{i}", f"a = {i + 1}\n") for i in range(300)])
    with ThreadPoolExecutor(4) as pool:
        texts = list(pool.map(lambda _: render_diff(_version(old, 1), _version(new, 2)), range(8)))
    assert len(set(texts)) == 1
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            pass
        assert not gc.isenabled()
    finally:
        gc.enable()
