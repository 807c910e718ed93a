"""execute_notebook and the ``nbcast`` papermill engine, with real kernels.

One pool serves the module; every run gets its own kernel from it. Runs that must
compare a warm kernel with papermill's own path also run with ``pool=None``.
"""

from __future__ import annotations

import json
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import nbformat
import papermill
import psutil
import pytest
from papermill.engines import papermill_engines
from papermill.exceptions import PapermillExecutionError

from nbcast.errors import (
    ExecutionError,
    NotebookExecutionError,
    RunCancelledError,
    RunTimeoutError,
)
from nbcast.executor import watchdog
from nbcast.executor.kernels import KernelPool
from nbcast.executor.notebook_runner import (
    ENGINE_NAME,
    ExecutionResult,
    WarmKernelEngine,
    execute_notebook,
)
from tests.executor.test_kernels import gone, kernel_children, no_kernels_left

pytestmark = pytest.mark.timeout(120)

SETUP = (
    "# nbcast-setup-marker\n"
    "import os as _o\n"
    "_o.environ['NBCAST_RUN_CONTEXT'] = '{\"run\": 7}'\n"
    "del _o\n"
)
WRITE_PID = "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))"


def notebook(path: Path, *cells: str, parameters: str = "n = 10\n") -> Path:
    """A python3 notebook: a ``parameters`` cell, then one code cell per source."""
    nb = nbformat.v4.new_notebook()
    nb.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    params = nbformat.v4.new_code_cell(parameters)
    params.metadata["tags"] = ["parameters"]
    nb.cells = [params, *(nbformat.v4.new_code_cell(src) for src in cells)]
    nbformat.write(nb, path)
    return path


def stdout_of(cell: Any) -> str:
    return "".join(o["text"] for o in cell["outputs"] if o["output_type"] == "stream")


@pytest.fixture(scope="module")
def pool() -> Iterator[KernelPool]:
    with KernelPool(size=2) as pool:
        pool.wait_ready(60)
        yield pool
    assert no_kernels_left()


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    path = tmp_path / "run"
    path.mkdir()
    return path


def test_engine_is_registered_with_papermill() -> None:
    assert papermill_engines.get_engine(ENGINE_NAME) is WarmKernelEngine


def test_the_engine_takes_a_pre_acquired_kernel(pool: KernelPool, tmp_path: Path) -> None:
    src = notebook(tmp_path / "in.ipynb", "import os\nprint(os.getpid())")
    kernel = pool.acquire(timeout=60)
    try:
        papermill.execute_notebook(
            str(src),
            str(tmp_path / "out.ipynb"),
            engine_name="nbcast",
            kernel=kernel,
            progress_bar=False,
        )
        assert stdout_of(nbformat.read(tmp_path / "out.ipynb", 4).cells[1]) == f"{kernel.pid}\n"
        with pytest.raises(RuntimeError, match="exactly one run"):
            papermill.execute_notebook(
                str(src),
                str(tmp_path / "again.ipynb"),
                engine_name="nbcast",
                kernel=kernel,
                progress_bar=False,
            )
    finally:
        kernel.release(wait=True)
    assert kernel.pid is not None
    assert not psutil.pid_exists(kernel.pid)


def test_runs_do_not_share_state(pool: KernelPool, tmp_path: Path, run_dir: Path) -> None:
    first = notebook(tmp_path / "first.ipynb", "leaked = 42\nimport os\nprint(os.getpid())")
    second = notebook(
        tmp_path / "second.ipynb",
        "assert 'leaked' not in globals()\nimport os\nprint(os.getpid())",
    )
    execute_notebook(first, tmp_path / "o1.ipynb", {}, cwd=str(run_dir), pool=pool)
    execute_notebook(second, tmp_path / "o2.ipynb", {}, cwd=str(run_dir), pool=pool)
    pid1 = stdout_of(nbformat.read(tmp_path / "o1.ipynb", 4).cells[1])
    pid2 = stdout_of(nbformat.read(tmp_path / "o2.ipynb", 4).cells[1])
    assert pid1 != pid2


def test_concurrent_runs_each_keep_their_own_directory(pool: KernelPool, tmp_path: Path) -> None:
    # The worker's own working directory never changes (no papermill cwd=).
    src = notebook(tmp_path / "in.ipynb", "import os, time\ntime.sleep(0.3)\nprint(os.getcwd())")
    worker_cwd = os.getcwd()
    chosen = {"warm_a": pool, "warm_b": pool, "cold": None}
    printed: dict[str, str] = {}
    errors: list[BaseException] = []

    def run(name: str) -> None:
        folder = tmp_path / name
        folder.mkdir()
        try:
            out = tmp_path / f"{name}.ipynb"
            execute_notebook(src, out, {}, cwd=str(folder), pool=chosen[name])
            printed[name] = stdout_of(nbformat.read(out, 4).cells[1]).strip()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(name,)) for name in chosen]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert printed == {name: str(tmp_path / name) for name in chosen}
    assert os.getcwd() == worker_cwd


