"""What the executor stores from a kernel is storable (:mod:`nbcast.executor.storable`),
and left-over run folders are swept (:func:`nbcast.executor.attempt.sweep_run_folders`).
The end-to-end cases, on both databases, are in ``test_hostile_reports.py``."""

from __future__ import annotations

import json
import math
import os
import time
from pathlib import Path

from nbcast.executor.attempt import STALE_RUN_FOLDER_S, sweep_run_folders
from nbcast.executor.storable import (
    MAX_ERROR_TEXT,
    MAX_TRACEBACK_ENTRIES,
    MAX_USAGE_RECORDS,
    read_usage_file,
    storable_error,
    storable_text,
    storable_usage,
    without_surrogates,
)


def test_text_loses_nul_and_lone_surrogates_and_is_cut_first() -> None:
    assert storable_text("a\x00b\ud800c\udfff") == "a\\0b\ufffdc\ufffd"
    assert storable_text("x" * 10, 4) == "xxxx"
    assert storable_text("\x00" * 100_000) == "\\0" * (MAX_ERROR_TEXT // 2)
    assert storable_text(b"raw") == "b'raw'"
    storable_text("é\U0001f600").encode("utf-8")  # real characters stay


def test_an_error_is_bounded_and_storable() -> None:
    error = storable_error(
        {
            "ename": "E" * 1000 + "\x00",
            "evalue": "v\x00" * 10_000,
            "traceback": [f"line {i}\x00\ud800" for i in range(100)],
            "cell_index": 3,
            "nested": {"k\x00": [math.inf, {"deep": "\ud83d"}], "set": {1}},
        }
    )
    assert error is not None
    assert len(error["ename"]) == 200
    assert len(error["evalue"]) <= MAX_ERROR_TEXT
    assert len(error["traceback"]) == MAX_TRACEBACK_ENTRIES
    assert error["traceback"][-1] == "line 99\\0\ufffd"
    assert error["cell_index"] == 3
    assert error["nested"] == {"k\\0": [None, {"deep": "\ufffd"}], "set": [1]}
    text = json.dumps(error, ensure_ascii=False)
    assert "\\u0000" not in text
    text.encode("utf-8")
    assert storable_error(None) is None
    assert storable_error("not a mapping") == {"message": "not a mapping"}  # type: ignore[arg-type]


def test_usage_beyond_the_cap_is_summed_into_one_record() -> None:
    one = {"connection": "lake\x00", "sql_sha256": "f" * 100, "rows": 2, "bytes": 3, "seconds": 0.5}
    records = storable_usage([one] * (MAX_USAGE_RECORDS + 5))
    assert len(records) == MAX_USAGE_RECORDS
    assert records[0]["connection"] == "lake\\0"
    assert len(records[0]["sql_sha256"]) == 64
    last = records[-1]
    assert (last["connection"], last["rows"], last["bytes"]) == ("(more queries)", 12, 18)
    assert sum(r["rows"] for r in records) == 2 * (MAX_USAGE_RECORDS + 5)


def test_a_usage_file_with_garbage_is_read_line_by_line(tmp_path: Path) -> None:
    path = tmp_path / "usage.jsonl"
    good = {"run_id": 1, "tenant": "t", "connection": "c", "sql_sha256": "s", "rows": 1}
    lines = [
        json.dumps(good),
        "not json",
        json.dumps([1, 2]),
        json.dumps({**good, "rows": "many", "seconds": "nan", "connection": "\ud800"}),
        '{"half": ',  # a torn last line
    ]
    path.write_text("\n".join(lines))
    records = read_usage_file(path)
    assert [(r["connection"], r["rows"], r["seconds"]) for r in records] == [
        ("c", 1, 0.0),
        ("\ufffd", 0, 0.0),
    ]
    assert read_usage_file(tmp_path / "missing.jsonl") == []


def test_without_surrogates_keeps_clean_values_as_they_are() -> None:
    clean = {"text": "fine", "data": ["a", {"b": 1}]}
    assert without_surrogates(clean) is clean
    assert without_surrogates({"text": "a\ud800"}) == {"text": "a\ufffd"}


def test_left_over_run_folders_are_swept_when_stale(tmp_path: Path) -> None:
    now = time.time()
    stale = tmp_path / "run-1-attempt-1"
    fresh = tmp_path / "run-2-attempt-1"
    other = tmp_path / "keep-me"
    for folder in (stale, fresh, other):
        (folder / "sub").mkdir(parents=True)
        (folder / "sub" / "file").write_text("x")
    old = now - STALE_RUN_FOLDER_S - 60
    os.utime(stale, (old, old))
    os.utime(other, (old, old))
    assert sweep_run_folders(tmp_path, now=now) == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep-me", "run-2-attempt-1"]
    assert sweep_run_folders(tmp_path / "missing") == 0
