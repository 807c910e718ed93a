"""Allowed values (:mod:`nbcast.definitions.allowed`): choices, bounds and patterns from
the metadata block or a ``Literal[...]`` annotation, checked where they are declared
and wherever values are — publish, run now, a run's resolved values — bounded."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.allowed import MAX_CHOICES, PATTERN_TIMEOUT_S, Allowed
from nbcast.definitions.parameters import (
    parse_parameters_cell,
    schema_from_json,
    schema_to_json,
    validate_parameters,
)
from nbcast.definitions.queries import get_version
from nbcast.definitions.versions import publish
from nbcast.errors import MetadataError, ParametersCellError, ParameterValueError
from nbcast.scheduler.control import run_now
from tests.notebooks import make_notebook

ALICE = Caller(tenant="default", user="t")
CELL = 'region = "ALL"\ntop_n = 10\nday = "2026-01-01"\n'
ALLOWED = {
    "region": ["EMEA", "AMER", "APAC", "LATAM", "ALL"],
    "top_n": {"min": 1, "max": 50},
    "day": {"pattern": r"\d{4}-\d{2}-\d{2}"},
}


def define(tmp_path: Path, db: Database, block: dict[str, Any], cell: str = CELL) -> None:
    path = make_notebook(
        tmp_path / "sales.ipynb", parameters=cell, nbcast={"name": "sales", **block}
    )
    publish(db, path, caller=ALICE)


def test_values_outside_the_rules_are_refused_before_a_run_is_queued(
    db: Database, tmp_path: Path
) -> None:
    define(tmp_path, db, {"allowed": ALLOWED})
    clock = FixedClock(datetime(2026, 12, 3, 12, 0, tzinfo=UTC))
    with pytest.raises(ParameterValueError) as refused:
        run_now(db, clock, ALICE, "sales", {"region": "MARS", "top_n": 0, "day": "today"})
    assert refused.value.problems == (
        "region: 'MARS' is not one of EMEA, AMER, APAC, LATAM, ALL",
        "top_n: 0 is below the minimum 1",
        r"day: 'today' does not match '\\d{4}-\\d{2}-\\d{2}'",
    )
    assert run_now(db, clock, ALICE, "sales", {"region": "EMEA", "top_n": 50}) > 0
    # The stored schema carries the rules: the API, the Lab and the CLI read them there.
    with db.session() as session:
        version = get_version(session, ALICE, "sales", 1)
    region = next(p for p in version.schema if p.name == "region")
    assert region.allowed is not None
    assert region.allowed.choices == ALLOWED["region"]
    assert schema_from_json(schema_to_json(version.schema)) == version.schema


@pytest.mark.parametrize(
    ("allowed", "field", "message"),
    [
        ({"nope": ["x"]}, "allowed.nope", "not declared"),
        ({"region": ["EMEA"]}, "allowed.region", "the default is not allowed"),
        ({"region": [1, 2]}, "allowed.region.choices[0]", "is not a str"),
        ({"region": {"min": 1}}, "allowed.region.min", "bounds are for numbers"),
        ({"top_n": {"pattern": "x"}}, "allowed.top_n.pattern", "a pattern is for strings"),
        ({"top_n": {"min": 5, "max": 1}}, "allowed.top_n.min", "is above max"),
        ({"day": {"pattern": "("}}, "allowed.day.pattern", "does not compile"),
        ({"day": {"pattern": "x" * 201}}, "allowed.day.pattern", "1 to 200 characters"),
        ({"region": ["ALL"] * (MAX_CHOICES + 1)}, "allowed.region.choices", "1 to 200"),
        ({"region": {"choice": ["ALL"]}}, "allowed.region.choice", "unknown key"),
        ({"region": "ALL"}, "allowed.region", "must be a list of choices"),
        ({"day": {"choices": ["2026-01-01"]}, "__bind": True}, "parameters.day", "binding cannot"),
    ],
)
def test_bad_rules_are_refused_at_publish_naming_their_field(
    db: Database, tmp_path: Path, allowed: dict[str, Any], field: str, message: str
) -> None:
    block: dict[str, Any] = {"allowed": {k: v for k, v in allowed.items() if k != "__bind"}}
    if allowed.get("__bind"):
        block["parameters"] = {"day": {"$period": "slot"}}
    with pytest.raises(MetadataError) as refused:
        define(tmp_path, db, block)
    assert refused.value.field == field
    assert message in str(refused.value)


def test_the_blocks_values_and_a_subscriptions_must_meet_the_rules(
    db: Database, tmp_path: Path
) -> None:
    with pytest.raises(MetadataError, match=r"parameters\.top_n"):
        define(tmp_path, db, {"allowed": ALLOWED, "parameters": {"top_n": 99}})
    scoped = {"channel": "email", "to": "a@example.com", "parameters": {"region": "MARS"}}
    with pytest.raises(MetadataError, match="MARS"):
        define(tmp_path, db, {"allowed": ALLOWED, "subscriptions": [scoped]})


def test_a_literal_annotation_declares_choices() -> None:
    (region, ratio) = parse_parameters_cell(
        "from typing import Literal\n"
        'region: Literal["EMEA", "AMER", "ALL"] = "ALL"  # the region\n'
        "ratio: Literal[0.5, 1, 2] = 1\n"
    )
    assert (region.type, region.help, region.allowed) == (
        "str",
        "the region",
        Allowed(choices=["EMEA", "AMER", "ALL"]),
    )
    assert (ratio.type, ratio.allowed) == ("float", Allowed(choices=[0.5, 1, 2]))
    with pytest.raises(ParameterValueError, match="is not one of EMEA, AMER, ALL"):
        validate_parameters((region, ratio), {"region": "MARS"})


@pytest.mark.parametrize(
    "cell",
    [
        'region: Literal["A", 1] = "A"\n',  # mixed kinds
        'region: Literal[f"A"] = "A"\n',  # not a literal
        'region: Literal["A", "B"] = "C"\n',  # its default is not a choice
        "import typing\n",  # any other import is code
        "from typing import Literal as L\n",
        "from os import Literal\n",
    ],
)
def test_only_a_bare_literal_annotation_of_literals_is_accepted(cell: str) -> None:
    with pytest.raises(ParametersCellError):
        parse_parameters_cell(cell)


def test_a_pattern_that_backtracks_forever_refuses_the_value_in_time() -> None:
    """(a|aa)+c backtracks exponentially on a run of a's: the timeout refuses it."""
    rule = Allowed(pattern="(a|aa)+c")
    assert rule.problem("day", "a" * 60) == f"day: {'a' * 60!r} could not be matched in time"
    assert PATTERN_TIMEOUT_S == 0.05


