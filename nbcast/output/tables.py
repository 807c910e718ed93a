"""The report-table format: both halves, so they cannot drift apart.

:func:`nbcast.output.table` records a DataFrame in a display output under
:data:`TABLE_MIME_TYPE`; :func:`encode_table` makes that payload (in the kernel), and
:func:`read_tables` / :func:`decode_table` read it back (in the renderers, which never
re-execute a notebook)::

    from nbcast.output.tables import encode_table, decode_table, read_tables
    payload = encode_table(df, "sales")          # JSON-ready dict
    decode_table(payload)                        # equal to df for the types below
    read_tables(executed_notebook)               # {"sales": DataFrame, ...}

The payload is `Table Schema <https://specs.frictionlessdata.io/table-schema/>`_ JSON
in the shape ``df.to_json(orient="table")`` gives — ``{"schema": {"fields": [...]},
"data": [{column: value, ...}, ...]}`` — with nbcast's own encoding of values so that
types survive the trip:

============  ==================================  ===================================
field type    JSON value                          read back as
============  ==================================  ===================================
integer       number                              ``int64``, ``Int64`` with nulls
number        number (NaN and ±inf become null)   ``float64``
boolean       true / false                        ``bool``, ``boolean`` with nulls
string        string                              ``str`` (pandas 3), else ``object``
datetime      ISO 8601 string (``tz`` field set   ``datetime64[ns]`` (tz-aware when
              for tz-aware columns)               the field has ``tz``)
date          ``YYYY-MM-DD``                      ``object`` of ``datetime.date``
duration      ISO 8601 duration                   ``timedelta64[ns]``
============  ==================================  ===================================

Nulls (None, NaN, NaT, ``pd.NA``) are JSON ``null`` in every type. Each field also
records the column's pandas ``dtype``; the reader restores it when it is one it
knows (``int32``, ``Int64``, ``float32``, ``string``, ``category``,
``datetime64[us]``, …), so an encoded-then-decoded frame equals the original for
those types. An ``object`` column is typed by its values: all ``str`` is a string
column, all ``datetime.date`` a date column, all numbers a number column, and a mix
of kinds is a string column of ``str(value)``.

Decisions:

- **Names** match :data:`TABLE_NAME_PATTERN` (``[A-Za-z0-9][A-Za-z0-9 _.-]{0,30}``): at
  most 31 characters and none of ``[]:*?/\\``, so every name is a valid spreadsheet
  sheet name and a safe file name in a zip (:func:`check_table_name`).
- **Duplicate names: the later table wins** (:func:`table_payloads`), compared
  case-insensitively, because spreadsheet sheet names and many file systems are.
- **The index**: a default ``RangeIndex`` (0, 1, 2, …, unnamed) is dropped; any other
  index becomes leading columns, because a spreadsheet or a CSV has no index.
- A recorded table the reader cannot accept (a bad name, a malformed payload, a value
  that does not parse) is a :class:`~nbcast.errors.RenderError`.
- **Import cost.** Only the standard library at import time (this module loads in every
  kernel); pandas and numpy are imported by the functions that need them.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import decimal
import math
import numbers
import re
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from nbcast.errors import RenderError

if TYPE_CHECKING:
    import pandas as pd

__all__ = [
    "FORMAT_VERSION",
    "TABLE_MIME_TYPE",
    "TABLE_NAME_PATTERN",
    "check_table_name",
    "decode_table",
    "encode_table",
    "read_tables",
    "table_payloads",
]

TABLE_MIME_TYPE = "application/vnd.nbcast.table+json"
"""The MIME type of a recorded table in a display output's bundle."""

TABLE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,30}")
"""What a table name must match, in full (spreadsheet-sheet and file-name safe)."""

FORMAT_VERSION = 1
"""``schema.nbcast`` in every payload: the version of this encoding."""

_RESTORABLE_DTYPE = re.compile(
    r"u?int(8|16|32|64)|U?Int(8|16|32|64)|[Ff]loat(32|64)|bool|boolean|str|string|category"
    r"|datetime64\[(s|ms|us|ns)(, .+)?\]|timedelta64\[(s|ms|us|ns)\]"
)


def check_table_name(name: object) -> str:
    """Return ``name`` if it is an acceptable table name, else raise ValueError."""
    if not isinstance(name, str) or TABLE_NAME_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"table name {name!r} is not acceptable: use 1 to 31 characters, letters, "
            "digits, spaces, '_', '.' or '-', starting with a letter or a digit"
        )
    return name


# -- encoding (in the kernel) -----------------------------------------------------


