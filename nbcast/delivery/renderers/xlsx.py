"""The ``xlsx`` renderer: an About sheet, then one worksheet per table the report recorded.

Tables come from :func:`nbcast.delivery.tables.read_tables` (what the notebook passed
to ``nbcast.output.table``), in notebook order, one sheet each, named after the
table. A notebook that recorded no table cannot be a spreadsheet:
:class:`~nbcast.errors.RenderError`.

The first sheet, **About** (``About report`` when a table is named about), says what
the workbook is: the report's title and description, its definition and version, the
slot it reports, the period it covers (the run's data interval) in the schedule's
zone, and the sheets that follow. A slot's report names no run (a dry run of the slot
renders the same bytes); a manual run's names itself.

Each table's sheet: a bold header row — each column's label given to
``output.table(…, labels=…)``, else its name made readable (``revenue_last_week`` →
``Revenue last week``) — frozen (``freeze_panes = "A2"``), with an autofilter; column
widths from the longest value (the first 5,000 rows), between 8 and 60 characters;
typed cells, shown by the column's ``formats=`` entry
(:mod:`nbcast.output.presentation`: currency, percent, percent points, thousands,
integer, decimal, date, datetime, text) or else by type —

- whole numbers with separators (``#,##0``), other numbers with two decimals
  (``#,##0.00``); NaN and ±inf are blank cells;
- booleans are booleans; nulls are blank cells;
- dates are dates (``yyyy-mm-dd``), datetimes are datetimes
  (``yyyy-mm-dd hh:mm:ss``; a column whose values are all at midnight, as dates):
  timezone-aware ones are shown in the report's time zone, because Excel has no time
  zones; durations are ``[h]:mm:ss``;
- strings are always strings, never formulas (a value ``=HYPERLINK(…)`` stays text),
  without the control characters the format forbids, cut at Excel's 32,767
  characters.

Byte-determinism: openpyxl stamps ``docProps/core.xml`` with the wall clock and every
zip entry with the local time; this renderer sets the document's created and
modified dates to ``report.fire_at`` and rewrites the archive with fixed entry
dates (:mod:`._determinism`), ``[Content_Types].xml`` first and the rest sorted.
"""

from __future__ import annotations

import datetime as dt
import io
import math
import re
import zipfile
from typing import Any, ClassVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nbcast.delivery.renderers._determinism import rezip
from nbcast.delivery.renderers.base import Renderer
from nbcast.delivery.report import ReportInfo
from nbcast.errors import RenderError

__all__ = ["XlsxRenderer"]

_INTEGER_FORMAT = "#,##0"
_DECIMAL_FORMAT = "#,##0.00"
_NUMBER_FORMATS = {
    "currency": _DECIMAL_FORMAT,
    "percent": "0.0%",
    "percent_points": '0.0"%"',
    "thousands": _INTEGER_FORMAT,
    "integer": "0",
    "decimal": _DECIMAL_FORMAT,
    "date": "yyyy-mm-dd",
    "datetime": "yyyy-mm-dd hh:mm",
    "text": "@",
}
"""A column's ``format`` (:mod:`nbcast.output.presentation`) as a number format."""
_DATE_FORMAT = "yyyy-mm-dd"
_DATETIME_FORMAT = "yyyy-mm-dd hh:mm:ss"
_DURATION_FORMAT = "[h]:mm:ss"
_MAX_CELL_TEXT = 32_767
_ILLEGAL = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f]")
_WIDTH_SAMPLE = 5_000


def _zone(name: str) -> dt.tzinfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return dt.UTC


