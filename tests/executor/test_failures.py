"""Reading why an attempt failed: papermill's cell index, IPython's failing line, and
error columns that hold anything at all."""

from __future__ import annotations

from typing import Any

import pytest

from nbcast.executor.failures import MAX_TEXT, describe_error, failing_cell

# IPython 9's traceback of ``g(x)`` in cell In[2], which calls ``g`` (defined in that
# cell, line 3), which calls ``f`` from cell In[1]: colours and all, as papermill keeps it.
NESTED = [
    "\x1b[31m---------------------------------------------------------------------------\x1b[39m",
    "\x1b[31mZeroDivisionError\x1b[39m                         Traceback (most recent call last)",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 4\x1b[39m\n"
    "\x1b[32m      1\x1b[39m x = \x1b[32m1\x1b[39m\n"
    "\x1b[32m      2\x1b[39m \x1b[38;5;28;01mdef\x1b[39;00m g(b):\n"
    "\x1b[32m      3\x1b[39m     \x1b[38;5;28;01mreturn\x1b[39;00m f(b) + \x1b[32m1\x1b[39m\n"
    "\x1b[32m----> \x1b[39m\x1b[32m4\x1b[39m g(x)\n",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[2]\x1b[39m\x1b[32m, line 3\x1b[39m, in "
    "\x1b[36mg\x1b[39m\x1b[34m(b)\x1b[39m\n"
    "\x1b[32m      2\x1b[39m \x1b[38;5;28;01mdef\x1b[39;00m g(b):\n"
    "\x1b[32m----> \x1b[39m\x1b[32m3\x1b[39m     \x1b[38;5;28;01mreturn\x1b[39;00m f(b) + "
    "\x1b[32m1\x1b[39m\n",
    "\x1b[36mCell\x1b[39m\x1b[36m \x1b[39m\x1b[32mIn[1]\x1b[39m\x1b[32m, line 2\x1b[39m, in "
    "\x1b[36mf\x1b[39m\x1b[34m(a)\x1b[39m\n"
    "\x1b[32m      1\x1b[39m \x1b[38;5;28;01mdef\x1b[39;00m f(a):\n"
    "\x1b[32m----> \x1b[39m\x1b[32m2\x1b[39m     \x1b[38;5;28;01mreturn\x1b[39;00m a / "
    "\x1b[32m0\x1b[39m\n",
    "\x1b[31mZeroDivisionError\x1b[39m: division by zero",
]
# IPython 7's form of a frame: no "Cell In[...]".
OLD = [
    "ZeroDivisionError                         Traceback (most recent call last)",
    "<ipython-input-3-9e1622b385b6> in <module>\n      1 y = 0\n----> 2 1 / y\n",
    "ZeroDivisionError: division by zero",
]


def error(traceback: Any, cell_index: Any = 1) -> dict[str, Any]:
    return {
        "cell_index": cell_index,
        "ename": "ZeroDivisionError",
        "evalue": "division by zero",
        "traceback": traceback,
    }


def executed(*sources: str) -> dict[str, Any]:
    """An executed notebook as papermill stores a failed one: its error banner first,
    and an anchor cell before the failing (last) cell."""
    banner = {"cell_type": "markdown", "metadata": {"tags": ["papermill-error-cell-tag"]}}
    cells = [{"cell_type": "code", "metadata": {}, "source": s} for s in sources]
    return {"cells": [banner, *cells[:-1], banner, cells[-1]]}


def test_the_line_is_the_failing_cells_innermost_frame() -> None:
    info = describe_error(error(NESTED))
    assert info is not None
    assert (info.ename, info.evalue, info.cell_index) == (
        "ZeroDivisionError",
        "division by zero",
        1,
    )
    assert (info.line_number, info.source_line) == (3, "    return f(b) + 1")
    assert info.summary() == (
        "ZeroDivisionError: division by zero — in cell 1, line 3: return f(b) + 1"
    )


def test_the_source_comes_from_the_executed_notebook_past_papermills_banner() -> None:
    notebook = executed("def f(a):\n    return a / 0", "x = 1\ndef g(b):\n  return f(b)+1\ng(x)")
    cell = failing_cell(notebook, 1)
    assert cell is not None
    assert cell["source"].startswith("x = 1")
    info = describe_error(error(NESTED), notebook)
    assert info is not None
    assert (info.line_number, info.source_line) == (3, "  return f(b)+1")
    assert failing_cell(notebook, 2) is None
    assert failing_cell({"cells": "nonsense"}, 0) is None


def test_an_older_ipythons_arrow_is_read() -> None:
    info = describe_error(error(OLD))
    assert info is not None
    assert (info.line_number, info.source_line) == (2, "1 / y")


@pytest.mark.parametrize(
    ("column", "expected"),
    [
        pytest.param(None, None, id="none"),
        pytest.param({}, None, id="empty"),
        pytest.param(
            {"message": "the run exceeded its time limit of 3.0s"},
            ("the run exceeded its time limit of 3.0s", None, None),
            id="timeout",
        ),
        pytest.param(
            {"reason": "lease_expired", "message": "attempt 2 stopped heartbeating"},
            ("attempt 2 stopped heartbeating (lease_expired)", None, None),
            id="lease",
        ),
        pytest.param(
            {"ename": "NoSuchKernel", "evalue": "no kernelspec", "reason": "no_such_kernel"},
            ("NoSuchKernel: no kernelspec (no_such_kernel)", None, None),
            id="permanent",
        ),
        pytest.param(
            error(["no frames here"], cell_index=True),
            ("ZeroDivisionError: division by zero", None, None),
            id="bool-index",
        ),
        pytest.param(
            error("not a list", cell_index=-4),
            ("ZeroDivisionError: division by zero", None, None),
            id="negative-index",
        ),
        pytest.param(
            error(["Cell In[1], line 99999999999\n----> 99999999999 x\n"]),
            ("ZeroDivisionError: division by zero — in cell 1", 1, None),
            id="absurd-line",
        ),
    ],
)
def test_any_error_column_is_described_without_failing(
    column: Any, expected: tuple[str, int | None, int | None] | None
) -> None:
    info = describe_error(column)
    if expected is None:
        assert info is None
        return
    assert info is not None
    assert (info.summary(), info.cell_index, info.line_number) == expected


def test_long_texts_are_cut() -> None:
    info = describe_error({"ename": "E" * 10_000, "evalue": "v" * 10_000, "message": 7})
    assert info is not None
    assert (len(info.ename or ""), len(info.evalue or ""), info.message) == (
        MAX_TEXT,
        MAX_TEXT,
        "7",
    )
