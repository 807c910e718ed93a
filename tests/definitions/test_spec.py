"""Syntax checks of the nbcast metadata block, with messages that name the field."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from nbcast.definitions.parameters import parse_parameters_cell
from nbcast.definitions.spec import (
    DstFold,
    DstGap,
    MisfirePolicy,
    OutputFormat,
    OverlapPolicy,
    parse_spec,
)
from nbcast.durations import parse_duration
from nbcast.errors import MetadataError

SCHEMA = parse_parameters_cell('region = "EMEA"\ntop_n = 10\n')

FULL = {
    "name": "daily-sales",
    "schedule": {
        "cron": "0 7 * * 1-5",
        "timezone": "Europe/Berlin",
        "dst": {"gap": "shift", "fold": "last"},
        "misfire": {"policy": "run_all", "grace": "15m", "max_catchup": 5},
        "overlap": "buffer_one",
        "staleness": {"after": "40m", "action": "suppress"},
        "start": "2026-01-01T00:00",
        "jitter": "30s",
    },
    "parameters": {"region": "APAC"},
    "outputs": ["html", "pdf", "xlsx"],
    "subscriptions": [
        {"channel": "email", "to": "cfo@example.com", "formats": ["pdf"]},
        {"channel": "slack", "to": "#sales", "only_if": "changed"},
    ],
}


def test_a_full_block_parses_into_typed_policies() -> None:
    spec = parse_spec(FULL, SCHEMA)
    assert spec.name == "daily-sales"
    assert spec.schedule is not None
    assert spec.schedule.dst_gap is DstGap.shift
    assert spec.schedule.dst_fold is DstFold.last
    assert spec.schedule.misfire is MisfirePolicy.run_all
    assert spec.schedule.grace == timedelta(minutes=15)
    assert spec.schedule.max_catchup == 5
    assert spec.schedule.overlap is OverlapPolicy.buffer_one
    assert spec.schedule.staleness_after == timedelta(minutes=40)
    assert spec.outputs == (OutputFormat.html, OutputFormat.pdf, OutputFormat.xlsx)
    assert spec.subscriptions[1].formats == spec.outputs  # default: every output
    assert spec.parameters == {"region": "APAC"}


def test_defaults_when_keys_are_absent() -> None:
    spec = parse_spec({"schedule": {"every": "15m"}})
    assert spec.schedule is not None
    assert spec.schedule.every == timedelta(minutes=15)
    assert spec.schedule.timezone == "UTC"
    assert spec.schedule.misfire is MisfirePolicy.run_latest
    assert spec.schedule.grace == timedelta(minutes=10)
    assert spec.schedule.overlap is OverlapPolicy.skip
    assert parse_spec(None).outputs == (OutputFormat.html,)


def _with(path: str, value: Any) -> dict[str, Any]:
    import copy

    block = copy.deepcopy(FULL)
    keys = path.split(".")
    target = block
    for key in keys[:-1]:
        target = target[key]
    target[keys[-1]] = value
    return block


@pytest.mark.parametrize(
    ("block", "message"),
    [
        pytest.param(
            _with("schedule.timezone", "Mars/Olympus"),
            "schedule.timezone: 'Mars/Olympus' is not an IANA time zone",
            id="zone",
        ),
        pytest.param(
            _with("schedule.timezone", "../../etc/passwd"),
            "schedule.timezone: '../../etc/passwd' is not an IANA time zone",
            id="zone-path",
        ),
        pytest.param(
            _with("schedule.cron", "61 * * * *"),
            "schedule.cron: cron minute: 61 is outside 0-59",
            id="cron-range",
        ),
        pytest.param(
            _with("schedule.cron", "0 7 * *"),
            "schedule.cron: cron: '0 7 * *' has 4",
            id="cron-fields",
        ),
        pytest.param(
            _with("schedule.dst", {"gap": "jump"}),
            "schedule.dst.gap: 'jump' is not one of auto|shift|skip",
            id="gap-enum",
        ),
        pytest.param(
            _with("schedule.misfire", {"policy": "later"}),
            "schedule.misfire.policy: 'later' is not one of",
            id="misfire-enum",
        ),
        pytest.param(
            _with("schedule.misfire", {"grace": "soon"}),
            "schedule.misfire.grace: 'soon' is not a duration",
            id="duration",
        ),
        pytest.param(
            _with("schedule.overlap", "queue"), "schedule.overlap: 'queue'", id="overlap-enum"
        ),
        pytest.param(
            _with("schedule.every", "5m"),
            "schedule: needs exactly one of 'cron' or 'every'",
            id="cron-and-every",
        ),
        pytest.param(_with("schedule.crn", "* * * * *"), "schedule.crn: unknown key", id="typo"),
        pytest.param(
            _with("schedule.start", "2026-01-01T00:00+01:00"),
            "schedule.start: is a local wall time",
            id="start-offset",
        ),
        pytest.param(
            _with("outputs", ["html", "docx"]),
            "outputs[1]: 'docx' is not one of html|pdf|xlsx|csv",
            id="format",
        ),
        pytest.param(
            _with("subscriptions", [{"channel": "fax", "to": "x"}]),
            "subscriptions[0].channel: 'fax'",
            id="channel",
        ),
        pytest.param(
            _with("subscriptions", [{"channel": "email", "to": "not-an-address"}]),
            "subscriptions[0].to: 'not-an-address' is not an email",
            id="email",
        ),
        pytest.param(
            _with("subscriptions", [{"channel": "email", "to": "a@b.co", "formats": ["csv"]}]),
            "subscriptions[0].formats: 'csv' is not in outputs",
            id="format-not-output",
        ),
        pytest.param(
            _with("parameters", {"regoin": "APAC"}),
            "parameters.regoin: 'regoin' is not declared",
            id="param-undeclared",
        ),
        pytest.param(
            _with("parameters", {"top_n": "ten"}),
            "parameters.top_n: expected int",
            id="param-type",
        ),
        pytest.param(_with("name", "bad name!"), "name: 'bad name!' must match", id="name"),
        pytest.param({"sceduleee": {}}, "sceduleee: unknown key", id="top-typo"),
        pytest.param(
            _with("retry_on", "ConnectionError"), "retry_on: must be a list", id="retry-on-text"
        ),
        pytest.param(
            _with("retry_on", ["ConnectionError", "import os"]),
            "retry_on[1]: 'import os' is not an exception name",
            id="retry-on-name",
        ),
        pytest.param(
            _with("retry_on", [f"E{i}" for i in range(21)]),
            "retry_on: lists more than 20",
            id="retry-on-many",
        ),
        pytest.param(
            _with("retry_on", [3]), "retry_on[0]: must be an exception name", id="retry-on-int"
        ),
    ],
)
def test_errors_name_the_field(block: dict[str, Any], message: str) -> None:
    with pytest.raises(MetadataError) as info:
        parse_spec(block, SCHEMA)
    assert message in str(info.value)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("90s", timedelta(seconds=90)),
        ("10m", timedelta(minutes=10)),
        ("1h30m", timedelta(hours=1, minutes=30)),
        ("2d", timedelta(days=2)),
        ("1w", timedelta(weeks=1)),
        ("0", timedelta(0)),
    ],
)
def test_durations(text: str, expected: timedelta) -> None:
    assert parse_duration(text) == expected


@pytest.mark.parametrize("text", ["", "10", "m", "1h 30m", "10min", "-5m"])
def test_bad_durations(text: str) -> None:
    with pytest.raises(ValueError, match="not a duration"):
        parse_duration(text)


def test_retry_on_keeps_each_name_once_in_order() -> None:
    spec = parse_spec({"retry_on": ["TimeoutError", "a.b.ConnectionError", "TimeoutError"]})
    assert spec.retry_on == ("TimeoutError", "a.b.ConnectionError")
    assert parse_spec({}).retry_on == ()


def test_a_stored_retry_on_that_no_longer_validates_retries_nothing() -> None:
    from nbcast.definitions.compiled import compile_retry_on

    assert compile_retry_on({"retry_on": ["ValueError"]}) == ("ValueError",)
    assert compile_retry_on({"retry_on": "ValueError"}) == ()
    assert compile_retry_on({"name": "x"}) == ()
    assert compile_retry_on(None) == ()


@pytest.mark.parametrize(
    ("ename", "retry_on", "retried"),
    [
        ("ConnectionError", ("ConnectionError",), True),
        ("Timeout", ("requests.exceptions.Timeout",), True),
        ("requests.exceptions.Timeout", ("Timeout",), True),
        ("ValueError", ("ConnectionError",), False),
        ("ConnectionResetError", ("ConnectionError",), False),  # a class name, no hierarchy
        ("ValueError", (), False),
        ("BudgetExhausted", (), True),  # the tenant's budget, not the report: always
    ],
)
def test_which_of_the_reports_exceptions_are_retried(
    ename: str, retry_on: tuple[str, ...], retried: bool
) -> None:
    from nbcast.executor.attempt import retried_error

    assert retried_error(ename, retry_on) is retried
