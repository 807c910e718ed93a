"""The parameters cell becomes a schema; values are validated against it."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from nbcast.definitions.parameters import (
    Parameter,
    parse_assignment,
    parse_parameters_cell,
    schema_from_json,
    schema_to_json,
    validate_parameters,
)
from nbcast.errors import ParametersCellError, ParameterValueError
from nbcast.limits import json_problem

CELL = """# Parameters of the daily sales report
region = "EMEA"  # sales region
top_n: int = 10
ratio = 0.25
include_returns = False
cutoff = None
regions = ["EMEA", "APAC"]
thresholds = {"warn": 0.1, "fail": 0.25}
"""


def test_schema_from_literal_assignments() -> None:
    schema = parse_parameters_cell(CELL)
    assert [(p.name, p.type, p.default) for p in schema] == [
        ("region", "str", "EMEA"),
        ("top_n", "int", 10),
        ("ratio", "float", 0.25),
        ("include_returns", "bool", False),
        ("cutoff", "null", None),
        ("regions", "list", ["EMEA", "APAC"]),
        ("thresholds", "dict", {"warn": 0.1, "fail": 0.25}),
    ]
    assert schema[0].help == "sales region"
    assert schema[0].line == 2
    assert schema_from_json(json.loads(json.dumps(schema_to_json(schema)))) == schema


def test_an_empty_cell_declares_nothing() -> None:
    assert parse_parameters_cell("# no parameters\n") == ()


@pytest.mark.parametrize(
    ("source", "line", "fragment"),
    [
        pytest.param("x = 1\nimport os\n", 2, "`import os` is not an assignment", id="import"),
        pytest.param("start = date.today()", 1, "not a literal default", id="call"),
        pytest.param("a = 1\nb = a + 1", 2, "not a literal default", id="arithmetic"),
        pytest.param("a, b = 1, 2", 1, "single name", id="unpacking"),
        pytest.param("a = b = 1", 1, "not an assignment", id="chained"),
        pytest.param("s = {1, 2}", 1, "not a literal default", id="set"),
        pytest.param("t = (1, 2)", 1, "not a literal default", id="tuple"),
        pytest.param("d = {1: 'x'}", 1, "not a literal default", id="int-key-dict"),
        pytest.param("b = b'raw'", 1, "not a literal default", id="bytes"),
        pytest.param("x = 1\nx = 2", 2, "assigned twice", id="twice"),
        pytest.param("x += 1", 1, "not an assignment", id="augmented"),
        pytest.param("def f():\n    pass", 1, "not an assignment", id="function"),
        pytest.param("x = (", 1, "syntax error", id="syntax"),
    ],
)
def test_non_literal_cells_are_refused_naming_the_line(
    source: str, line: int, fragment: str
) -> None:
    with pytest.raises(ParametersCellError) as info:
        parse_parameters_cell(source)
    assert info.value.line == line
    assert fragment in str(info.value)
    assert f"line {line}" in str(info.value)


SCHEMA = parse_parameters_cell(CELL)


@pytest.mark.parametrize(
    ("values", "ok"),
    [
        pytest.param({"region": "APAC"}, True, id="str"),
        pytest.param({"top_n": 3}, True, id="int"),
        pytest.param({"top_n": 3.5}, False, id="float-for-int"),
        pytest.param({"top_n": True}, False, id="bool-for-int"),
        pytest.param({"top_n": "3"}, False, id="str-for-int"),
        pytest.param({"ratio": 1}, True, id="int-for-float"),
        pytest.param({"ratio": 0.5}, True, id="float"),
        pytest.param({"ratio": False}, False, id="bool-for-float"),
        pytest.param({"include_returns": True}, True, id="bool"),
        pytest.param({"include_returns": 1}, False, id="int-for-bool"),
        pytest.param({"cutoff": {"any": [1, "json"]}}, True, id="null-accepts-json"),
        pytest.param({"regions": ["LATAM"]}, True, id="list"),
        pytest.param({"regions": "LATAM"}, False, id="str-for-list"),
        pytest.param({"thresholds": {}}, True, id="dict"),
        pytest.param({"thresholds": []}, False, id="list-for-dict"),
        pytest.param({"nope": 1}, False, id="undeclared"),
        pytest.param({"ratio": float("nan")}, False, id="nan"),
        pytest.param({"cutoff": object()}, False, id="not-json"),
    ],
)
def test_value_types_follow_the_default(values: dict[str, Any], ok: bool) -> None:
    if ok:
        assert validate_parameters(SCHEMA, values) == values
    else:
        with pytest.raises(ParameterValueError):
            validate_parameters(SCHEMA, values)


def test_papermill_name_injection_is_refused() -> None:
    # papermill writes `name = value` lines; a name with a newline would run code.
    schema = parse_parameters_cell("x = 1\ny = 2\n")
    with pytest.raises(ParameterValueError, match="not a valid parameter name"):
        validate_parameters(schema, {"x=1\nimport os\ny": 2})


def test_value_injection_is_refused() -> None:
    schema = parse_parameters_cell("top_n = 10\nregion = 'EMEA'\n")
    with pytest.raises(ParameterValueError, match="expected int"):
        validate_parameters(schema, {"top_n": "1; import os; os.system('id')"})

    class Sneaky:
        def __repr__(self) -> str:
            return "__import__('os').system('id')"

    with pytest.raises(ParameterValueError, match="not a JSON value"):
        validate_parameters(schema, {"region": Sneaky()})


def test_every_problem_is_reported_at_once() -> None:
    with pytest.raises(ParameterValueError) as info:
        validate_parameters(SCHEMA, {"top_n": "x", "nope": 1, "1bad": 2})
    assert len(info.value.problems) == 3


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("top_n=5", ("top_n", 5)),
        ("ratio=0.5", ("ratio", 0.5)),
        ("region=EMEA", ("region", "EMEA")),
        ('region="EMEA"', ("region", "EMEA")),
        ('regions=["A","B"]', ("regions", ["A", "B"])),
        ("flag=true", ("flag", True)),
        ("cutoff=null", ("cutoff", None)),
    ],
)
def test_command_line_assignments(text: str, expected: tuple[str, Any]) -> None:
    assert parse_assignment(text) == expected


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=5), children, max_size=3)
    ),
    max_leaves=8,
)


@settings(max_examples=150, deadline=None)
@given(default=json_values, value=json_values)
def test_validation_matches_the_type_rule(default: Any, value: Any) -> None:
    schema = (Parameter(name="p", type=_kind(default), default=default),)
    expected = json_problem(value) is None and (
        _kind(default) == "null"
        or _kind(value) == _kind(default)
        or (_kind(default) == "float" and _kind(value) == "int")
    )
    try:
        validate_parameters(schema, {"p": value})
        accepted = True
    except ParameterValueError:
        accepted = False
    assert accepted == expected


def _kind(value: Any) -> str:
    return {
        bool: "bool",
        int: "int",
        float: "float",
        str: "str",
        list: "list",
        dict: "dict",
        type(None): "null",
    }[type(value)]


@settings(max_examples=100, deadline=None)
@given(name=st.text(min_size=1, max_size=12))
@example(name="x\n")  # `$` would match before a trailing newline
@example(name="x=1\nimport os\ny")
def test_only_identifier_names_pass(name: str) -> None:
    import re

    schema = (Parameter(name=name, type="null", default=None),)
    ok = re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name) is not None
    try:
        validate_parameters(schema, {name: 1})
        assert ok
    except ParameterValueError:
        assert not ok
