"""The review summary (:mod:`nbcast.definitions.review`): what a version changes for
recipients, in plain language, effective parameters first — the demo's daily-sales
v2 (a default hidden by the block) included."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

from nbcast.definitions.diff_html import diff_html
from nbcast.definitions.notebook import canonical_json, notebook_sha256
from nbcast.definitions.parameters import Parameter
from nbcast.definitions.queries import VersionInfo
from nbcast.definitions.review import MAX_ITEMS, review_summary

NOW = datetime(2026, 12, 3, 12, 0, tzinfo=UTC)  # a Thursday
SCHEDULE = {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"}
CFO = {"channel": "email", "to": "cfo@example.com", "formats": ["pdf"]}


def version(
    number: int,
    block: dict[str, Any],
    defaults: dict[str, Any],
    source: str = "print(1)",
) -> VersionInfo:
    notebook = {
        "cells": [
            {"cell_type": "code", "id": "body", "metadata": {}, "source": source, "outputs": []}
        ],
        "metadata": {"nbcast": block},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    schema = tuple(
        Parameter(
            name=name,
            type=type(value).__name__,
            default=value,
            help="",
            line=i + 1,
        )
        for i, (name, value) in enumerate(defaults.items())
    )
    return VersionInfo(
        definition="daily-sales",
        version=number,
        sha256=notebook_sha256(notebook),
        author="ana",
        message="",
        created_at=NOW,
        schema=schema,
        block=block,
        notebook_json=canonical_json(notebook),
    )


def lines(old: VersionInfo, new: VersionInfo) -> list[tuple[str, str, bool]]:
    return [(i.section, i.text, i.warning) for i in review_summary(old, new, NOW).items]


def test_a_default_hidden_by_the_block_is_flagged_not_shown_as_a_change() -> None:
    """The demo's v2: the cell's top_n 10 → 5, the block keeps 15 — runs still get 15."""
    block = {
        "parameters": {"top_n": 15},
        "schedule": SCHEDULE,
        "subscriptions": [CFO],
        "outputs": ["pdf"],
    }
    old = version(1, block, {"top_n": 10, "region": "EMEA"})
    new = version(2, block, {"top_n": 5, "region": "EMEA"})
    assert lines(old, new) == [
        (
            "parameters",
            "top_n: default 10 → 5; runs still use 15 from the metadata block",
            True,
        )
    ]
    text = "\n".join(review_summary(old, new, NOW).lines())
    assert "! top_n: default 10 → 5; runs still use 15" in text
    assert "10 → 5\n" not in text  # never the bare default change a reader would trust


def test_effective_changes_schedule_recipients_outputs_and_code_in_that_order() -> None:
    old = version(
        1,
        {
            "parameters": {"top_n": 15},
            "schedule": SCHEDULE,
            "subscriptions": [CFO],
            "outputs": ["html", "pdf"],
        },
        {"top_n": 10, "region": "EMEA"},
    )
    new_block = {
        "parameters": {"top_n": 20, "day": {"$period": "slot", "steps": [{"days": -1}]}},
        "schedule": {**SCHEDULE, "cron": "0 6 * * 1-5"},
        "subscriptions": [
            {**CFO, "formats": ["pdf", "xlsx"]},
            {"channel": "slack", "to": "#sales", "parameters": {"region": "APAC"}},
        ],
        "outputs": ["html", "pdf", "xlsx"],
    }
    new = version(2, new_block, {"top_n": 10, "region": "EMEA", "day": "2026-01-01"}, "print(2)")
    got = lines(old, new)
    day = '{"$period": "slot", "steps": [{"days": -1}]}'
    assert got == [
        ("parameters", "top_n: runs with 15 → 20 (the metadata block)", False),
        ("parameters", f"new parameter day: runs with {day} (a binding)", False),
        ("schedule", "cron: 0 7 * * 1-5 → 0 6 * * 1-5", False),
        ("recipients", 'cfo@example.com (email): formats ["pdf"] → ["pdf", "xlsx"]', False),
        ("recipients", '#sales (slack) will receive it, with its own parameters '
                       '{"region": "APAC"}', False),
        ("outputs", "html, pdf → html, pdf, xlsx", False),
        ("code", "1 cell changed", False),
    ]  # fmt: skip
    summary = review_summary(old, new, NOW)
    # Friday 4 December 2026 is the next weekday: 07:00 before, 06:00 after (CET).
    assert summary.fires_before[0] == "Fri 2026-12-04 07:00 CET"
    assert summary.fires_after[0] == "Fri 2026-12-04 06:00 CET"
    assert len(summary.fires_after) == 3


def test_removed_recipients_and_unscheduling_are_said_plainly() -> None:
    old = version(1, {"schedule": SCHEDULE, "subscriptions": [CFO], "outputs": ["pdf"]}, {})
    new = version(2, {"subscriptions": [], "outputs": ["pdf"]}, {})
    assert lines(old, new) == [
        ("schedule", "no longer scheduled: it runs only on request", False),
        ("recipients", "cfo@example.com (email) will no longer receive it", False),
    ]
    assert review_summary(old, new, NOW).fires_after == ()


def test_a_huge_change_is_bounded_and_says_how_much_was_left_out() -> None:
    many = [{"channel": "email", "to": f"r{i}@example.com"} for i in range(MAX_ITEMS + 50)]
    old = version(1, {}, {})
    new = version(2, {"subscriptions": many}, {})
    summary = review_summary(old, new, NOW)
    assert len(summary.items) == MAX_ITEMS
    assert summary.more == 50
    assert summary.lines()[-1] == "… and 50 more changes"


def test_the_html_diff_opens_with_the_summary_escaped() -> None:
    old = version(1, {"subscriptions": [CFO], "outputs": ["pdf"]}, {})
    odd = {"channel": "email", "to": "<b>x</b>@example.com"}
    new = version(2, {"subscriptions": [odd], "outputs": ["pdf"]}, {})
    page = diff_html(old, new, review_summary(old, new, NOW))
    start = page.index("What changes for recipients")
    assert start < page.index(">Code<")
    assert "&lt;b&gt;x&lt;/b&gt;@example.com (email) will receive it" in page
    assert "<b>x</b>" not in page
