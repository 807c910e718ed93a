"""The ``csv`` renderer: the report's tables as CSV, for programs more than for people.

Each table (from :func:`nbcast.delivery.tables.read_tables`) becomes one CSV file:

- UTF-8 without a byte-order mark, a header row, ``\\r\\n`` line endings (RFC 4180,
  the ``text/csv`` registration; what Python's ``csv`` module and Excel write),
  fields quoted only when they need it;
- nulls are empty fields; booleans ``true``/``false``; integers as digits; floats
  as their shortest round-tripping form (``0.1``, ``1e+20``); dates ``YYYY-MM-DD``;
  datetimes ISO 8601 (``2026-06-15T07:00:00``, with the offset when the column has a
  time zone); durations ISO 8601 (``P0DT1H30M0S``); strings as they are, except:

**Formula injection.** A CSV is opened by people in spreadsheets too, and a
spreadsheet runs a cell that begins with ``=``, ``+``, ``-`` or ``@`` as a formula
(``=HYPERLINK(…)``, ``=cmd|' /C calc'!A0``). So, as OWASP recommends, every *text*
cell — a string value, and a column name — that begins with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return is written with a single quote in front
(``'=1+2``), which spreadsheets show as text. Numbers, booleans, dates and durations
are never changed (``-5`` stays ``-5``); a program reading the CSV sees the quote on
those text cells only, and can strip it.

**One table or several.** One table renders as that CSV (``text/csv``,
``.csv``). Several render as a zip of ``<name>.csv`` files, sorted by name, with fixed
dates (``application/zip``, ``.zip``). The class attributes :attr:`media_type` and
:attr:`extension` describe the common one-table case; :meth:`media_type_for`,
:meth:`extension_for` and :meth:`filename_for` give the right answer for a given
notebook (the zip's bytes also start with ``PK``). ``CsvRenderer(table="name")``
renders just that table, always as a plain CSV. No table at all:
:class:`~nbcast.errors.RenderError`.
"""

from __future__ import annotations

import csv
import datetime as dt
import io
import math
import numbers
from typing import Any, ClassVar

from nbcast.delivery.renderers._determinism import write_zip
from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.report import ReportInfo
from nbcast.errors import RenderError

__all__ = ["CsvRenderer", "table_csv"]

ZIP_MEDIA_TYPE = "application/zip"
_FORMULA_STARTS = ("=", "+", "-", "@", "\t", "\r")


def _text(value: str) -> str:
    """A text cell, neutralised against formula injection (module docstring)."""
    return "'" + value if value.startswith(_FORMULA_STARTS) else value


def _field(value: Any) -> str:
    """One value as CSV text (module docstring)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        return repr(value) if math.isfinite(value) else ""
    if isinstance(value, dt.datetime | dt.date):
        return value.isoformat()
    if isinstance(value, numbers.Number | dt.timedelta | dt.time):  # typed: as it is
        return str(value)
    return _text(str(value))


def _column_fields(series: Any) -> list[str]:
    import pandas as pd

    dtype = series.dtype
    missing = series.isna().tolist()
    if pd.api.types.is_bool_dtype(dtype):
        values: list[Any] = [
            None if gone else bool(v) for v, gone in zip(series, missing, strict=True)
        ]
    elif pd.api.types.is_integer_dtype(dtype):
        values = [None if gone else int(v) for v, gone in zip(series, missing, strict=True)]
    elif pd.api.types.is_float_dtype(dtype):
        values = [float(v) for v in series.tolist()]
    elif pd.api.types.is_datetime64_any_dtype(dtype) or pd.api.types.is_timedelta64_dtype(dtype):
        # Typed values: never neutralised (only text can be a formula).
        return ["" if gone else v.isoformat() for v, gone in zip(series, missing, strict=True)]
    else:
        values = series.tolist()
    return ["" if gone else _field(value) for value, gone in zip(values, missing, strict=True)]


def table_csv(frame: Any) -> bytes:
    """One DataFrame as CSV bytes (module docstring for the format)."""
    buffer = io.StringIO(newline="")
    writer = csv.writer(buffer, lineterminator="\r\n")
    writer.writerow([_text(str(column)) for column in frame.columns])
    columns = [_column_fields(frame.iloc[:, i]) for i in range(frame.shape[1])]
    if columns:
        writer.writerows(zip(*columns, strict=True))
    else:
        writer.writerows([] for _ in range(len(frame)))
    return buffer.getvalue().encode("utf-8")


class CsvRenderer(Renderer):
    """The report's tables as CSV: one table a CSV, several a zip (module docstring)."""

    name: ClassVar[str] = "csv"
    media_type: ClassVar[str] = "text/csv"
    extension: ClassVar[str] = "csv"

    def __init__(self, *, table: str | None = None) -> None:
        self.table = table

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The CSV (one table) or the zip of CSVs (several); RenderError when none."""
        tables = self._tables(notebook)
        if len(tables) == 1:
            (frame,) = tables.values()
            return table_csv(frame)
        entries = sorted(tables.items(), key=lambda item: (item[0].casefold(), item[0]))
        return write_zip(
            ((f"{name}.csv", table_csv(frame)) for name, frame in entries), report.fire_at
        )

    def media_type_for(self, notebook: Any) -> str:
        """``text/csv`` when this notebook renders as one CSV, else ``application/zip``."""
        return self.media_type if self._is_single(notebook) else ZIP_MEDIA_TYPE

    def extension_for(self, notebook: Any) -> str:
        """``csv`` when this notebook renders as one CSV, else ``zip``."""
        return self.extension if self._is_single(notebook) else "zip"

    def filename_for(self, notebook: Any, report: ReportInfo) -> str:
        """The attachment's name for this notebook: ``…_2026-06-15T0700.csv`` or ``.zip``."""
        return f"{report.stem}.{self.extension_for(notebook)}"

    def _is_single(self, notebook: Any) -> bool:
        from nbcast.delivery.tables import table_payloads

        return self.table is not None or len(table_payloads(notebook)) <= 1

    def _tables(self, notebook: Any) -> dict[str, Any]:
        from nbcast.delivery.tables import read_tables

        tables = read_tables(notebook)
        if not tables:
            raise RenderError(
                "csv: the notebook records no tables; call nbcast.output.table(df, name) "
                "in the report for each table to export"
            )
        if self.table is None:
            return tables
        for name, frame in tables.items():
            if name.casefold() == self.table.casefold():
                return {name: frame}
        raise RenderError(
            f"csv: the notebook records no table {self.table!r} (it has {sorted(tables)})"
        )
