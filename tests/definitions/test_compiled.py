"""A stored version compiles once: the same content gives the same compiled object, a
block that does not parse names its field, and a schedule or an SLA alone parse as
the whole block's would."""

from __future__ import annotations

from datetime import timedelta

import pytest

from nbcast.definitions.compiled import (
    compile_schedule_block,
    compile_sla_block,
    compile_version,
)
from nbcast.errors import MetadataError

BLOCK = {
    "schedule": {"cron": "0 7 * * *", "timezone": "Europe/Paris"},
    "parameters": {"top_n": 15},
    "sla": {"delivered_within": "30m"},
}
SCHEMA = [{"name": "top_n", "type": "int", "default": 10}]


def test_a_version_is_compiled_once_per_content() -> None:
    first = compile_version(BLOCK, SCHEMA, sha256="a" * 64)
    assert compile_version(BLOCK, SCHEMA, sha256="a" * 64) is first
    assert first.spec.parameters == {"top_n": 15}
    assert first.schedule is not None
    assert first.schedule.timezone == "Europe/Paris"
    assert [p.name for p in first.schema] == ["top_n"]
    other = compile_version({**BLOCK, "parameters": {"top_n": 5}}, SCHEMA, sha256="b" * 64)
    assert other.spec.parameters == {"top_n": 5}
    assert compile_version(BLOCK, SCHEMA) is not first  # no sha256: not cached


def test_a_block_that_does_not_parse_names_its_field() -> None:
    bad = {"schedule": {"cron": "0 7 * * *", "timezone": "Mars/Olympus"}}
    with pytest.raises(MetadataError) as caught:
        compile_version(bad, [], sha256="c" * 64)
    assert caught.value.field == "schedule.timezone"


def test_a_schedule_or_an_sla_alone_parse_as_in_the_whole_block() -> None:
    whole = compile_version(BLOCK, SCHEMA)
    assert compile_schedule_block(BLOCK["schedule"]) == whole.schedule
    assert compile_schedule_block(None) is None
    assert compile_sla_block(BLOCK["sla"]) == timedelta(minutes=30)
    assert compile_sla_block({"delivered_within": "forever"}) is None
    assert compile_sla_block("30m") is None
