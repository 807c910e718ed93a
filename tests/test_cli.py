"""The nbcast command: happy paths, and bad input that exits 2 and writes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.db import Database
from tests.command import run
from tests.notebooks import make_notebook

TABLES = ("tenants", "users", "report_definitions", "definition_versions")


def _counts(url: str) -> dict[str, int]:
    db = Database.open(url)
    with db.engine.connect() as conn:
        counts = {
            t: conn.execute(sa.text(f"SELECT count(*) FROM {t}")).scalar_one() for t in TABLES
        }
    db.dispose()
    return counts


def test_publish_list_show_versions_diff_export(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(tmp_path / "kpi.ipynb", nbcast={"schedule": {"cron": "30 6 * * 1"}})
    assert run(capsys, "publish", str(path), "-m", "first")[1].startswith("published kpi v1")
    code, out, _ = run(capsys, "publish", str(path))
    assert code == 0
    assert "unchanged, still v1" in out
    make_notebook(path, body="print('v2')", nbcast={"schedule": {"cron": "30 6 * * 1"}})
    code, out, _ = run(capsys, "publish", str(path), "-m", "second", "--json")
    assert json.loads(out)["version"] == 2
    code, out, _ = run(capsys, "definitions", "list", "--json")
    assert [(d["name"], d["latest_version"]) for d in json.loads(out)] == [("kpi", 2)]
    code, out, _ = run(capsys, "versions", "kpi", "--json")
    assert [(v["version"], v["author"], v["message"]) for v in json.loads(out)] == [
        (1, "tester", "first"),
        (2, "tester", "second"),
    ]
    code, out, _ = run(capsys, "definitions", "show", "kpi", "--version", "1", "--json")
    assert json.loads(out)["parameters"][0]["name"] == "region"
    code, out, _ = run(capsys, "diff", "kpi", "1", "2")
    assert code == 0
    assert "print('v2')" in out
    code, out, _ = run(capsys, "diff", "kpi", "1", "2", "--json")
    assert json.loads(out)["diff"]
    target = tmp_path / "exported.ipynb"
    assert run(capsys, "export", "kpi", "--version", "1", "-o", str(target))[0] == 0
    exported = json.loads(target.read_text())
    assert "".join(exported["cells"][1]["source"]) == "print(region)"


def test_a_notebook_without_parameters_is_fine(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(tmp_path / "plain.ipynb", parameters=None, body="1 + 1")
    code, out, _ = run(capsys, "publish", str(path))
    assert code == 0
    code, out, _ = run(capsys, "definitions", "show", "plain", "--json")
    assert json.loads(out)["parameters"] == []


def _bad_files(tmp_path: Path) -> dict[str, tuple[Path, str]]:
    not_json = tmp_path / "not_json.ipynb"
    not_json.write_text("{oops")
    not_nb = tmp_path / "not_nb.ipynb"
    not_nb.write_text(
        json.dumps(
            {"cells": [{"cell_type": "bogus"}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}
        )
    )
    md_tag = make_notebook(
        tmp_path / "md_tag.ipynb",
        parameters=None,
        extra_cells=[
            {
                "cell_type": "markdown",
                "id": "m",
                "metadata": {"tags": ["parameters"]},
                "source": "x = 1",
            }
        ],
    )
    return {
        "not-json": (not_json, "not JSON"),
        "not-a-notebook": (not_nb, "not a valid notebook"),
        "missing-file": (tmp_path / "missing.ipynb", "no such file"),
        "tag-on-markdown": (md_tag, "markdown cell tagged 'parameters'"),
        "code-in-parameters": (
            make_notebook(tmp_path / "code.ipynb", parameters="import os\nx = os.getcwd()"),
            "parameters cell, line 1",
        ),
        "bad-zone": (
            make_notebook(
                tmp_path / "zone.ipynb",
                nbcast={"schedule": {"cron": "0 7 * * *", "timezone": "Mars/Olympus"}},
            ),
            "schedule.timezone: 'Mars/Olympus' is not an IANA time zone",
        ),
        "bad-cron": (
            make_notebook(tmp_path / "cron.ipynb", nbcast={"schedule": {"cron": "0 25 * * *"}}),
            "schedule.cron",
        ),
        "bad-parameter-value": (
            make_notebook(tmp_path / "pv.ipynb", nbcast={"parameters": {"top_n": "ten"}}),
            "parameters.top_n: expected int",
        ),
        "duplicate-name": (make_notebook(tmp_path / "other" / "kpi.ipynb"), "was published from"),
    }


@pytest.mark.parametrize(
    "case",
    [
        "not-json",
        "not-a-notebook",
        "missing-file",
        "tag-on-markdown",
        "code-in-parameters",
        "bad-zone",
        "bad-cron",
        "bad-parameter-value",
        "duplicate-name",
    ],
)
def test_bad_input_exits_2_with_one_line_and_writes_nothing(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], case: str
) -> None:
    assert run(capsys, "publish", str(make_notebook(tmp_path / "kpi.ipynb")))[0] == 0
    before = _counts(use_db)
    path, message = _bad_files(tmp_path)[case]
    code, out, err = run(
        capsys, "publish", str(path), "--name", "kpi" if case == "duplicate-name" else "fresh-name"
    )
    assert code == 2
    assert out == ""
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith("error: ")
    assert message in err
    assert _counts(use_db) == before


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["versions", "nope"], id="unknown-definition"),
        pytest.param(["diff", "nope", "1", "2"], id="unknown-diff"),
        pytest.param(["export", "nope", "-o", "x.ipynb"], id="unknown-export"),
    ],
)
def test_unknown_names_exit_2(
    use_db: str, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    code, _, err = run(capsys, *argv)
    assert code == 2
    assert "no definition named 'nope'" in err


def test_usage_errors_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(capsys, "publish")[0] == 2
    assert run(capsys, "no-such-command")[0] == 2


def test_db_upgrade(capsys: pytest.CaptureFixture[str], nbcast_home: Path) -> None:
    code, out, _ = run(capsys, "db", "upgrade")
    assert code == 0
    assert "-> 0001" in out or "-> " in out
    assert (nbcast_home / "nbcast.db").exists()


def test_diff_opens_with_what_changes_and_colours_when_asked_even_piped(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo's daily-sales v2 in small: the cell's default changes, the block's
    value is what runs — the summary says so first, flagged; then unified hunks."""
    block = {"parameters": {"top_n": 15}, "schedule": {"cron": "0 7 * * 1-5"}}
    path = make_notebook(tmp_path / "sales.ipynb", 'region = "EMEA"\ntop_n = 10\n', nbcast=block)
    run(capsys, "publish", str(path))
    make_notebook(path, 'region = "EMEA"\ntop_n = 5\n', nbcast=block)
    code, _, err = run(capsys, "publish", str(path))
    assert "warning: parameters.top_n: the default changed 10 → 5, but runs use 15" in err
    code, out, _ = run(capsys, "diff", "sales", "1", "2")
    assert code == 0
    lines = out.splitlines()
    assert lines[:3] == [
        "## What changes for recipients (sales v1 → v2)",
        "Parameters:",
        "  ! top_n: default 10 → 5; runs still use 15 from the metadata block",
    ]
    assert "@@ -1,2 +1,2 @@" in out  # then the code, as unified hunks
    assert "\x1b[" not in out  # capsys is not a terminal: no colour by default
    code, out, _ = run(capsys, "diff", "sales", "1", "2", "--color")
    assert "\x1b[33m  ! top_n" in out
    assert "\x1b[31m-  top_n = 10" in out
    code, out, _ = run(capsys, "diff", "sales", "1", "2", "--json")
    assert json.loads(out)["summary"]["items"][0]["warning"] is True