def _column_values(series: Any, zone: dt.tzinfo) -> tuple[list[Any], str | None]:
    """The column as Python values for openpyxl, and the number format it needs."""
    import pandas as pd

    dtype = series.dtype
    missing = series.isna().tolist()
    values: list[Any]
    if pd.api.types.is_bool_dtype(dtype):
        values = [None if gone else bool(v) for v, gone in zip(series, missing, strict=True)]
        return values, None
    if pd.api.types.is_integer_dtype(dtype):
        values = [None if gone else int(v) for v, gone in zip(series, missing, strict=True)]
        return values, _INTEGER_FORMAT
    if pd.api.types.is_float_dtype(dtype):
        floats = [None if gone else float(v) for v, gone in zip(series, missing, strict=True)]
        kept = [v if v is not None and math.isfinite(v) else None for v in floats]
        return kept, _DECIMAL_FORMAT
    if pd.api.types.is_datetime64_any_dtype(dtype):
        if getattr(dtype, "tz", None) is not None:
            series = series.dt.tz_convert(zone).dt.tz_localize(None)
        values = [
            None if gone else v.to_pydatetime() for v, gone in zip(series, missing, strict=True)
        ]
        present = [v for v in values if v is not None]
        midnight = present and all(v.time() == dt.time() for v in present)
        return values, _DATE_FORMAT if midnight else _DATETIME_FORMAT
    if pd.api.types.is_timedelta64_dtype(dtype):
        values = [
            None if gone else v.to_pytimedelta() for v, gone in zip(series, missing, strict=True)
        ]
        return values, _DURATION_FORMAT
    values = [None if gone else v for v, gone in zip(series.tolist(), missing, strict=True)]
    present = [v for v in values if v is not None]
    if present and all(isinstance(v, dt.date) and not isinstance(v, dt.datetime) for v in present):
        return values, _DATE_FORMAT
    return [None if v is None else _text(v) for v in values], None


def _text(value: Any) -> str:
    text = _ILLEGAL.sub("", value if isinstance(value, str) else str(value))
    return text[:_MAX_CELL_TEXT]


def _width(header: str, values: list[Any], number_format: str | None) -> float:
    if number_format in (_DATETIME_FORMAT, _NUMBER_FORMATS["datetime"]):
        longest = 19
    elif number_format == _DATE_FORMAT:
        longest = 10
    else:
        sample = (v for v in values[:_WIDTH_SAMPLE] if v is not None)
        longest = max((len(str(v)) for v in sample), default=0)
    return float(min(max(len(header), longest, 6) + 2, 60))


def _number_format(given: Any, found: str | None, values: list[Any]) -> str | None:
    """The number format of a column: its ``format`` when it has one that fits its
    values (a text column stays text), else the one its type gave."""
    if not isinstance(given, str):
        return found
    if given.startswith("currency:"):
        return f'"{given[9:12]}" {_DECIMAL_FORMAT}'
    wanted = _NUMBER_FORMATS.get(given)
    first = next((v for v in values if v is not None), None)
    if wanted is None or isinstance(first, str):  # text is shown as text, whatever is asked
        return found
    return wanted


def _write_sheet(workbook: Any, name: str, frame: Any, zone: dt.tzinfo, fields: list[Any]) -> None:
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font
    from openpyxl.utils import get_column_letter

    from nbcast.output.presentation import readable

    sheet = workbook.create_sheet(title=name)
    shown = {str(f.get("name")): f for f in fields if isinstance(f, dict) and "name" in f}
    names = [str(column) for column in frame.columns]
    headers = [str(shown.get(n, {}).get("label") or readable(n)) for n in names]
    columns = []
    for i, column in enumerate(names):
        values, found = _column_values(frame.iloc[:, i], zone)
        columns.append((values, _number_format(shown.get(column, {}).get("format"), found, values)))
    for index, (header, (values, number_format)) in enumerate(
        zip(headers, columns, strict=True), start=1
    ):
        sheet.column_dimensions[get_column_letter(index)].width = _width(
            header, values, number_format
        )
    sheet.freeze_panes = "A2"
    if headers:
        sheet.auto_filter.ref = f"A1:{get_column_letter(len(headers))}{len(frame) + 1}"
    bold = Font(bold=True)
    header_cells = []
    for header in headers:
        cell = WriteOnlyCell(sheet, value=_text(header))
        cell.data_type = "s"
        cell.font = bold
        header_cells.append(cell)
    sheet.append(header_cells)
    formats = [number_format for _, number_format in columns]
    for row in zip(*(values for values, _ in columns), strict=True):
        cells: list[Any] = []
        for value, number_format in zip(row, formats, strict=True):
            if value is None:
                cells.append(None)
            elif number_format is not None or isinstance(value, str):
                cell = WriteOnlyCell(sheet, value=value)
                if isinstance(value, str):
                    cell.data_type = "s"  # "=…" is text here, never a formula
                else:
                    cell.number_format = number_format
                cells.append(cell)
            else:
                cells.append(value)
        sheet.append(cells)


