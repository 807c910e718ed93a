"""``nbcast.output.table`` in a real kernel, and reading the tables back."""

from __future__ import annotations

import copy
import datetime as dt
import json
import subprocess
import sys
from typing import Any

import nbformat
import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nbcast.delivery.tables import decode_table, encode_table, has_rows, read_tables
from nbcast.errors import RenderError
from nbcast.output import TABLE_MIME_TYPE, check_table_name
from tests.delivery import LONG_ROWS, MIXED_SOURCE, executed_sample


@pytest.fixture(scope="module")
def executed() -> Any:
    return executed_sample()


def _mixed() -> pd.DataFrame:
    namespace: dict[str, Any] = {}
    exec(MIXED_SOURCE, namespace)
    frame: pd.DataFrame = namespace["mixed"]
    return frame


def _table_output(frame: pd.DataFrame, name: str) -> Any:
    return nbformat.v4.new_output(
        "display_data",
        data={TABLE_MIME_TYPE: encode_table(frame, name), "text/plain": name},
        metadata={"nbcast": {"table": name}},
    )


def _notebook(*outputs: Any) -> Any:
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=list(outputs))])


def test_a_table_recorded_in_a_kernel_reads_back_equal_with_its_dtypes(executed: Any) -> None:
    tables = read_tables(executed)
    assert list(tables) == ["mixed types", "long", "empty"]
    expected = _mixed()
    pd.testing.assert_frame_equal(tables["mixed types"], expected)
    mixed = tables["mixed types"]
    assert mixed["orders"].dtype == np.int64
    assert mixed["revenue"].dtype == np.float64
    assert mixed["active"].dtype == bool
    assert str(mixed["returns"].dtype) == "Int64"
    assert pd.api.types.is_datetime64_dtype(mixed["first_order"])
    assert mixed["day"].tolist() == [dt.date(2026, 6, 15), None, dt.date(2026, 6, 14)]
    assert len(tables["long"]) == LONG_ROWS
    assert tables["empty"].empty
    assert list(tables["empty"].columns) == ["long_id", "long_label", "long_value"]


def test_the_recorded_output_shows_html_and_carries_the_name(executed: Any) -> None:
    outputs = [o for cell in executed.cells for o in cell.get("outputs", [])]
    recorded = [o for o in outputs if TABLE_MIME_TYPE in o.get("data", {})]
    assert [o.metadata["nbcast"]["table"] for o in recorded] == ["mixed types", "long", "empty"]
    assert all("<table" in o.data["text/html"] for o in recorded)
    assert recorded[0].output_type == "display_data"


def test_has_rows_is_true_when_any_table_has_a_row(executed: Any) -> None:
    assert has_rows(executed)
    empty = pd.DataFrame({"a": pd.Series([], dtype="int64")})
    assert not has_rows(_notebook(_table_output(empty, "nothing")))
    assert not has_rows(_notebook())


def test_has_rows_is_false_for_a_notebook_that_ended_early(executed: Any) -> None:
    """The executor marks a notebook that stopped itself with ``sys.exit()``; its tables
    are what ran before the exit, and an early exit means "no results"."""
    ended = copy.deepcopy(executed)
    ended.metadata["nbcast"] = {"name": "x", "ended_early": {"cell_index": 3, "code": 0}}
    assert read_tables(ended)  # the tables are still there and readable
    assert has_rows(ended) is False
    from_json = json.loads(nbformat.writes(ended))  # plain dicts, as the ledger may read it
    assert has_rows(from_json) is False
    other = copy.deepcopy(executed)
    other.metadata["nbcast"] = {"name": "x"}
    assert has_rows(other) is True


def test_a_later_table_of_the_same_name_wins_case_insensitively() -> None:
    first = pd.DataFrame({"a": [1]})
    second = pd.DataFrame({"b": ["x", "y"]})
    other = pd.DataFrame({"c": [True]})
    notebook = _notebook(
        _table_output(first, "Summary"),
        _table_output(other, "other"),
        _table_output(second, "summary"),
    )
    tables = read_tables(notebook)
    assert list(tables) == ["other", "summary"]
    pd.testing.assert_frame_equal(tables["summary"], second)


