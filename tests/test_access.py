"""Keyset cursors are opaque to callers and hostile when forged: any string decodes to
the kinds asked for or is a ConfigError — never a value the database cannot take."""

from __future__ import annotations

import base64
import contextlib
import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from nbcast.access import Caller, decode_cursor, encode_cursor
from nbcast.db import Database
from nbcast.errors import ConfigError
from nbcast.executor.queries import list_runs
from nbcast.tenancy.tenants import ensure_tenant
from nbcast.views.definitions import list_definitions

KINDS: list[list[type]] = [[datetime, int], [str], [int]]
JSON = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**80), max_value=2**80)
    | st.floats(allow_nan=False)
    | st.text(max_size=40),
    lambda inner: st.lists(inner, max_size=3),
    max_leaves=6,
)


def _forge(value: Any) -> str:
    return base64.urlsafe_b64encode(json.dumps(value).encode()).decode().rstrip("=")


@given(value=JSON, kinds=st.sampled_from(KINDS))
def test_a_forged_cursor_decodes_to_its_kinds_or_is_refused(value: Any, kinds: list[type]) -> None:
    try:
        decoded = decode_cursor(_forge(value), kinds)
    except ConfigError:
        return
    for item, kind in zip(decoded, kinds, strict=True):
        assert isinstance(item, kind)
        if kind is int:
            assert 0 <= item < 2**63
        if kind is datetime:
            assert item.tzinfo is not None


@given(text=st.text(max_size=600))
def test_any_text_is_a_cursor_or_refused(text: str) -> None:
    with contextlib.suppress(ConfigError):
        fire_at, run_id = decode_cursor(text, [datetime, int])
        assert fire_at.tzinfo is not None
        assert 0 <= run_id < 2**63


def test_a_cursor_round_trips() -> None:
    when = datetime(2026, 11, 1, 5, 30, tzinfo=UTC)
    assert decode_cursor(encode_cursor(when, 7), [datetime, int]) == (when, 7)


FORGED = [
    ["2026-01-01T00:00:00+00:00", 2**63],
    ["2026-01-01T00:00:00+00:00", -1],
    [None, 1],
    ["2026-01-01T00:00:00+00:00", None],
    [None],
    ["a\x00b"],
    [2**70],
]


@pytest.mark.parametrize("value", FORGED, ids=repr)
def test_lists_refuse_forged_cursors_as_bad_input(
    db: Database, tmp_path: Path, value: list[Any]
) -> None:
    caller = Caller(tenant="default", user="ann")
    with db.session() as session:
        ensure_tenant(session, "default")
    with db.session() as session:
        for listing in (
            lambda: list_runs(session, caller, after=_forge(value)),
            lambda: list_definitions(session, caller, after=_forge(value)),
        ):
            with pytest.raises(ConfigError, match="not a cursor"):
                listing()
