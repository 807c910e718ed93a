"""Byte-determinism: the same executed notebook renders to the same bytes, anywhere.

Two renders in this process, and two more in fresh processes started at different
moments with different ``TZ``, hash seeds and locales, must agree byte for byte for
every format. The HTML must not even depend on what papermill varies between two
runs of the same report (cell ids, timings in metadata).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import nbformat
import pytest

from nbcast.delivery.renderers import renderers
from tests.delivery import LATE, executed_sample, make_report

FORMATS = ("html", "pdf", "xlsx", "csv")
REPO = Path(__file__).resolve().parents[2]

RENDER_ALL = """
import hashlib, json, sys
import nbformat
from nbcast.delivery.renderers import renderers
from tests.delivery import LATE, make_report

notebook = nbformat.read(sys.argv[1], as_version=4)
report = make_report(late_by=LATE)
print(json.dumps({
    name: hashlib.sha256(renderers.create(name).render(notebook, report)).hexdigest()
    for name in sys.argv[2:]
}))
"""


@pytest.fixture(scope="module")
def executed() -> Any:
    return executed_sample()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@pytest.fixture(scope="module")
def in_process(executed: Any) -> dict[str, str]:
    """The digests of one render of each format in this process."""
    report = make_report(late_by=LATE)
    return {name: _sha256(renderers.create(name).render(executed, report)) for name in FORMATS}


@pytest.mark.parametrize("name", FORMATS)
def test_rendering_twice_in_one_process_gives_the_same_bytes(
    executed: Any, in_process: dict[str, str], name: str
) -> None:
    again = renderers.create(name).render(executed, make_report(late_by=LATE))
    assert _sha256(again) == in_process[name]


def test_renders_in_other_processes_at_other_moments_give_the_same_bytes(
    executed: Any, in_process: dict[str, str], tmp_path: Path
) -> None:
    path = tmp_path / "executed.ipynb"
    nbformat.write(executed, path)
    answers = []
    settings = (("Pacific/Auckland", "1", "C.UTF-8"), ("America/Los_Angeles", "2", "C"))
    for tz, seed, locale in settings:
        began = time.time()
        env = {**os.environ, "TZ": tz, "PYTHONHASHSEED": seed, "LC_ALL": locale}
        env.pop("SOURCE_DATE_EPOCH", None)
        done = subprocess.run(
            [sys.executable, "-c", RENDER_ALL, str(path), *FORMATS],
            cwd=REPO,
            env=env,
            capture_output=True,
            text=True,
            check=True,
            timeout=120,
        )
        answers.append(json.loads(done.stdout.strip().splitlines()[-1]))
        # Zip dates have a 2-second resolution: make sure the clock moved on.
        time.sleep(max(0.0, 2.1 - (time.time() - began)))
    assert answers[0] == answers[1] == in_process


def test_html_does_not_depend_on_what_papermill_varies_between_runs(executed: Any) -> None:
    report = make_report()
    first = renderers.create("html").render(executed, report)
    rerun = nbformat.from_dict(json.loads(json.dumps(executed)))
    for index, cell in enumerate(rerun.cells):
        cell["id"] = f"another-random-id-{index}"
        cell.metadata["papermill"] = {"start_time": "2030-01-01T00:00:00", "duration": index}
        cell.metadata["execution"] = {"iopub.execute_input": "2030-01-01T00:00:00"}
    rerun.metadata["papermill"]["start_time"] = "2030-01-01T00:00:00"
    assert renderers.create("html").render(rerun, report) == first


def test_the_slot_not_the_clock_dates_the_containers(executed: Any) -> None:
    earlier = make_report(fire_at=make_report().fire_at.replace(year=2025))
    for name in ("xlsx", "pdf"):
        one = renderers.create(name).render(executed, make_report())
        other = renderers.create(name).render(executed, earlier)
        assert one != other, f"{name} should carry the slot's date"
