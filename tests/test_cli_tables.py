"""The CLI's shared table helper at 80 columns: keys, instants, ids and states are
never broken across lines or cut behind an ellipsis; free text folds instead."""

from __future__ import annotations

from typing import Any

import pytest
from rich.console import Console

import nbcast.cli.output as output

RUN_ROWS = [
    (
        1_234_567,
        "daily-sales-emea-regional-breakdown",
        "SKIPPED",
        "scheduled",
        "2026-11-01 05:30:00Z",
        "overlap: run 1234566 of this definition was still RUNNING at the slot's fire time, "
        "and the definition's overlap policy is skip",
    ),
    (7, "kpi", "SUCCEEDED", "backfill", "2026-10-19 10:30:00Z", ""),
]
DELIVERY_ROWS = [
    (
        99_001,
        1_234_567,
        "email",
        "a-very-long-recipient-address-for-the-regional-team@example.com",
        "SUPPRESSED",
        "unsubscribed",
        "2026-11-01 05:31:12Z",
    ),
]


@pytest.fixture
def narrow(monkeypatch: pytest.MonkeyPatch) -> Console:
    """The helper's console, 80 columns wide, recording what it prints."""
    recorded = Console(width=80, record=True, highlight=False, soft_wrap=False)
    monkeypatch.setattr(output, "console", lambda: recorded)
    return recorded


def _lines(console: Console) -> list[str]:
    return console.export_text().splitlines()


@pytest.mark.parametrize(
    ("columns", "rows", "whole"),
    [
        (
            ("id", "definition", "state", "kind", "fire at", "reason"),
            RUN_ROWS,
            ["1234567", "daily-sales-emea-regional-breakdown", "SKIPPED", "2026-11-01 05:30:00Z"],
        ),
        (
            ("id", "run", "channel", "recipient", "state", "reason", "updated"),
            DELIVERY_ROWS,
            ["99001", "1234567", "SUPPRESSED", "2026-11-01 05:31:12Z"],
        ),
    ],
    ids=["runs", "deliveries"],
)
def test_keys_and_instants_stay_whole_at_80_columns(
    narrow: Console, columns: tuple[str, ...], rows: list[tuple[Any, ...]], whole: list[str]
) -> None:
    output.table("title", columns, rows)
    lines = _lines(narrow)
    text = "\n".join(lines)
    assert "…" not in text
    for value in whole:
        assert any(value in line for line in lines), f"{value!r} was broken across lines"


def test_free_text_folds_and_keeps_every_word(narrow: Console) -> None:
    output.table(None, ("id", "state", "reason"), [(1, "SKIPPED", RUN_ROWS[0][5])])
    lines = _lines(narrow)
    assert len(lines) > 3  # the reason folded over several lines
    words = " ".join(lines).split()
    for word in str(RUN_ROWS[0][5]).split():
        assert word.rstrip(",") in " ".join(words)


def test_an_empty_table_prints_its_header(narrow: Console) -> None:
    output.table(None, ("id", "state"), [])
    assert ["id", "state"] in [line.split() for line in _lines(narrow)]


def test_rows_too_wide_for_the_console_become_blocks_that_keep_every_column(
    narrow: Console,
) -> None:
    output.table("runs", ("id", "definition", "state", "kind", "fire at", "reason"), RUN_ROWS)
    lines = _lines(narrow)
    assert "fire at     2026-11-01 05:30:00Z" in [line.rstrip() for line in lines]
    assert sum(line.startswith("record ") for line in lines) == len(RUN_ROWS)
    assert all(len(line) <= 80 for line in lines)


def test_a_table_that_fits_stays_a_table(monkeypatch: pytest.MonkeyPatch) -> None:
    wide = Console(width=160, record=True, highlight=False, soft_wrap=False)
    monkeypatch.setattr(output, "console", lambda: wide)
    output.table("runs", ("id", "definition", "state", "kind", "fire at", "reason"), RUN_ROWS)
    lines = _lines(wide)
    assert not any(line.startswith("record ") for line in lines)
    (row,) = [line for line in lines if line.startswith("1234567")]
    assert row.split()[:5] == ["1234567", RUN_ROWS[0][1], "SKIPPED", "scheduled", "2026-11-01"]


def _fold_preview_rows(with_parameters: bool) -> tuple[list[str], list[list[str]], list[bool]]:
    from datetime import UTC, datetime

    from nbcast.scheduler.preview import preview, table_cells

    rows: list[Any] = preview(
        cron="30 1 * * *",
        tz="America/New_York",
        dst_fold="both",
        range_from=datetime(2026, 10, 31, tzinfo=UTC),
        range_to=datetime(2026, 11, 3, tzinfo=UTC),
    )
    if with_parameters:
        for row in rows:
            row["parameters"] = {"day": "2026-10-30", "region": "north-america-east"}
    columns, cells = table_cells(rows)
    return columns, cells, [row["status"] == "skipped" for row in rows]


@pytest.mark.parametrize("with_parameters", [False, True], ids=["cron", "definition"])
@pytest.mark.parametrize("width", [80, 60])
def test_a_schedule_preview_never_breaks_a_key_time_or_title(
    monkeypatch: pytest.MonkeyPatch, width: int, with_parameters: bool
) -> None:
    """The demo's preview across the New York fall-back, through the CLI's table: every
    slot key, local time, fire time, status and column title stays on one line."""
    recorded = Console(width=width, record=True, highlight=False, soft_wrap=False)
    monkeypatch.setattr(output, "console", lambda: recorded)
    columns, cells, dim = _fold_preview_rows(with_parameters)
    output.table(None, columns, cells, wrap=["parameters"], dim=dim)
    lines = _lines(recorded)
    text = "\n".join(lines)
    assert "…" not in text
    assert all(len(line) <= width for line in lines)
    for row in cells:
        for value in row[:4]:
            assert any(value in line for line in lines), f"{value!r} was broken across lines"
    for title in columns:
        assert any(title in line for line in lines), f"title {title!r} was broken"
    if with_parameters:  # every parameter value is there, whole words
        assert "north-america-east" in text
