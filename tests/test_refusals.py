"""Refusals carry the field they are about (issue: structured refusals): a parameter
value names its parameter, a metadata path its path, a preview argument its argument —
through the errors, the API's ``field``, across processes (pickled as Ray ships them)."""

from __future__ import annotations

import pickle
from datetime import UTC, datetime

import pytest

from nbcast.definitions.parameters import Parameter, parse_assignments, validate_parameters
from nbcast.definitions.spec import parse_spec
from nbcast.errors import MetadataError, ParameterValueError, ScheduleError
from nbcast.scheduler.preview import preview
from nbcast.server_extension.errors import error_body, status_of

SCHEMA = [
    Parameter(name="region", type="str", default="all"),
    Parameter(name="top_n", type="int", default=10),
]


def test_a_refused_value_names_its_parameter() -> None:
    with pytest.raises(ParameterValueError) as caught:
        validate_parameters(SCHEMA, {"region": "EMEA", "top_n": "ten"})
    assert caught.value.names == ("top_n",)
    assert caught.value.field == "parameters.top_n"
    again = pickle.loads(pickle.dumps(caught.value))
    assert again == caught.value
    assert again.field == "parameters.top_n"
    assert status_of(caught.value)[3] == "parameters.top_n"


def test_a_problem_with_no_parameter_names_the_parameters() -> None:
    with pytest.raises(ParameterValueError) as caught:
        validate_parameters(SCHEMA, {"2bad": 1})
    assert caught.value.field == "parameters"
    with pytest.raises(ParameterValueError) as twice:
        parse_assignments(["region=EMEA", "region=APAC"])
    assert twice.value.field == "parameters.region"


def test_the_metadata_block_names_the_parameter_and_the_audience() -> None:
    with pytest.raises(MetadataError) as caught:
        parse_spec({"parameters": {"top_n": "ten"}}, SCHEMA)
    assert caught.value.field == "parameters.top_n"
    block = {
        "subscriptions": [{"channel": "email", "to": "a@example.com", "parameters": {"top_n": "x"}}]
    }
    with pytest.raises(MetadataError) as scoped:
        parse_spec(block, SCHEMA)
    assert scoped.value.field == "subscriptions[0].parameters.top_n"
    status, code, message, field = status_of(scoped.value)
    assert (status, code, field) == (400, "invalid", "subscriptions[0].parameters.top_n")
    assert error_body(status, code, message, field)["error"]["field"] == field


def test_a_preview_names_the_argument_it_refuses() -> None:
    at = datetime(2026, 11, 1, tzinfo=UTC)
    with pytest.raises(ScheduleError) as caught:
        preview(cron="0 7 * * *", range_from=at, range_to=at)
    assert caught.value.field == "from"
    assert str(caught.value).startswith("from (")
    with pytest.raises(ScheduleError) as zone:
        preview(cron="0 7 * * *", tz="Mars/Olympus", range_from=at, range_to=at)
    assert zone.value.field == "timezone"
    again = pickle.loads(pickle.dumps(zone.value))
    assert (again, again.field, str(again)) == (zone.value, "timezone", str(zone.value))
