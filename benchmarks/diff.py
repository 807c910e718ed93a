"""Version diff speed, as JSON: nbcast's bounded diff beside plain nbdime.

Run ``python -m benchmarks.diff`` (``--limit S``, default 30; ``--repeat N``,
default 3). Each case is a pair of normalized notebooks, as ``nbcast publish`` stores
them:

- ``line_20k`` / ``line_50k``: a few ordinary cells and a markdown cell holding one
  20,000- (50,000-) character line of prose, changed by one character;
- ``notebook_4mb``: about 4 MB of normalized JSON (the publish limit) in 2,000 code
  and markdown cells, with 20 cells edited, 5 inserted, 5 deleted, the ``nbcast``
  block changed and one 20,000-character line changed;
- ``one_cell_4mb``: one 4 MB code cell of 57,000 lines, 50 of them edited;
- ``one_cell_40k_lines``: one 4 MB code cell of 40,000 lines, 5,700 of them edited (the
  budget runs out early: most changes are lines removed and inserted);
- ``reordered_15k_cells``: 15,000 small cells (4 MB), every one moved and given a new
  id (no id, no content anchors the order).

For each case, ``nbcast_diff_s`` is the best of ``repeat`` runs of
``diff_notebooks_bounded`` on the notebooks as ``json.loads`` gives them,
``nbcast_json_s`` of ``diff_versions`` (what ``nbcast diff --json`` computes, parsing
the stored JSON included) and ``nbcast_render_s`` of ``render_diff`` (``nbcast diff``,
parsing included). The reference runs in a subprocess, killed after ``limit`` seconds (reported
as ``">30 s"``) and capped at 4 GB of memory (``"out of memory"``): plain
``nbdime.diff_notebooks`` (``nbdime_diff_s``) and then nbdime's pretty printer as
nbcast used it before (``nbdime_render_s``, diff included). ``diff_speedup`` is the
reference over nbcast, a lower bound when the reference did not finish.
"""

from __future__ import annotations

import argparse
import copy
import json
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from nbcast.definitions.diff import diff_notebooks_bounded, diff_versions
from nbcast.definitions.diff_render import render_diff
from nbcast.definitions.notebook import canonical_json, notebook_sha256
from nbcast.definitions.queries import VersionInfo

MEMORY_CAP = 4 * 1024**3

REFERENCE = """\
import io, json, sys, time
import nbformat
from nbdime import diff_notebooks
from nbdime.prettyprint import PrettyPrintConfig, pretty_print_diff

a, b = (nbformat.from_dict(json.load(open(p))) for p in sys.argv[1:3])
started = time.perf_counter()
d = diff_notebooks(a, b)
print(json.dumps({"diff_s": time.perf_counter() - started}), flush=True)
out = io.StringIO()
config = PrettyPrintConfig(out=out, use_git=False, use_diff=True, use_color=False)
pretty_print_diff(a, d, "", config)
print(json.dumps({"render_s": time.perf_counter() - started}), flush=True)
"""

WORDS = [
    *("sales", "region", "forecast", "revenue", "the", "of", "by", "and", "df", "plot"),
    *("sum", "where", "order", "group", "select", "quarter", "growth", "margin", "net"),
]


def _line(rng: random.Random, length: int = 60) -> str:
    words: list[str] = []
    while sum(len(w) + 1 for w in words) < length:
        words.append(rng.choice(WORDS))
    return " ".join(words)


def _cell(ident: str, source: str, kind: str = "code") -> dict[str, Any]:
    cell: dict[str, Any] = {"cell_type": kind, "id": ident, "metadata": {}, "source": source}
    if kind == "code":
        cell.update(outputs=[], execution_count=None)
    return cell


