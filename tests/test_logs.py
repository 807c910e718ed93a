"""Services log one line per event; ``NBCAST_LOG_FORMAT=json`` makes each a JSON object
with the service's structured fields, bounded in size."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

from nbcast.logs import MAX_FIELD, JsonFormatter

NBCAST = [sys.executable, "-m", "nbcast"]


def _record(message: str, **extra: object) -> logging.LogRecord:
    record = logging.LogRecord("nbcast.daemon", logging.ERROR, __file__, 1, message, (), None)
    for key, value in extra.items():
        setattr(record, key, value)
    return record


def test_a_json_line_holds_the_fields_and_is_bounded() -> None:
    try:
        raise ValueError("x" * (3 * MAX_FIELD))
    except ValueError:
        record = _record("boom %s", service="worker", event="iteration_failed", iterations=3)
        record.exc_info = sys.exc_info()
    line = JsonFormatter().format(record)
    assert "\n" not in line
    out = json.loads(line)
    assert (out["level"], out["logger"], out["service"], out["event"], out["iterations"]) == (
        "ERROR",
        "nbcast.daemon",
        "worker",
        "iteration_failed",
        3,
    )
    assert out["exc_type"] == "ValueError"
    assert len(out["exc"]) <= MAX_FIELD
    assert out["ts"].endswith("+00:00")


def test_a_service_logs_json_lines_with_its_events(tmp_path: Path) -> None:
    env = {
        **os.environ,
        "NBCAST_HOME": str(tmp_path / "home"),
        "NBCAST_LOG_FORMAT": "json",
        "NBCAST_HEARTBEAT_SECONDS": "0.1",
    }
    env.pop("NBCAST_DATABASE_URL", None)
    done = subprocess.run(
        [*NBCAST, "delivery-worker", "--exit-when-idle"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    lines = [json.loads(line) for line in done.stderr.splitlines() if line.startswith("{")]
    events = [(line.get("service"), line.get("event")) for line in lines if "event" in line]
    assert events == [("delivery-worker", "started"), ("delivery-worker", "stopped")]
    assert not any(line["logger"].startswith("weasyprint") for line in lines)


def test_an_unknown_log_format_is_one_error_line(tmp_path: Path) -> None:
    env = {**os.environ, "NBCAST_HOME": str(tmp_path / "home"), "NBCAST_LOG_FORMAT": "xml"}
    env.pop("NBCAST_DATABASE_URL", None)
    done = subprocess.run(
        [*NBCAST, "delivery-worker", "--exit-when-idle"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: NBCAST_LOG_FORMAT must be one of text, json, not 'xml'"
    ]