def _local(instant: dt.datetime, zone: dt.tzinfo) -> str:
    local = instant.astimezone(zone)
    return f"{local:%a %Y-%m-%d %H:%M} {local.tzname()}"


def _about_sheet(workbook: Any, report: ReportInfo, zone: dt.tzinfo, sheets: list[str]) -> None:
    """The About sheet (module docstring)."""
    from openpyxl.cell import WriteOnlyCell
    from openpyxl.styles import Font

    title = "About report" if any(s.casefold() == "about" for s in sheets) else "About"
    sheet = workbook.create_sheet(title=title)
    sheet.column_dimensions["A"].width = 14
    sheet.column_dimensions["B"].width = 70
    rows: list[tuple[str, str]] = [("Report", report.title)]
    if report.description:
        rows.append(("About", report.description))
    rows += [("Definition", report.definition), ("Version", str(report.version))]
    if report.slot_key:
        rows.append(("Slot", f"{report.slot_key} ({report.timezone})"))
    else:
        rows.append(("Run", f"manual run {report.run_id}"))
    if report.interval_start is not None and report.interval_end is not None:
        period = f"{_local(report.interval_start, zone)} to {_local(report.interval_end, zone)}"
        rows.append(("Period", period))
    rows.append(("Sheets", ", ".join(sheets)))
    bold = Font(bold=True)
    for label, value in rows:
        key = WriteOnlyCell(sheet, value=label)
        key.font = bold
        text = WriteOnlyCell(sheet, value=_text(value))
        text.data_type = "s"
        sheet.append([key, text])


class XlsxRenderer(Renderer):
    """A workbook of the report's tables, one sheet each (module docstring)."""

    name: ClassVar[str] = "xlsx"
    media_type: ClassVar[str] = "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet"
    extension: ClassVar[str] = "xlsx"

    def render(self, notebook: Any, report: ReportInfo) -> bytes:
        """The workbook's bytes; RenderError when the notebook recorded no table."""
        from openpyxl import Workbook
        from openpyxl.writer.excel import ExcelWriter

        from nbcast.delivery.tables import read_tables
        from nbcast.output.tables import table_payloads

        tables = read_tables(notebook)
        if not tables:
            raise RenderError(
                "xlsx: the notebook records no tables; call nbcast.output.table(df, name) "
                "in the report for each table the spreadsheet should have"
            )
        zone = _zone(report.timezone)
        workbook = Workbook(write_only=True)
        stamp = report.fire_at.astimezone(dt.UTC).replace(tzinfo=None)
        workbook.properties.creator = "nbcast"
        workbook.properties.title = report.title
        workbook.properties.created = stamp
        workbook.properties.modified = stamp
        payloads = table_payloads(notebook)
        _about_sheet(workbook, report, zone, list(tables))
        for name, frame in tables.items():
            fields = payloads.get(name, {}).get("schema", {}).get("fields", [])
            _write_sheet(workbook, name, frame, zone, fields if isinstance(fields, list) else [])
        buffer = io.BytesIO()
        try:
            # ExcelWriter directly: openpyxl's save_workbook() stamps "modified" with now.
            with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED, allowZip64=True) as archive:
                ExcelWriter(workbook, archive).save()
        except (TypeError, ValueError) as exc:
            raise RenderError(f"xlsx: openpyxl could not write the workbook: {exc}") from exc
        return rezip(buffer.getvalue(), report.fire_at, first=("[Content_Types].xml",))