@pytest.mark.parametrize(
    ("pattern", "message"),
    [
        ("a{10000000}", "repeats something 10,000,000 times"),
        ("(?:a{1000}){1000}", "multiply past 100,000"),
        ("(", "does not compile"),
    ],
)
def test_a_pattern_costly_to_compile_is_refused(
    db: Database, tmp_path: Path, pattern: str, message: str
) -> None:
    with pytest.raises(MetadataError, match=message):
        define(tmp_path, db, {"allowed": {"day": {"pattern": pattern}}})


def test_a_pattern_demands_a_string() -> None:
    rule = Allowed(pattern=r"\d+")
    assert rule.problem("x", 5) == r"x: 5 is not a string to match '\\d+'"
    assert rule.problem("x", "12") is None


@pytest.mark.parametrize(
    ("cell", "error"),
    [
        ('region: Literal["A", "B"] = "A"\n', "add `from typing import Literal`"),
        ("from typing import Literal\nx: Literal[1e999, 1] = 1\n", "is not a finite number"),
        ('from typing import Literal\nx: Literal["a", "\\x00"] = "a"\n', "NUL"),
    ],
)
def test_literal_choices_are_stored_safely_and_need_their_import(cell: str, error: str) -> None:
    with pytest.raises(ParametersCellError, match=error):
        parse_parameters_cell(cell)


def test_a_literal_may_hold_negative_numbers() -> None:
    (x,) = parse_parameters_cell("from typing import Literal\nx: Literal[-1, 0, 1] = 0\n")
    assert (x.type, x.allowed) == ("int", Allowed(choices=[-1, 0, 1]))