def _notebook(cells: list[dict[str, Any]]) -> dict[str, Any]:
    metadata = {
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"},
        "nbcast": {"name": "bench", "outputs": ["html"]},
    }
    return {"cells": cells, "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def _one_char_changed(text: str) -> str:
    middle = len(text) // 2
    return text[:middle] + "#" + text[middle + 1 :]


def long_line_case(rng: random.Random, length: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """Ordinary cells and one markdown cell with a ``length``-character line."""
    line = _line(rng, length)[:length]
    cells = [_cell(f"c{i}", "\n".join(_line(rng) for _ in range(5)) + "\n") for i in range(5)]
    cells.insert(2, _cell("long", f"# Notes\n{line}\nend\n", "markdown"))
    old = _notebook(cells)
    new = copy.deepcopy(old)
    new["cells"][2]["source"] = f"# Notes\n{_one_char_changed(line)}\nend\n"
    return old, new


def many_cells_case(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """About 4 MB in 2,000 cells, with scattered edits, inserts and deletes."""
    cells = [
        _cell(
            f"c{i}",
            "\n".join(_line(rng) for _ in range(30)) + "\n",
            rng.choice(["code", "markdown"]),
        )
        for i in range(2_000)
    ]
    cells[1_000]["source"] += _line(rng, 20_000)[:20_000] + "\n"
    old = _notebook(cells)
    new = copy.deepcopy(old)
    for index in rng.sample(range(2_000), 20):
        lines = new["cells"][index]["source"].splitlines(True)
        lines[7] = lines[7].replace(" ", "  ", 1)
        new["cells"][index]["source"] = "".join(lines)
    long_cell = new["cells"][1_000]
    long_cell["source"] = long_cell["source"][:-50] + "#" + long_cell["source"][-49:]
    for index in sorted(rng.sample(range(2_000), 5), reverse=True):
        del new["cells"][index]
    for n, index in enumerate(rng.sample(range(1_990), 5)):
        new["cells"].insert(index, _cell(f"new{n}", _line(rng) + "\n"))
    new["metadata"]["nbcast"]["outputs"] = ["html", "pdf"]
    return old, new


def one_cell_case(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """One 4 MB code cell of 57,000 lines, 50 of them edited."""
    lines = [f"{_line(rng)} {i}\n" for i in range(57_000)]
    edited = list(lines)
    for index in rng.sample(range(57_000), 50):
        edited[index] = edited[index].replace(" ", "_", 1)
    return _notebook([_cell("big", "".join(lines))]), _notebook([_cell("big", "".join(edited))])


def long_cell_case(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """One 4 MB code cell of 40,000 lines, 5,700 of them edited."""
    lines = [f"{_line(rng, 90)} {i}\n" for i in range(40_000)]
    edited = list(lines)
    for index in rng.sample(range(40_000), 5_700):
        edited[index] = edited[index].replace(" ", "_", 1)
    return _notebook([_cell("big", "".join(lines))]), _notebook([_cell("big", "".join(edited))])


def reordered_case(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any]]:
    """15,000 small cells (4 MB), all of them moved and given new ids."""
    cells = [
        _cell(
            f"c{i}",
            "\n".join(_line(rng) for _ in range(3)) + "\n",
            rng.choice(["code", "markdown"]),
        )
        for i in range(15_000)
    ]
    old = _notebook(cells)
    new = copy.deepcopy(old)
    rng.shuffle(new["cells"])
    for n, cell in enumerate(new["cells"]):
        cell["id"] = f"n{n}"
    return old, new


def _version(notebook: dict[str, Any], number: int) -> VersionInfo:
    return VersionInfo(
        definition="bench",
        version=number,
        sha256=notebook_sha256(notebook),
        author="bench",
        message="",
        created_at=datetime.now(UTC),
        schema=(),
        block={},
        notebook_json=canonical_json(notebook),
    )


def _best(repeat: int, run: Any) -> float:
    times = []
    for _ in range(repeat):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def _cap_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP))


def reference(old: dict[str, Any], new: dict[str, Any], limit: float) -> dict[str, Any]:
    """Plain nbdime in a subprocess: its diff and render seconds, or why it stopped."""
    with tempfile.TemporaryDirectory() as folder:
        paths = [Path(folder) / "a.ipynb", Path(folder) / "b.ipynb"]
        for path, notebook in zip(paths, (old, new), strict=True):
            path.write_text(canonical_json(notebook))
        command = [sys.executable, "-c", REFERENCE, *map(str, paths)]
        try:
            done = subprocess.run(
                command, capture_output=True, text=True, timeout=limit, preexec_fn=_cap_memory
            )
            output = done.stdout
            stopped = "out of memory" if "MemoryError" in done.stderr else "failed"
        except subprocess.TimeoutExpired as expired:
            raw = expired.stdout or b""
            output = raw.decode() if isinstance(raw, bytes) else raw
            stopped = f">{limit:g} s"
    # Whatever the reference printed before it stopped stands; the rest says why not.
    figures: dict[str, Any] = {"nbdime_diff_s": stopped, "nbdime_render_s": stopped}
    for line in output.splitlines():
        for key, value in json.loads(line).items():
            figures[f"nbdime_{key}"] = round(value, 4)
    return figures


def measure(
    name: str, old: dict[str, Any], new: dict[str, Any], limit: float, repeat: int
) -> dict[str, Any]:
    """Time nbcast's bounded diff and render of one case, and the reference beside them."""
    before, after = _version(old, 1), _version(new, 2)
    a, b = before.notebook, after.notebook
    record: dict[str, Any] = {
        "case": name,
        "notebook_bytes": max(len(before.notebook_json), len(after.notebook_json)),
        "cells": max(len(old["cells"]), len(new["cells"])),
        "nbcast_diff_s": round(_best(repeat, lambda: diff_notebooks_bounded(a, b)), 4),
        "nbcast_json_s": round(_best(repeat, lambda: diff_versions(before, after)), 4),
        "nbcast_render_s": round(_best(repeat, lambda: render_diff(before, after)), 4),
    }
    record.update(reference(old, new, limit))
    theirs = record["nbdime_diff_s"]
    if isinstance(theirs, float):
        record["diff_speedup"] = round(theirs / record["nbcast_diff_s"], 1)
    elif theirs.startswith(">"):
        record["diff_speedup"] = f">{round(limit / record['nbcast_diff_s'])}"
    return record


def main() -> None:
    """Print the figures as one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--limit", type=float, default=30.0)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    rng = random.Random(20260101)
    cases = {
        "line_20k": long_line_case(rng, 20_000),
        "line_50k": long_line_case(rng, 50_000),
        "notebook_4mb": many_cells_case(rng),
        "one_cell_4mb": one_cell_case(rng),
        "one_cell_40k_lines": long_cell_case(rng),
        "reordered_15k_cells": reordered_case(rng),
    }
    results = [measure(name, *pair, args.limit, args.repeat) for name, pair in cases.items()]
    print(json.dumps({"benchmark": "diff", "limit_s": args.limit, "results": results}, indent=2))


if __name__ == "__main__":
    main()
