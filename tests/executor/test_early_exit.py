"""Notebooks that stop themselves with ``sys.exit()``: early exit = no results.

Real kernels and papermill throughout: through the worker on SQLite and PostgreSQL,
and through :func:`~nbcast.executor.notebook_runner.execute_notebook` for each way of
exiting (warm and cold kernels).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.tables import has_rows, read_tables
from nbcast.errors import NotebookExecutionError
from nbcast.executor.early_exit import find_early_exit
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.kernels import KernelPool
from nbcast.executor.notebook_runner import execute_notebook
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import set_quota
from tests.executor.test_worker import attempts, make_worker, run_state
from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(180)

TABLE_BEFORE = (
    "import pandas as pd\nfrom nbcast.output import table\n"
    "table(pd.DataFrame({'region': ['EMEA'], 'orders': [3]}), 'before')"
)
TABLE_AFTER = "table(pd.DataFrame({'region': ['APAC'], 'orders': [5]}), 'after')"


def code_cell(source: str, cell_id: str) -> dict[str, Any]:
    return {
        "cell_type": "code",
        "id": cell_id,
        "metadata": {},
        "source": source,
        "outputs": [],
        "execution_count": None,
    }


def publish_exiting(db: Database, tmp_path: Path, name: str, exit_source: str) -> None:
    """cells: parameters (0), a table with a row (1), the exit (2), another table (3)."""
    path = make_notebook(
        tmp_path / f"{name}.ipynb",
        parameters="n = 10\n",
        body=TABLE_BEFORE,
        nbcast={"name": name},
        extra_cells=[code_cell(exit_source, "exit"), code_cell(TABLE_AFTER, "after")],
    )
    publish(db, path, caller=Caller(tenant="default", user="t"))


def test_an_early_exit_succeeds_as_no_results(db: Database, tmp_path: Path) -> None:
    publish_exiting(db, tmp_path, "quiet-day", "import sys\nsys.exit()")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "quiet-day", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        stats = make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.reason, run.attempt, stats.succeeded) == (
        "SUCCEEDED",
        "ended_early",
        1,
        1,
    )
    assert [a.outcome for a in attempts(db, run_id)] == ["SUCCEEDED"]
    assert run.artifact_sha256 is not None
    stored = LocalArtifactStore(tmp_path / "artifacts").get(run.artifact_sha256)
    executed = nbformat.reads(stored.decode(), as_version=4)
    assert executed.metadata["nbcast"]["ended_early"] == {"cell_index": 2, "code": 0}
    assert executed.metadata["nbcast"]["name"] == "quiet-day"  # the definition's block stays
    assert list(read_tables(executed)) == ["before"]  # the cell after the exit never ran
    assert has_rows(executed) is False  # so ``only_if: results`` is suppressed no_results


def test_exiting_with_a_non_zero_code_is_a_failure(db: Database, tmp_path: Path) -> None:
    publish_exiting(db, tmp_path, "bad-exit", "import sys\nsys.exit(3)")
    with db.session() as session:
        set_quota(session, "default", max_attempts=2)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "bad-exit", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    # The notebook's own exit: like any exception of its code, not retried.
    assert (run.state, run.reason, run.attempt) == ("FAILED", "notebook_error", 1)
    assert run.error is not None
    assert (run.error["ename"], run.error["evalue"], run.error["cell_index"]) == (
        "SystemExit",
        "3",
        2,
    )
    assert [a.outcome for a in attempts(db, run_id)] == ["FAILED"]


# -- the runner, each way of exiting ---------------------------------------------------


@pytest.fixture(scope="module")
def pool() -> Iterator[KernelPool]:
    with KernelPool(size=1) as pool:
        yield pool


def exiting_notebook(path: Path, exit_source: str, *, tags: list[str] | None = None) -> Path:
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3"}
    stop = nbformat.v4.new_code_cell(exit_source)
    if tags:
        stop.metadata["tags"] = tags
    nb.cells = [
        nbformat.v4.new_code_cell("print('before')"),
        stop,
        nbformat.v4.new_code_cell("print('after')"),
    ]
    nbformat.write(nb, path)
    return path


@pytest.mark.parametrize(
    "exit_source",
    [
        "import sys\nsys.exit()",
        "import sys\nsys.exit(0)",
        "import sys\nsys.exit(None)",
        "raise SystemExit",
        "raise SystemExit(0)",
    ],
    ids=["sys_exit", "sys_exit_0", "sys_exit_none", "raise", "raise_0"],
)
@pytest.mark.parametrize("warm", [True, False], ids=["warm", "cold"])
def test_each_clean_exit_is_recorded(
    exit_source: str, warm: bool, pool: KernelPool, tmp_path: Path
) -> None:
    source = exiting_notebook(tmp_path / "in.ipynb", exit_source)
    output = tmp_path / "out.ipynb"
    result = execute_notebook(
        source, output, {}, cwd=str(tmp_path), pool=pool if warm else None, timeout_s=120
    )
    assert result.ended_early == {"cell_index": 1, "code": 0}
    executed = json.loads(output.read_text())
    assert executed["metadata"]["nbcast"]["ended_early"] == {"cell_index": 1, "code": 0}
    assert executed["cells"][2]["outputs"] == []  # never executed


@pytest.mark.parametrize(
    ("exit_source", "evalue"),
    [("import sys\nsys.exit(3)", "3"), ("import sys\nsys.exit('no data')", "no data")],
    ids=["code_3", "message"],
)
def test_any_other_exit_raises(exit_source: str, evalue: str, tmp_path: Path) -> None:
    source = exiting_notebook(tmp_path / "in.ipynb", exit_source)
    with pytest.raises(NotebookExecutionError) as caught:
        execute_notebook(source, tmp_path / "out.ipynb", {}, cwd=str(tmp_path), pool=None)
    assert (caught.value.ename, caught.value.evalue) == ("SystemExit", evalue)
    assert "ended_early" not in json.loads((tmp_path / "out.ipynb").read_text())["metadata"].get(
        "nbcast", {}
    )


def test_a_cell_allowed_to_raise_does_not_end_the_notebook(tmp_path: Path) -> None:
    source = exiting_notebook(
        tmp_path / "in.ipynb", "import sys\nsys.exit()", tags=["raises-exception"]
    )
    output = tmp_path / "out.ipynb"
    result = execute_notebook(source, output, {}, cwd=str(tmp_path), pool=None)
    assert result.ended_early is None
    executed = json.loads(output.read_text())
    assert find_early_exit(executed) is None
    assert "".join(executed["cells"][2]["outputs"][0]["text"]) == "after\n"