def encode_table(
    df: pd.DataFrame,
    name: str,
    *,
    labels: Mapping[str, Any] | None = None,
    formats: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The JSON payload that records ``df`` as the table ``name`` (module docstring),
    each field with the ``label`` and ``format`` given for its column
    (:mod:`nbcast.output.presentation`).

    Raises ValueError for a bad name, duplicate column names, or labels and formats
    that do not fit.
    """
    from nbcast.output.presentation import column_presentation

    check_table_name(name)
    frame = _flatten(df)
    shown = column_presentation([str(c) for c in frame.columns], labels, formats)
    fields: list[dict[str, Any]] = []
    columns: list[list[Any]] = []
    for position, column in enumerate(frame.columns):
        series = frame.iloc[:, position]
        kind, values, extra = _encode_column(series)
        fields.append(
            {"name": column, "type": kind, **extra, "dtype": str(series.dtype)}
            | shown.get(str(column), {})
        )
        columns.append(values)
    names = [field["name"] for field in fields]
    data = [dict(zip(names, row, strict=True)) for row in zip(*columns, strict=True)]
    if not columns:
        data = [{} for _ in range(len(frame))]
    return {"name": name, "schema": {"fields": fields, "nbcast": FORMAT_VERSION}, "data": data}


def _flatten(df: pd.DataFrame) -> pd.DataFrame:
    """Index into columns (unless it is the default one), column names as strings."""
    import pandas as pd

    index = df.index
    default_index = (
        isinstance(index, pd.RangeIndex)
        and index.name is None
        and index.start == 0
        and index.step == 1
    )
    frame = df if default_index else df.reset_index()
    if isinstance(frame.columns, pd.MultiIndex):
        labels = [" / ".join(str(part) for part in key if str(part)) for key in frame.columns]
    else:
        labels = [str(label) for label in frame.columns]
    duplicates = sorted({label for label in labels if labels.count(label) > 1})
    if duplicates:
        raise ValueError(f"a table's column names must be unique; repeated: {duplicates}")
    frame = frame.copy(deep=False)
    frame.columns = labels
    return frame


def _encode_column(series: pd.Series) -> tuple[str, list[Any], dict[str, Any]]:
    """The field type, the JSON values and extra field keys of one column."""
    import pandas as pd

    dtype = series.dtype
    missing = series.isna().to_numpy()
    raw = series.tolist()
    if isinstance(dtype, pd.CategoricalDtype):
        return _encode_objects(series.astype(object).tolist(), missing)
    if pd.api.types.is_bool_dtype(dtype):
        return "boolean", _each(raw, missing, bool), {}
    if pd.api.types.is_integer_dtype(dtype):
        return "integer", _each(raw, missing, int), {}
    if pd.api.types.is_float_dtype(dtype):
        return "number", _each(raw, missing, _finite), {}
    if pd.api.types.is_datetime64_any_dtype(dtype):
        tz = getattr(dtype, "tz", None)
        extra = {"tz": str(tz)} if tz is not None else {}
        return "datetime", _each(raw, missing, _iso_datetime), extra
    if pd.api.types.is_timedelta64_dtype(dtype):
        return "duration", _each(raw, missing, lambda v: pd.Timedelta(v).isoformat()), {}
    return _encode_objects(raw, missing)


def _encode_objects(raw: list[Any], missing: Any) -> tuple[str, list[Any], dict[str, Any]]:
    """An ``object`` (or string, or categorical) column, typed by its values."""
    import numpy as np

    present = [value for value, gone in zip(raw, missing, strict=True) if not gone]
    if all(isinstance(v, str) for v in present):
        return "string", _each(raw, missing, str), {}
    if all(isinstance(v, bool | np.bool_) for v in present):
        return "boolean", _each(raw, missing, bool), {}
    if all(isinstance(v, dt.datetime) for v in present):
        zones = {str(v.tzinfo) if v.tzinfo is not None else None for v in present}
        if len(zones) == 1:
            (zone,) = zones
            extra = {"tz": zone} if zone is not None else {}
            return "datetime", _each(raw, missing, _iso_datetime), extra
    elif all(isinstance(v, dt.date) for v in present):
        return "date", _each(raw, missing, lambda v: v.isoformat()), {}
    if all(isinstance(v, numbers.Integral) and not isinstance(v, bool) for v in present):
        return "integer", _each(raw, missing, int), {}
    if all(
        isinstance(v, numbers.Real | decimal.Decimal) and not isinstance(v, bool) for v in present
    ):
        return "number", _each(raw, missing, _finite), {}
    return "string", _each(raw, missing, str), {}


def _each(raw: list[Any], missing: Any, convert: Any) -> list[Any]:
    return [None if gone else convert(value) for value, gone in zip(raw, missing, strict=True)]


def _finite(value: Any) -> float | None:
    # JSON has no NaN or Infinity (nbformat would write them, browsers refuse them).
    number = float(value)
    return number if math.isfinite(number) else None


def _iso_datetime(value: Any) -> str:
    import pandas as pd

    return str(pd.Timestamp(value).isoformat())


# -- reading (in the renderers) ---------------------------------------------------


def table_payloads(notebook: Any) -> dict[str, dict[str, Any]]:
    """The raw table payloads of an executed notebook, by name, in notebook order.

    A later table replaces an earlier one of the same name (compared
    case-insensitively) and takes the later position. Raises
    :class:`~nbcast.errors.RenderError` for a table with a bad name or no schema.
    Needs no pandas.
    """
    found: dict[str, tuple[str, dict[str, Any]]] = {}
    for name, payload in _table_outputs(notebook):
        found.pop(name.casefold(), None)
        found[name.casefold()] = (name, payload)
    return dict(found.values())


def read_tables(notebook: Any) -> dict[str, pd.DataFrame]:
    """Every table the notebook recorded with ``output.table``, in notebook order.

    ``notebook`` is an executed ``nbformat.NotebookNode`` (or the same as plain
    dicts). Duplicate names: the later table wins (:func:`table_payloads`).
    """
    return {name: decode_table(payload) for name, payload in table_payloads(notebook).items()}


def _table_outputs(notebook: Any) -> Iterator[tuple[str, dict[str, Any]]]:
    for cell in notebook.get("cells", ()):
        if cell.get("cell_type") != "code":
            continue
        for output in cell.get("outputs", ()):
            if output.get("output_type") not in ("display_data", "execute_result"):
                continue
            payload = output.get("data", {}).get(TABLE_MIME_TYPE)
            if payload is None:
                continue
            meta = output.get("metadata", {}).get("nbcast", {})
            name = meta.get("table") if isinstance(meta, Mapping) else None
            if name is None and isinstance(payload, Mapping):
                name = payload.get("name")
            if not isinstance(name, str) or TABLE_NAME_PATTERN.fullmatch(name) is None:
                raise RenderError(f"the notebook records a table with a bad name: {name!r}")
            if (
                not isinstance(payload, Mapping)
                or not isinstance(payload.get("schema"), Mapping)
                or not isinstance(payload["schema"].get("fields"), list)
                or not isinstance(payload.get("data"), list)
            ):
                raise RenderError(f"table {name!r}: its recorded payload is malformed")
            yield name, dict(payload)


def decode_table(payload: Mapping[str, Any]) -> pd.DataFrame:
    """The DataFrame a table payload records (module docstring for the types)."""
    import pandas as pd

    fields = payload["schema"]["fields"]
    rows = payload["data"]
    columns: dict[str, pd.Series] = {}
    for field in fields:
        name = str(field["name"])
        values = [row.get(name) for row in rows]
        try:
            columns[name] = _decode_column(values, field).rename(name)
        except (TypeError, ValueError, OverflowError) as exc:
            raise RenderError(f"column {name!r} of a recorded table: {exc}") from exc
    if not columns:
        return pd.DataFrame(index=pd.RangeIndex(len(rows)))
    return pd.DataFrame(columns)


def _decode_column(values: list[Any], field: Mapping[str, Any]) -> pd.Series:
    import numpy as np
    import pandas as pd

    kind = field.get("type", "string")
    has_null = any(value is None for value in values)
    if kind == "integer":
        try:
            series = pd.Series(pd.array(values, dtype="Int64" if has_null else "int64"))
        except (OverflowError, TypeError, ValueError):
            series = pd.Series(values, dtype=object)  # beyond 64 bits: Python ints
    elif kind == "number":
        series = pd.Series([np.nan if v is None else v for v in values], dtype="float64")
    elif kind == "boolean":
        series = pd.Series(values, dtype="boolean" if has_null else "bool")
    elif kind == "datetime":
        zone = field.get("tz")
        if zone:
            series = pd.Series(pd.to_datetime(values, utc=True, format="ISO8601"))
            # A zone pandas cannot name (a bare offset) stays UTC: the same instants.
            with contextlib.suppress(KeyError, ValueError, TypeError):
                series = series.dt.tz_convert(zone)
        else:
            series = pd.Series(pd.to_datetime(values, format="ISO8601"), dtype="datetime64[ns]")
    elif kind == "date":
        dates = [None if v is None else dt.date.fromisoformat(v) for v in values]
        series = pd.Series(dates, dtype=object)
    elif kind == "duration":
        series = pd.Series(pd.to_timedelta(values), dtype="timedelta64[ns]")
    else:
        series = pd.Series(values, dtype=object)
    return _restore_dtype(series, field.get("dtype"))


def _restore_dtype(series: pd.Series, dtype: Any) -> pd.Series:
    if not isinstance(dtype, str) or dtype == str(series.dtype):
        return series
    if _RESTORABLE_DTYPE.fullmatch(dtype) is None:
        return series
    if dtype.startswith(("int", "uint")) and series.isna().any():
        return series  # a numpy integer cannot hold the nulls the column has now
    try:
        return series.astype(dtype)
    except (TypeError, ValueError):
        return series