def test_a_named_index_becomes_columns_and_the_default_one_is_dropped() -> None:
    frame = pd.DataFrame({"rank": [1, 2], "sku": ["a", "b"]}).set_index("rank")
    decoded = decode_table(json.loads(json.dumps(encode_table(frame, "top"))))
    assert list(decoded.columns) == ["rank", "sku"]
    assert decoded["rank"].tolist() == [1, 2]


def test_timezone_aware_datetimes_and_durations_round_trip() -> None:
    frame = pd.DataFrame(
        {
            "at": pd.to_datetime(["2026-03-29 00:30", None])
            .tz_localize("UTC")
            .tz_convert("Europe/Berlin"),
            "took": pd.to_timedelta(["1h 30min", None]),
            "label": pd.array(["x", None], dtype="string"),
            "kind": pd.Categorical(["a", "b"]),
        }
    )
    decoded = decode_table(json.loads(json.dumps(encode_table(frame, "zones"))))
    pd.testing.assert_frame_equal(decoded, frame)


def test_non_finite_floats_are_nulls_because_json_has_none() -> None:
    frame = pd.DataFrame({"x": [1.0, float("inf"), float("-inf"), float("nan")]})
    payload = encode_table(frame, "floats")
    assert [row["x"] for row in payload["data"]] == [1.0, None, None, None]
    json.dumps(payload, allow_nan=False)


@pytest.mark.parametrize(
    "name", ["sales", "Sales by region", "q3-2026.v2", "a" * 31, "0_numbers_first"]
)
def test_acceptable_table_names(name: str) -> None:
    assert check_table_name(name) == name


@pytest.mark.parametrize(
    "name", ["", " leading space", "a" * 32, "sheet/1", "x:y", "[x]", "what?", "tab\tname", 7]
)
def test_unacceptable_table_names_are_refused(name: Any) -> None:
    with pytest.raises(ValueError, match="table name"):
        check_table_name(name)


def test_duplicate_column_names_are_refused() -> None:
    frame = pd.DataFrame([[1, 2]], columns=["a", "a"])
    with pytest.raises(ValueError, match="unique"):
        encode_table(frame, "dup")


def test_a_recorded_table_with_a_bad_name_is_a_render_error() -> None:
    output = _table_output(pd.DataFrame({"a": [1]}), "fine")
    output.metadata["nbcast"]["table"] = "../../etc/passwd"
    with pytest.raises(RenderError, match="bad name"):
        read_tables(_notebook(output))


def test_importing_nbcast_output_does_not_import_pandas() -> None:
    code = "import sys, nbcast.output; print('pandas' in sys.modules, 'IPython' in sys.modules)"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() == ["False", "False"]


_columns = st.fixed_dictionaries(
    {
        "i": st.lists(st.integers(-(2**53), 2**53), min_size=3, max_size=3),
        "f": st.lists(st.floats(allow_nan=True, allow_infinity=False), min_size=3, max_size=3),
        "s": st.lists(st.none() | st.text(max_size=8), min_size=3, max_size=3),
        "b": st.lists(st.booleans(), min_size=3, max_size=3),
        "d": st.lists(
            st.none() | st.dates(dt.date(1900, 1, 1), dt.date(2200, 1, 1)), min_size=3, max_size=3
        ),
        "t": st.lists(
            st.datetimes(dt.datetime(1970, 1, 1), dt.datetime(2200, 1, 1)), min_size=3, max_size=3
        ),
    }
)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_columns)
def test_encoding_then_decoding_gives_the_same_frame(columns: dict[str, list[Any]]) -> None:
    frame = pd.DataFrame(columns)
    frame["t"] = pd.to_datetime(frame["t"])
    if all(value is None for value in columns["s"]):
        frame["s"] = frame["s"].astype(object)
    decoded = decode_table(json.loads(json.dumps(encode_table(frame, "prop"))))
    pd.testing.assert_frame_equal(decoded, frame)
