"""The scheduler's commands, end to end through ``nbcast``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.command import run
from tests.notebooks import make_notebook

RUN_KEYS = {"id", "definition", "slot_key", "kind", "state", "reason", "fire_at", "version"}


@pytest.fixture
def published(
    use_db: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> str:
    monkeypatch.setenv("NBCAST_CLOCK", "fixed:2026-03-07T00:00:00Z")
    path = make_notebook(
        tmp_path / "ny.ipynb",
        nbcast={
            "name": "ny",
            "schedule": {"cron": "30 2 * * *", "timezone": "America/New_York", "overlap": "allow"},
        },
    )
    assert run(capsys, "publish", str(path))[0] == 0
    return use_db


def test_tick_and_runs_list(published: str, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "scheduler", "tick", "--now", "2026-03-07T07:35:00Z", "--json")
    assert code == 0
    assert json.loads(out)["by_state"] == {"QUEUED": 1}
    code, out, _ = run(capsys, "scheduler", "tick", "--now", "2026-03-08T07:05:00Z", "--json")
    assert json.loads(out)["by_state"] == {"QUEUED": 1}
    code, out, _ = run(capsys, "runs", "list", "--json")
    items = json.loads(out)
    assert all(set(item) >= RUN_KEYS for item in items)
    assert [(r["slot_key"], r["fire_at"], r["kind"], r["state"]) for r in items] == [
        ("2026-03-07T02:30", "2026-03-07T07:30:00Z", "scheduled", "QUEUED"),
        ("2026-03-08T02:30", "2026-03-08T07:00:00Z", "scheduled", "QUEUED"),  # shifted
    ]
    code, out, _ = run(capsys, "runs", "list", "--definition", "ny", "--state", "missed", "--json")
    assert json.loads(out) == []
    code, out, _ = run(capsys, "runs", "list")
    assert "2026-03-08T02:30" in out


def test_pause_resume_backfill_and_manual_run(
    published: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert run(capsys, "scheduler", "tick", "--now", "2026-03-07T08:00:00Z")[0] == 0
    assert run(capsys, "pause", "ny")[1] == "ny: paused\n"
    monkeypatch.setenv("NBCAST_CLOCK", "fixed:2026-03-10T00:00:00Z")
    _, out, _ = run(capsys, "resume", "ny")
    assert "2 slots recorded SKIPPED (paused)" in out
    _, out, _ = run(
        capsys, "backfill", "ny", "--from", "2026-03-01T00:00:00Z", "--to", "2026-03-07T00:00:00Z"
    )
    assert out == "ny: 6 slots in range, 6 new backfill rows, 0 already recorded\n"
    # Bare dates are New York days: 1 March 00:00 EST, so the same six slots again.
    _code, out, _ = run(capsys, "backfill", "ny", "--from", "2026-03-01", "--to", "2026-03-07")
    assert out == "ny: 6 slots in range, 0 new backfill rows, 6 already recorded\n"
    _code, out, _ = run(capsys, "run", "ny", "-p", "top_n=3", "--json")
    assert json.loads(out)["kind"] == "manual"
    _, out, _ = run(capsys, "runs", "list", "--json")
    kinds = sorted({(r["kind"], r["state"], r["reason"]) for r in json.loads(out)}, key=str)
    assert kinds == sorted(
        {
            ("backfill", "QUEUED", None),
            ("scheduled", "QUEUED", None),
            ("scheduled", "SKIPPED", "paused"),
            ("manual", "QUEUED", None),
        },
        key=str,
    )


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(
            ["run", "ny", "-p", "top_n\nimport os\nx=1"],
            "not a valid parameter name",
            id="name-injection",
        ),
        pytest.param(["run", "ny", "-p", "top_n=ten"], "expected int", id="bad-value"),
        pytest.param(["runs", "list", "--state", "DONE"], "unknown run state", id="state"),
        pytest.param(
            ["backfill", "ny", "--from", "2026-03-05T00:00Z", "--to", "2026-03-01T00:00Z"],
            "--from must be before --to",
            id="backwards",
        ),
        pytest.param(
            ["backfill", "ny", "--from", "2026-02-30", "--to", "2026-03-05"],
            "2026-02-30 is not a calendar date",
            id="no-such-day",
        ),
        pytest.param(
            ["backfill", "ny", "--from", "2026-03-05", "--to", "2026-03-05"],
            "--from must be before --to",
            id="empty-days",
        ),
        pytest.param(
            ["backfill", "ny", "--from", "0001-01-01", "--to", "2026-03-05"],
            "is outside",
            id="ancient-day",
        ),
        pytest.param(["pause", "nope"], "no definition named 'nope'", id="unknown"),
        pytest.param(
            ["scheduler", "tick", "--now", "2026-03-08T07:05"], "no UTC offset", id="naive-now"
        ),
    ],
)
def test_bad_input_exits_2_and_writes_nothing(
    published: str, capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    code, out, err = run(capsys, *argv)
    assert code == 2
    assert message in err
    code, out, _ = run(capsys, "runs", "list", "--json")
    assert json.loads(out) == []


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        pytest.param(["--cron", "61 * * * *"], "61 is outside 0-59", id="cron"),
        pytest.param(["--cron", "* * * * *", "--tz", "Mars/Olympus"], "Mars/Olympus", id="zone"),
        pytest.param(
            ["--cron", "* * * * *", "--from", "2026-01-02T00:00Z", "--to", "2026-01-01T00:00Z"],
            "",
            id="from-after-to",
        ),
        pytest.param(
            ["--cron", "* * * * *", "--from", "2026-01-01T00:00Z", "--to", "2026-06-01T00:00Z"],
            "100,000",
            id="too-many",
        ),
        pytest.param(["--every", "soon"], "", id="duration"),
    ],
)
def test_preview_bad_input(
    capsys: pytest.CaptureFixture[str], argv: list[str], message: str
) -> None:
    args = ["schedule", "preview", *argv]
    if "--from" not in argv:
        args += ["--from", "2026-01-01T00:00Z", "--to", "2026-01-02T00:00Z"]
    code, out, err = run(capsys, *args)
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1
    assert message in err


def test_preview_json_has_exactly_the_documented_keys(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        capsys,
        "schedule",
        "preview",
        "--cron",
        "0 * * * *",
        "--tz",
        "America/New_York",
        "--from",
        "2026-11-01T04:00:00Z",
        "--to",
        "2026-11-02T05:00:00Z",
        "--json",
    )
    rows = json.loads(out)
    assert code == 0
    assert all(set(r) == {"slot_key", "local", "fire_at", "status", "reason"} for r in rows)
    assert len([r for r in rows if r["slot_key"].startswith("2026-11-01")]) == 25


def _scheduler(env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "nbcast", "scheduler", "run", "--max-sleep", "0.2"],
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.kernels
@pytest.mark.parametrize("second_home", ["same", "other"], ids=["same_home", "other_home"])
def test_sqlite_allows_one_scheduler_and_sigterm_stops_it(
    nbcast_home: Path, tmp_path: Path, second_home: str
) -> None:
    """The lock belongs to the database file: a second scheduler is refused even from
    another home folder pointed at the same database."""
    env = {**os.environ, "NBCAST_HOME": str(nbcast_home)}
    env.pop("NBCAST_DATABASE_URL", None)
    first = _scheduler(env)
    other = dict(env)
    if second_home == "other":
        other["NBCAST_HOME"] = str(tmp_path / "another-home")
        other["NBCAST_DATABASE_URL"] = f"sqlite:///{nbcast_home / 'nbcast.db'}"
    try:
        deadline = time.time() + 30
        while not (nbcast_home / "nbcast.db.scheduler.pid").exists() and time.time() < deadline:
            time.sleep(0.1)
        second = subprocess.run(
            [sys.executable, "-m", "nbcast", "scheduler", "run"],
            env=other,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert second.returncode == 2
        assert "another nbcast scheduler" in second.stderr
        assert len(second.stderr.strip().splitlines()) == 1
    finally:
        first.send_signal(signal.SIGTERM)
        output, _ = first.communicate(timeout=30)
    assert first.returncode == 0
    assert "received SIGTERM; stopping" in output
    assert "stopped" in output