def test_a_missing_run_directory_is_refused(pool: KernelPool, tmp_path: Path) -> None:
    with pytest.raises(ExecutionError, match="does not exist"):
        execute_notebook(
            notebook(tmp_path / "in.ipynb", "1"),
            tmp_path / "out.ipynb",
            {},
            cwd=str(tmp_path / "missing"),
            pool=pool,
        )


@pytest.mark.parametrize("warm", [True, False], ids=["warm_pool", "papermill_default"])
def test_pandas_is_imported_but_not_bound(
    warm: bool, pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", "x = 1", "pd.DataFrame()")
    out = tmp_path / "out.ipynb"
    with pytest.raises(NotebookExecutionError) as caught:
        execute_notebook(src, out, {"n": 3}, cwd=str(run_dir), pool=pool if warm else None)
    error = caught.value
    assert error.ename == "NameError"
    assert "'pd' is not defined" in error.evalue
    assert error.traceback
    # papermill's index: parameters, injected-parameters, x = 1, then the failing cell.
    assert error.cell_index == 3
    assert isinstance(error.__cause__, PapermillExecutionError)
    written = nbformat.read(out, 4)  # papermill still wrote the output notebook
    assert written.metadata.papermill["exception"] is True
    executed = [
        c for c in written.cells if "papermill-error-cell-tag" not in c.metadata.get("tags", [])
    ]
    assert executed[error.cell_index].source == "pd.DataFrame()"


def test_warm_kernel_namespace_is_a_cold_kernels(
    pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", "print(sorted(globals()))")
    names = []
    for i, chosen in enumerate([pool, None]):
        out = tmp_path / f"out{i}.ipynb"
        execute_notebook(src, out, {}, cwd=str(run_dir), pool=chosen, setup_code=SETUP)
        names.append(stdout_of(nbformat.read(out, 4).cells[1]))
    assert names[0] == names[1]
    assert "'pd'" not in names[0]
    assert "_nbcast" not in names[0]


def test_papermill_behaviour_is_kept(pool: KernelPool, tmp_path: Path, run_dir: Path) -> None:
    src = notebook(
        tmp_path / "in.ipynb",
        "import pandas as pd\ndf = pd.DataFrame({'x': range(n)})\nprint(len(df))\ndf.describe()",
    )
    out = tmp_path / "out.ipynb"
    result = execute_notebook(src, out, {"n": 7}, cwd=str(run_dir), pool=pool)
    assert isinstance(result, ExecutionResult)
    assert result.output_path == str(out)
    assert result.warm
    assert result.kernel_start_s == 0.0
    assert 0 < result.duration_s < 30
    nb = nbformat.read(out, 4)
    tags = [c.metadata.get("tags") or [] for c in nb.cells]
    assert tags == [["parameters"], ["injected-parameters"], []]
    assert nb.cells[1].source == "# Parameters\nn = 7\n"
    meta = nb.metadata.papermill
    assert meta["parameters"] == {"n": 7}
    assert meta["input_path"] == str(src)
    assert meta["output_path"] == str(out)
    assert meta["exception"] is None
    assert meta["duration"] > 0
    assert all(c.metadata.papermill["status"] == "completed" for c in nb.cells)
    assert nb.metadata.language_info.name == "python"
    body = nb.cells[2]
    assert body.execution_count == 3
    assert stdout_of(body) == "7\n"
    results = [o for o in body.outputs if o.output_type == "execute_result"]
    assert "text/html" in results[0].data


def test_the_papermill_api_takes_the_pool(pool: KernelPool, tmp_path: Path) -> None:
    src = notebook(
        tmp_path / "in.ipynb", "import os\nprint(os.environ['NBCAST_RUN_CONTEXT'])", "1/0"
    )
    out = tmp_path / "out.ipynb"
    with pytest.raises(PapermillExecutionError) as caught:
        papermill.execute_notebook(
            str(src),
            str(out),
            parameters={"n": 1},
            engine_name="nbcast",
            kernel_pool=pool,
            setup_code=SETUP,
            progress_bar=False,
        )
    assert caught.value.ename == "ZeroDivisionError"
    assert stdout_of(nbformat.read(out, 4).cells[3]) == '{"run": 7}\n'


@pytest.mark.parametrize("warm", [True, False], ids=["warm_pool", "papermill_default"])
def test_setup_code_runs_first_and_is_not_recorded(
    warm: bool, pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(
        tmp_path / "in.ipynb",
        "import os\nprint(os.getcwd())\nprint(os.environ['NBCAST_RUN_CONTEXT'])",
    )
    out = tmp_path / "out.ipynb"
    execute_notebook(src, out, {}, cwd=str(run_dir), pool=pool if warm else None, setup_code=SETUP)
    nb = nbformat.read(out, 4)
    assert stdout_of(nb.cells[1]) == f'{run_dir}\n{{"run": 7}}\n'
    assert len(nb.cells) == 2
    assert nb.cells[1].execution_count == 2
    text = out.read_text()
    assert "nbcast-setup-marker" not in text
    assert "chdir" not in text


def test_failing_setup_code_raises_execution_error(
    pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", "print('never')")
    with pytest.raises(ExecutionError, match="setup code raised ValueError: nope"):
        execute_notebook(
            src,
            tmp_path / "out.ipynb",
            {},
            cwd=str(run_dir),
            pool=pool,
            setup_code="raise ValueError('nope')",
        )


def wait_for_pid(run_dir: Path, within: float = 30.0) -> int:
    deadline = time.monotonic() + within
    pid_file = run_dir / "kernel.pid"
    while time.monotonic() < deadline:
        if pid_file.exists() and pid_file.read_text():
            return int(pid_file.read_text())
        time.sleep(0.02)
    raise AssertionError("the notebook never wrote its pid")


@pytest.mark.timeout(45)  # the cell sleeps 60 s: only the run's time limit ends it sooner
@pytest.mark.parametrize("warm", [True, False], ids=["warm_pool", "papermill_default"])
def test_timeout_interrupts_then_ends_the_kernel(
    warm: bool, pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", WRITE_PID, "import time\ntime.sleep(60)")
    out = tmp_path / "out.ipynb"
    with pytest.raises(RunTimeoutError):
        execute_notebook(src, out, {}, cwd=str(run_dir), pool=pool if warm else None, timeout_s=3)
    pid = int((run_dir / "kernel.pid").read_text())
    assert not psutil.pid_exists(pid)
    nb = json.loads(out.read_text())  # the interrupted cell is recorded, papermill-style
    errors = [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert errors
    assert errors[0]["ename"] == "KeyboardInterrupt"


def test_timeout_kills_a_kernel_that_ignores_interrupts(
    pool: KernelPool, tmp_path: Path, run_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(watchdog, "INTERRUPT_GRACE_S", 0.5)
    src = notebook(
        tmp_path / "in.ipynb",
        WRITE_PID,
        "import signal, time\nsignal.signal(signal.SIGINT, signal.SIG_IGN)\ntime.sleep(60)",
    )
    with pytest.raises(RunTimeoutError):
        execute_notebook(src, tmp_path / "out.ipynb", {}, cwd=str(run_dir), pool=pool, timeout_s=2)
    assert not psutil.pid_exists(int((run_dir / "kernel.pid").read_text()))


@pytest.mark.parametrize("warm", [True, False], ids=["warm_pool", "papermill_default"])
def test_cancel_ends_the_kernel(
    warm: bool, pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", WRITE_PID, "import time\ntime.sleep(60)")
    cancel = threading.Event()
    pids: list[int] = []

    def cancel_when_running() -> None:
        pids.append(wait_for_pid(run_dir))
        cancel.set()

    canceller = threading.Thread(target=cancel_when_running)
    canceller.start()
    with pytest.raises(RunCancelledError):
        execute_notebook(
            src,
            tmp_path / "out.ipynb",
            {},
            cwd=str(run_dir),
            pool=pool if warm else None,
            cancel=cancel,
        )
    canceller.join()
    assert gone(pids[0], within=0.1)


@pytest.mark.parametrize("warm", [True, False], ids=["warm_pool", "papermill_default"])
def test_timeout_while_the_kernel_starts(
    warm: bool,
    pool: KernelPool,
    tmp_path: Path,
    run_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(watchdog, "INTERRUPT_GRACE_S", 0.1)
    src = notebook(tmp_path / "in.ipynb", WRITE_PID)
    before = kernel_children()
    # An unforked start is slow enough for the limit to pass while it starts.
    with KernelPool(size=0, forked=False) as cold_pool, pytest.raises(RunTimeoutError):
        execute_notebook(
            src,
            tmp_path / "out.ipynb",
            {},
            cwd=str(run_dir),
            pool=cold_pool if warm else None,
            timeout_s=0.2,
        )
    assert not (run_dir / "kernel.pid").exists()
    # Only the module pool's (background) kernels may have appeared meanwhile.
    assert kernel_children() - before <= set(pool.kernel_pids())


def test_cancelled_before_it_starts(tmp_path: Path, run_dir: Path) -> None:
    cancel = threading.Event()
    cancel.set()
    with pytest.raises(RunCancelledError):
        execute_notebook(
            notebook(tmp_path / "in.ipynb", WRITE_PID),
            tmp_path / "out.ipynb",
            {},
            cwd=str(run_dir),
            pool=None,
            cancel=cancel,
        )
    assert not (tmp_path / "out.ipynb").exists()
