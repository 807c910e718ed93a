"""Output limits with real kernels (:mod:`nbcast.executor.output_limits`): a flood is
stopped while it runs, its kernel is gone when :func:`execute_notebook` returns, and
the notebook kept is within the limit — on a pooled (forked) kernel and on one the
engine starts itself. Worker-level behaviour (the run's reason, no retry, another
tenant unaffected) is in ``test_hostile_reports.py``."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from nbcast.errors import OutputTooLargeError, RunTimeoutError
from nbcast.executor.attempt import AttemptJob, execute_attempt
from nbcast.executor.kernels import KernelPool
from nbcast.executor.notebook_runner import execute_notebook
from nbcast.executor.output_limits import (
    DEFAULT_CELL_BYTES,
    MAX_LIMIT_BYTES,
    OutputBudget,
    OutputLimits,
    message_bytes,
)
from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(180)

WRITE_PID = "import os\nopen('kernel.pid', 'w').write(str(os.getpid()))"


@pytest.fixture(scope="module")
def pool() -> Iterator[KernelPool]:
    with KernelPool(size=1) as made:
        yield made


@pytest.fixture
def run_dir(tmp_path: Path) -> Path:
    folder = tmp_path / "run"
    folder.mkdir()
    return folder


def notebook(path: Path, *bodies: str) -> Path:
    extra = [
        {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": body, "outputs": []}
        for i, body in enumerate(bodies[1:])
    ]
    for cell in extra:
        cell["execution_count"] = None
    return make_notebook(path, parameters=None, body=bodies[0], extra_cells=extra)


def gone(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


FLOODS = {
    "endless_prints": 'while True:\n    print("z" * 100000)',
    "one_huge_print": 'print("y" * 150_000_000)',
    "endless_displays": (
        "from IPython.display import HTML, display\nwhile True:\n    display(HTML('h' * 500000))"
    ),
    "a_flood_under_the_message_size": (
        'import time\nwhile True:\n    print("z" * 10000)\n    time.sleep(0.001)'
    ),
}


@pytest.mark.parametrize("body", FLOODS.values(), ids=FLOODS)
@pytest.mark.parametrize("warm", [True, False], ids=["pooled", "unpooled"])
def test_a_flood_is_stopped_while_it_runs(
    body: str, warm: bool, pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    src = notebook(tmp_path / "in.ipynb", WRITE_PID, "print('before')", body, "print('after')")
    out = tmp_path / "out.ipynb"
    with pytest.raises(OutputTooLargeError) as caught:
        execute_notebook(src, out, {}, cwd=str(run_dir), pool=pool if warm else None)
    assert "output" in str(caught.value)
    assert caught.value.cell_index in (None, 2)
    assert gone(int((run_dir / "kernel.pid").read_text()))
    kept = out.read_bytes()
    assert len(kept) < DEFAULT_CELL_BYTES + 1024 * 1024
    cells = json.loads(kept)["cells"]
    text = "".join("".join(o.get("text", "")) for c in cells for o in c["outputs"])
    assert "before" in text
    assert "after" not in text  # nothing ran after the flood


def test_a_flood_counts_per_cell_and_per_run(tmp_path: Path, run_dir: Path) -> None:
    limits = OutputLimits(cell_bytes=4096, run_bytes=10_000)
    three_kib = 'print("x" * 3000)'
    src = notebook(tmp_path / "in.ipynb", three_kib, three_kib, three_kib, three_kib)
    out = tmp_path / "out.ipynb"
    with pytest.raises(OutputTooLargeError) as caught:
        execute_notebook(src, out, {}, cwd=str(run_dir), pool=None, output_limits=limits)
    assert "the run sent more than 10,000 bytes" in str(caught.value)
    assert caught.value.cell_index == 3
    cells = json.loads(out.read_text())["cells"]
    note = "".join(cells[3]["outputs"][-1]["text"])
    assert note.startswith("[nbcast] output stopped: the run sent more than 10,000 bytes")


def test_output_within_the_limits_is_kept_whole(pool: KernelPool, tmp_path: Path) -> None:
    body = 'for i in range(200):\n    print("line", i, "x" * 1000)'
    src = notebook(tmp_path / "in.ipynb", body)
    out = tmp_path / "out.ipynb"
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    execute_notebook(src, out, {}, cwd=str(run_dir), pool=pool)
    text = "".join(
        "".join(o.get("text", ""))
        for c in json.loads(out.read_text())["cells"]
        for o in c["outputs"]
    )
    assert text.count("line") == 200


def test_the_time_limit_holds_while_output_floods(
    pool: KernelPool, tmp_path: Path, run_dir: Path
) -> None:
    # Limits too high to be reached: the time limit must end the run, and promptly
    # enough that the call returns (a liveness guard, not a timing assertion).
    limits = OutputLimits(cell_bytes=MAX_LIMIT_BYTES, run_bytes=MAX_LIMIT_BYTES)
    src = notebook(tmp_path / "in.ipynb", WRITE_PID, FLOODS["a_flood_under_the_message_size"])
    outcome: list[BaseException] = []

    def run() -> None:
        try:
            execute_notebook(
                src,
                tmp_path / "out.ipynb",
                {},
                cwd=str(run_dir),
                pool=pool,
                timeout_s=2,
                output_limits=limits,
            )
        except BaseException as exc:
            outcome.append(exc)

    runner = threading.Thread(target=run, daemon=True)
    runner.start()
    runner.join(120)
    assert not runner.is_alive(), "the run did not end"
    assert isinstance(outcome[0], RunTimeoutError)
    assert gone(int((run_dir / "kernel.pid").read_text()))


def test_an_attempt_that_floods_fails_permanently_and_leaves_no_folder(
    pool: KernelPool, tmp_path: Path
) -> None:
    source = notebook(tmp_path / "in.ipynb", FLOODS["endless_prints"]).read_text()
    job = AttemptJob(
        run_id=7,
        attempt=1,
        tenant="default",
        definition="flood",
        label="nbcast:default/flood@manual-7",
        notebook_json=source,
        parameters={},
        timeout_s=120,
        work_dir=str(tmp_path / "runs"),
        artifacts=str(tmp_path / "artifacts"),
    )
    outcome = execute_attempt(job, pool=pool)
    assert (outcome.state.value, outcome.reason, outcome.retryable) == (
        "FAILED",
        "output_too_large",
        False,
    )
    assert outcome.error is not None
    assert outcome.error["reason"] == "output_too_large"
    assert outcome.artifact_sha256 is not None
    assert list((tmp_path / "runs").iterdir()) == []


def test_the_budget_counts_bytes_not_characters() -> None:
    budget = OutputBudget(OutputLimits(cell_bytes=2048, run_bytes=4096))
    stream = {"msg_type": "stream", "content": {"name": "stdout", "text": "é" * 1000}}
    assert message_bytes(stream, 10_000) >= 2000
    assert budget.add(0, stream) is None  # 2,000 bytes + the key names
    assert budget.add(0, stream) is not None  # past the cell's 2,048
    assert budget.add(1, {"msg_type": "status", "content": {"execution_state": "idle"}}) is None


@pytest.mark.parametrize(
    "limits",
    [
        {"cell_bytes": 0},
        {"run_bytes": MAX_LIMIT_BYTES + 1},
        {"cell_bytes": 2048, "run_bytes": 1024},
        {"cell_bytes": 1.5},
        {"run_bytes": True},
    ],
    ids=["zero", "over_the_maximum", "cell_over_run", "not_whole", "bool"],
)
def test_limits_are_bounded(limits: dict[str, object]) -> None:
    with pytest.raises(ValueError, match="bytes"):
        OutputLimits(**limits)  # type: ignore[arg-type]
