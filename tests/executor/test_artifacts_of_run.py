"""A failed attempt's traceback read from its executed notebook in a real artifact
store, and every way that read can fail turned into a reason."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nbcast.artifacts import LocalArtifactStore
from nbcast.executor.failures import PAPERMILL_ERROR_TAG, ErrorInfo
from nbcast.executor.records import AttemptRecord
from nbcast.views.run_files import (
    MAX_TRACEBACK_BYTES,
    MAX_TRACEBACK_LINES,
    NotebookUnavailable,
    attempt_traceback,
    format_traceback,
    read_artifact,
)

RED = "\x1b[0;31m"
RESET = "\x1b[0m"


def attempt(sha256: str | None, cell_index: int | None = 1) -> AttemptRecord:
    return AttemptRecord(
        attempt=1,
        outcome="FAILED",
        worker="w",
        host="h",
        engine="local",
        started_at=datetime(2026, 1, 1, tzinfo=UTC),
        artifact_sha256=sha256,
        error=ErrorInfo(ename="ValueError", evalue="bad", cell_index=cell_index),
    )


def error_output(traceback: list[str], ename: str = "ValueError") -> dict[str, Any]:
    return {"output_type": "error", "ename": ename, "evalue": "bad", "traceback": traceback}


def notebook(*cells: dict[str, Any]) -> bytes:
    return json.dumps({"cells": list(cells), "metadata": {}, "nbformat": 4}).encode()


def code(outputs: list[dict[str, Any]], tags: list[str] | None = None) -> dict[str, Any]:
    return {"cell_type": "code", "metadata": {"tags": tags or []}, "source": "", "outputs": outputs}


@pytest.fixture
def store(tmp_path: Path) -> LocalArtifactStore:
    return LocalArtifactStore(tmp_path / "artifacts")


def test_the_failing_cells_error_output_with_ansi_codes_stripped(
    store: LocalArtifactStore,
) -> None:
    banner = {"cell_type": "markdown", "metadata": {"tags": [PAPERMILL_ERROR_TAG]}, "source": ""}
    earlier = code([error_output(["an earlier, caught display"], ename="Other")])
    failing = code([error_output([f"{RED}ValueError{RESET}: bad", "Cell In[2], line 1"])])
    ref = store.put(notebook(banner, earlier, failing))
    found = attempt_traceback(store, attempt(ref.sha256, cell_index=1))
    assert found.unavailable is None
    assert found.text == "ValueError: bad\nCell In[2], line 1"
    # Without papermill's index, the first cell with an error output.
    assert attempt_traceback(store, attempt(ref.sha256, None)).text == "an earlier, caught display"


def test_each_unreadable_notebook_is_a_reason(store: LocalArtifactStore) -> None:
    assert attempt_traceback(store, attempt(None)).unavailable == (
        "the attempt left no executed notebook"
    )
    missing = attempt_traceback(store, attempt("a" * 64)).unavailable
    assert missing == "the executed notebook: it is not in the artifact store"
    not_json = store.put(b"\x00\xff not json")
    assert attempt_traceback(store, attempt(not_json.sha256)).unavailable == (
        "the executed notebook is not JSON"
    )
    a_list = store.put(b"[1, 2]")
    assert attempt_traceback(store, attempt(a_list.sha256)).unavailable == (
        "the executed notebook is not a notebook"
    )
    quiet = store.put(notebook(code([{"output_type": "stream", "text": "hi"}])))
    assert attempt_traceback(store, attempt(quiet.sha256)).unavailable == (
        "no cell of the executed notebook raised an error"
    )


def test_a_long_traceback_is_cut_to_its_bounds() -> None:
    many = format_traceback(error_output([f"line {n}" for n in range(5000)]))
    lines = many.splitlines()
    assert len(lines) == MAX_TRACEBACK_LINES + 1
    assert lines[-1] == f"… cut at {MAX_TRACEBACK_LINES} lines / 64 KiB"
    wide = format_traceback(error_output(["x" * 1000] * 150))
    assert len(wide.encode()) <= MAX_TRACEBACK_BYTES + 100
    assert wide.endswith("lines / 64 KiB")
    assert format_traceback(error_output([])) == "ValueError: bad"
    assert format_traceback({"output_type": "error"}) == ("(an error without a name or a message)")


def test_an_artifact_over_the_limit_is_refused_unread(store: LocalArtifactStore) -> None:
    ref = store.put(b"x" * 101)
    assert read_artifact(store, ref.sha256, max_bytes=101) == b"x" * 101
    with pytest.raises(NotebookUnavailable, match=r"larger than the 0\.0 MB") as caught:
        read_artifact(store, ref.sha256, max_bytes=100)
    assert caught.value.status == 413