def test_run_test_and_a_dry_run_of_a_slot(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    block = {
        "schedule": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
        "subscriptions": [{"channel": "email", "to": "cfo@example.com"}],
    }
    path = make_notebook(tmp_path / "sales.ipynb", nbcast=block)
    run(capsys, "publish", str(path))
    code, out, _ = run(capsys, "run", "sales", "--test", "--to", "me@example.com")
    assert code == 0
    assert "queued a test run of sales v1: run 1" in out
    assert "it goes only to me@example.com, marked TEST" in out
    argv = ["run", "sales", "--test", "--nobody", "--slot", "2099-01-05T07:00", "--json"]
    code, out, _ = run(capsys, *argv)
    assert code == 0
    (dry,) = json.loads(out)["runs"]
    assert (dry["kind"], dry["slot_key"], dry["to"]) == ("test", "2099-01-05T07:00", [])
    code, out, _ = run(capsys, "runs", "show", str(dry["id"]))
    assert "2099-01-05T07:00 (a dry run of it)" in out
    assert "no one (TEST)" in out
    code, out, _ = run(capsys, "runs", "list", "--kind", "test", "--json")
    assert [r["test_to"] for r in json.loads(out)] == [["me@example.com"], []]
    code, _, err = run(capsys, "run", "sales", "--to", "me@example.com")
    assert (code, err.strip()) == (
        2,
        "error: --to, --nobody, --slot, --as and --version go with --test",
    )
    code, _, err = run(capsys, "run", "sales", "--test", "--slot", "2099-01-05T08:00")
    assert (code, err.strip()) == (2, "error: the schedule has no slot '2099-01-05T08:00'")


def test_publishing_to_a_channel_not_configured_here_says_so(
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delenv("NBCAST_SMTP_URL", raising=False)
    monkeypatch.delenv("NBCAST_SLACK_TOKEN", raising=False)
    subscriptions = [
        {"channel": "link", "to": "cfo@example.com"},
        {"channel": "slack", "to": "#sales"},
    ]
    path = make_notebook(tmp_path / "kpi.ipynb", nbcast={"subscriptions": subscriptions})
    code, out, err = run(capsys, "publish", str(path), "--json")
    assert code == 0
    line = (
        "subscriptions[1]: the slack channel is not configured here (set "
        "NBCAST_SLACK_TOKEN): deliveries to #sales fail no_channel until it is"
    )
    assert err.strip() == f"warning: {line}"
    assert json.loads(out)["warnings"] == [line]
    monkeypatch.setenv("NBCAST_SLACK_TOKEN", "xoxb-test")
    make_notebook(path, body="print(2)", nbcast={"subscriptions": subscriptions})
    code, _, err = run(capsys, "publish", str(path))
    assert (code, err) == (0, "")
