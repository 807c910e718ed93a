"""The four renderers on a real executed notebook: what people and programs get."""

from __future__ import annotations

import io
import re
import socket
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import nbformat
import openpyxl
import pandas as pd
import pytest
from pypdf import PdfReader
from pypdf.generic import ArrayObject, DictionaryObject, IndirectObject

from nbcast.delivery.renderers import renderers
from nbcast.delivery.renderers.csv import CsvRenderer
from nbcast.delivery.renderers.html import HtmlRenderer, describe_delay
from nbcast.delivery.renderers.pdf import PdfRenderer, data_url_fetcher, html_to_pdf
from nbcast.delivery.renderers.xlsx import XlsxRenderer
from nbcast.delivery.tables import read_tables
from nbcast.errors import RenderError
from tests.delivery import LATE, LONG_ROWS, executed_sample, make_report


@pytest.fixture(scope="module")
def executed() -> Any:
    return executed_sample()


@pytest.fixture(scope="module")
def page(executed: Any) -> str:
    return HtmlRenderer().render(executed, make_report()).decode("utf-8")


@pytest.fixture(scope="module")
def pdf(executed: Any) -> PdfReader:
    data = PdfRenderer().render(executed, make_report(late_by=LATE))
    assert data.startswith(b"%PDF-")
    return PdfReader(io.BytesIO(data))


def _body(page: str) -> str:
    return page[page.index("<body") :]


# -- registry ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "media_type", "extension"),
    [
        ("html", "text/html", "html"),
        ("pdf", "application/pdf", "pdf"),
        (
            "xlsx",
            "application/vnd.openxmlformats-officedocument.spreadsheetml.sheet",
            "xlsx",
        ),
        ("csv", "text/csv", "csv"),
    ],
)
def test_each_builtin_renderer_is_registered(name: str, media_type: str, extension: str) -> None:
    renderer = renderers.create(name)
    assert (renderer.name, renderer.media_type, renderer.extension) == (name, media_type, extension)
    assert renderer.filename(make_report()) == f"daily-sales_2026-06-15T0700.{extension}"


# -- html -------------------------------------------------------------------------


def test_html_has_the_report_header_in_the_report_timezone(page: str) -> None:
    assert "<title>daily-sales — 2026-06-15T07:00</title>" in page
    assert '<h1 class="nbcast-title">daily-sales</h1>' in page
    assert "Version 3 · slot 2026-06-15T07:00<" in page
    assert "nbcast-stale" not in _body(page)


def test_a_slot_report_does_not_depend_on_the_run_that_made_it(executed: Any) -> None:
    """A dry run of a slot, a rerun and the slot's own run render the same bytes."""
    first = HtmlRenderer().render(executed, make_report())
    other = make_report(run_id=99, finished_at=make_report().finished_at + timedelta(hours=3))
    assert HtmlRenderer().render(executed, other) == first


def test_html_leaves_out_code_cells_by_default_and_shows_them_when_asked(executed: Any) -> None:
    marker = "long = pd.DataFrame"
    default = HtmlRenderer().render(executed, make_report()).decode()
    with_code = HtmlRenderer(include_input=True).render(executed, make_report()).decode()
    assert marker not in default
    assert "jp-InputArea-editor" not in _body(default)
    assert "jp-InputArea-editor" in _body(with_code)
    assert "output.table" in re.sub(r"<[^>]+>", "", with_code)
    assert "<script" not in with_code.lower()


def test_html_shows_outputs_but_not_stderr(page: str) -> None:
    assert "plain stdout text" in page
    assert "a warning on stderr" not in page
    assert "row 149" in page  # the long table, all of it
    assert "<th>kept</th>" in page  # tables in hostile HTML survive, as tables
    assert "data:image/png;base64," in page


def test_html_is_self_contained_with_a_strict_content_security_policy(page: str) -> None:
    assert (
        "<meta content=\"default-src 'none'; img-src data:; style-src 'unsafe-inline'\" "
        'http-equiv="Content-Security-Policy"/>' in page
    )
    assert "<script" not in page.lower()
    assert not re.search(r"""(src|href)=["']?(https?:)?//""", page, re.IGNORECASE)
    assert "<link" not in page.lower()


def test_hostile_outputs_are_neutralised(page: str) -> None:
    lowered = page.lower()
    assert "<script" not in lowered
    assert "<iframe" not in lowered
    assert "<object" not in lowered
    assert "<form" not in lowered
    assert "<svg" not in lowered
    assert "javascript:" not in lowered
    assert "file:///etc/passwd" not in lowered
    assert "url(http" not in lowered
    assert not re.search(r"<[^>]*\son[a-z]+\s*=", lowered), "an event-handler attribute survived"
    assert "alert(" not in lowered  # not even as text: script content is removed
    assert "hostile output" in page
    assert "styled div" in page
    assert "click me" in page


@pytest.mark.parametrize(
    ("late_by", "words"),
    [
        pytest.param(timedelta(hours=1, minutes=20), "1 h 20 min", id="hour_and_minutes"),
        pytest.param(timedelta(minutes=45, seconds=30), "45 min", id="minutes"),
        pytest.param(timedelta(days=2, hours=3, minutes=5), "2 days 3 h", id="days"),
        pytest.param(timedelta(seconds=20), "less than a minute", id="seconds"),
        pytest.param(timedelta(hours=2), "2 h", id="whole_hours"),
    ],
)
def test_describe_delay(late_by: timedelta, words: str) -> None:
    assert describe_delay(late_by) == words


def test_a_late_report_carries_a_staleness_banner(executed: Any) -> None:
    late = HtmlRenderer().render(executed, make_report(late_by=LATE)).decode()
    banner = re.search(r'<div class="nbcast-stale" role="alert">(.*?)</div>', late)
    assert banner is not None
    assert "This report is late by 1 h 20 min" in banner.group(1)
    assert "2026-06-15 07:00 CEST" in banner.group(1)


def test_a_manual_run_names_its_run_and_escapes_the_name(executed: Any) -> None:
    report = make_report(slot_key=None, definition="<b>sales</b>", timezone="Not/AZone")
    page = HtmlRenderer().render(executed, report).decode()
    assert "manual run 42" in page
    assert "&lt;b&gt;sales&lt;/b&gt;" in page
    assert "run finished 2026-06-15 05:02 UTC" in page


def test_html_of_something_that_is_not_a_notebook_is_a_render_error() -> None:
    with pytest.raises(RenderError, match="html"):
        HtmlRenderer().render({"cells": "nope"}, make_report())


# -- pdf --------------------------------------------------------------------------


def test_pdf_pages_are_numbered_and_long_tables_repeat_their_header(pdf: PdfReader) -> None:
    texts = [p.extract_text() for p in pdf.pages]
    count = len(texts)
    assert count > 1
    assert "Page 1 of" in texts[0]
    assert f"Page {count} of {count}" in texts[-1]
    assert "daily-sales" in texts[-1]  # the report's name in every footer
    with_long_rows = [t for t in texts if re.search(r"row \d+", t)]
    assert len(with_long_rows) >= 2, "the long table should span pages"
    assert all("long_label" in t for t in with_long_rows), "header row not repeated"
    assert "This report is late by 1 h 20 min" in texts[0]


def test_pdf_has_metadata_from_the_report_and_no_actions(pdf: PdfReader) -> None:
    info = pdf.metadata
    assert info is not None
    assert info.title == "daily-sales — 2026-06-15T07:00"
    assert info.get("/CreationDate", "").startswith("D:20260615050000")
    names = _all_names(pdf.trailer["/Root"])
    assert not names & {"/JS", "/JavaScript", "/OpenAction", "/AA", "/Launch", "/SubmitForm"}


def _all_names(root: Any) -> set[str]:
    seen: set[tuple[int, int]] = set()
    names: set[str] = set()

    def walk(node: Any) -> Iterator[None]:
        if isinstance(node, IndirectObject):
            key = (node.idnum, node.generation)
            if key in seen:
                return
            seen.add(key)
            node = node.get_object()
        if isinstance(node, DictionaryObject):
            for key, value in node.items():
                names.add(str(key))
                if key != "/Parent":
                    yield from walk(value)
        elif isinstance(node, ArrayObject):
            for item in node:
                yield from walk(item)
        yield None

    for _ in walk(root):
        pass
    return names


@pytest.fixture
def listener() -> Iterator[socket.socket]:
    """A TCP port nobody should connect to; the test checks nobody did."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(5)
    server.setblocking(False)
    yield server
    server.close()


def test_pdf_layout_reads_no_file_and_reaches_no_network(listener: socket.socket) -> None:
    port = listener.getsockname()[1]
    html = (
        "<html><head>"
        f'<link rel="stylesheet" href="http://127.0.0.1:{port}/x.css">'
        f"<style>@import url(http://127.0.0.1:{port}/y.css);</style>"
        "</head><body><p>still renders</p>"
        '<img src="file:///etc/passwd">'
        '<img src="relative/picture.png">'
        f'<img src="http://127.0.0.1:{port}/z.png">'
        '<img src="data:image/png;base64,iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4'
        'nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC">'
        "</body></html>"
    )
    fetcher = data_url_fetcher()
    data, pages = html_to_pdf(html, make_report(), fetcher=fetcher)
    assert pages == 1
    assert "still renders" in PdfReader(io.BytesIO(data)).pages[0].extract_text()
    assert "file:///etc/passwd" in fetcher.refused
    assert f"http://127.0.0.1:{port}/x.css" in fetcher.refused
    assert f"http://127.0.0.1:{port}/z.png" in fetcher.refused
    assert not any(url.startswith("data:") for url in fetcher.refused)
    with pytest.raises(BlockingIOError):
        listener.accept()  # nothing connected


def test_pdf_page_size_is_an_option_and_is_checked(executed: Any) -> None:
    letter = PdfReader(io.BytesIO(PdfRenderer(page_size="letter").render(executed, make_report())))
    width, height = letter.pages[0].mediabox.width, letter.pages[0].mediabox.height
    assert (round(float(width)), round(float(height))) == (612, 792)
    with pytest.raises(RenderError, match="page size"):
        PdfRenderer(page_size="A4; } body { display: none")


# -- xlsx -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def workbook(executed: Any) -> Any:
    data = XlsxRenderer().render(executed, make_report())
    return openpyxl.load_workbook(io.BytesIO(data))


def test_xlsx_has_one_sheet_per_table_with_a_bold_frozen_filtered_header(workbook: Any) -> None:
    assert workbook.sheetnames == ["About", "mixed types", "long", "empty"]
    sheet = workbook["mixed types"]
    header = [cell.value for cell in sheet[1]]
    assert header == ["Region", "Orders", "Revenue", "Active", "First order", "Day", "Returns"]
    assert all(cell.font.b for cell in sheet[1])
    assert sheet.freeze_panes == "A2"
    assert sheet.auto_filter.ref == "A1:G4"
    widths = [sheet.column_dimensions[letter].width for letter in "ABCDEFG"]
    assert all(8 <= width <= 60 for width in widths)
    assert sheet.column_dimensions["E"].width >= 19  # a datetime fits
    assert workbook["long"].max_row == LONG_ROWS + 1
    assert workbook["empty"].max_row == 1


def test_xlsx_cells_are_typed(workbook: Any) -> None:
    import datetime as dt

    rows = list(workbook["mixed types"].iter_rows(min_row=2, values_only=False))
    first, second, _third = rows
    region, orders, revenue, active, first_order, day, returns = first
    assert region.value == "EMEA"
    assert region.data_type == "s"
    assert orders.value == 120
    assert isinstance(orders.value, int)
    assert orders.number_format == "#,##0"
    assert revenue.value == 1234.5
    assert isinstance(revenue.value, float)
    assert revenue.number_format == "#,##0.00"
    assert active.value is True
    assert first_order.value == dt.datetime(2026, 6, 15, 7, 30)
    assert first_order.number_format == "yyyy-mm-dd hh:mm:ss"
    assert day.value == dt.datetime(2026, 6, 15)
    assert day.number_format == "yyyy-mm-dd"
    assert day.is_date
    assert returns.value == 3
    assert [cell.value for cell in second] == [None, 0, None, False, None, None, None]


def test_xlsx_text_never_becomes_a_formula() -> None:
    from nbcast.delivery.tables import encode_table
    from nbcast.output import TABLE_MIME_TYPE

    frame = pd.DataFrame({"text": ['=HYPERLINK("http://x","y")', "bell\x07"]})
    output = nbformat.v4.new_output(
        "display_data",
        data={TABLE_MIME_TYPE: encode_table(frame, "t")},
        metadata={"nbcast": {"table": "t"}},
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[output])])
    sheet = openpyxl.load_workbook(io.BytesIO(XlsxRenderer().render(notebook, make_report())))["t"]
    assert sheet["A2"].data_type == "s"
    assert sheet["A2"].value == '=HYPERLINK("http://x","y")'
    assert sheet["A3"].value == "bell"


def test_xlsx_without_tables_is_a_render_error() -> None:
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# nothing")])
    with pytest.raises(RenderError, match=r"no tables.*output\.table"):
        XlsxRenderer().render(notebook, make_report())


def test_xlsx_dates_are_the_slot_and_zip_entries_are_fixed(executed: Any) -> None:
    data = XlsxRenderer().render(executed, make_report())
    archive = zipfile.ZipFile(io.BytesIO(data))
    infos = archive.infolist()
    assert infos[0].filename == "[Content_Types].xml"
    assert {info.date_time for info in infos} == {(2026, 6, 15, 5, 0, 0)}
    core = archive.read("docProps/core.xml").decode()
    assert "2026-06-15T05:00:00Z" in core


# -- csv --------------------------------------------------------------------------


def test_csv_of_several_tables_is_a_sorted_zip_that_pandas_reads(executed: Any) -> None:
    renderer = CsvRenderer()
    data = renderer.render(executed, make_report())
    assert renderer.media_type_for(executed) == "application/zip"
    assert renderer.filename_for(executed, make_report()).endswith(".zip")
    archive = zipfile.ZipFile(io.BytesIO(data))
    assert archive.namelist() == ["empty.csv", "long.csv", "mixed types.csv"]
    mixed = pd.read_csv(archive.open("mixed types.csv"), keep_default_na=True)
    assert list(mixed.columns) == [
        "region",
        "orders",
        "revenue",
        "active",
        "first_order",
        "day",
        "returns",
    ]
    assert mixed["orders"].tolist() == [120, 0, 7]
    assert mixed["active"].tolist() == [True, False, True]
    assert mixed["first_order"].tolist()[0] == "2026-06-15T07:30:00"
    assert mixed["day"].tolist()[0] == "2026-06-15"
    assert pd.isna(mixed["region"][1])
    assert pd.isna(mixed["revenue"][1])
    long = pd.read_csv(archive.open("long.csv"))
    assert len(long) == LONG_ROWS


def test_csv_of_one_table_is_plain_utf8_crlf_csv(executed: Any) -> None:
    renderer = CsvRenderer(table="mixed types")
    data = renderer.render(executed, make_report())
    assert renderer.media_type_for(executed) == "text/csv"
    assert renderer.filename_for(executed, make_report()) == "daily-sales_2026-06-15T0700.csv"
    text = data.decode("utf-8")
    assert not text.startswith("\ufeff")
    lines = text.split("\r\n")
    assert lines[0] == "region,orders,revenue,active,first_order,day,returns"
    assert lines[1] == "EMEA,120,1234.5,true,2026-06-15T07:30:00,2026-06-15,3"
    assert lines[2] == ",0,,false,,,"
    assert lines[-1] == ""


def test_csv_of_an_unknown_table_or_no_table_is_a_render_error(executed: Any) -> None:
    with pytest.raises(RenderError, match="no table 'missing'"):
        CsvRenderer(table="missing").render(executed, make_report())
    notebook = nbformat.v4.new_notebook()
    with pytest.raises(RenderError, match="no tables"):
        CsvRenderer().render(notebook, make_report())


def test_csv_and_xlsx_agree_with_read_tables(executed: Any) -> None:
    tables = read_tables(executed)
    sheet = openpyxl.load_workbook(io.BytesIO(XlsxRenderer().render(executed, make_report())))
    for name, frame in tables.items():
        assert sheet[name].max_column == max(len(frame.columns), 1)


def test_xlsx_shows_labels_and_formats_and_an_about_sheet() -> None:
    """A finance reader's sheet: the columns' labels and formats as output.table() gave
    them, dates as dates, and an About sheet naming the report, slot and period."""
    import datetime as dt

    from nbcast.delivery.tables import encode_table
    from nbcast.output import TABLE_MIME_TYPE

    frame = pd.DataFrame(
        {
            "region": ["EMEA", "AMER"],
            "revenue": [13096.15999999998, 800.0],
            "share_pct": [4.78, 95.22],
            "share": [0.0478, 0.9522],
            "day": pd.to_datetime(["2026-11-23", "2026-11-24"]),
            "orders": [1200, 35],
        }
    )
    payload = encode_table(
        frame,
        "sales",
        labels={"share_pct": "Share of revenue"},
        formats={"revenue": "currency:USD", "share_pct": "percent_points", "share": "percent"},
    )
    output = nbformat.v4.new_output(
        "display_data", data={TABLE_MIME_TYPE: payload}, metadata={"nbcast": {"table": "sales"}}
    )
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("", outputs=[output])])
    report = make_report(
        interval_start=dt.datetime(2026, 6, 12, 7, tzinfo=dt.UTC),
        interval_end=dt.datetime(2026, 6, 15, 5, tzinfo=dt.UTC),
    )
    book = openpyxl.load_workbook(io.BytesIO(XlsxRenderer().render(notebook, report)))
    assert book.sheetnames == ["About", "sales"]
    about = {row[0]: row[1] for row in book["About"].iter_rows(values_only=True)}
    assert about["Report"] == "daily-sales — 2026-06-15T07:00"
    assert about["Slot"] == "2026-06-15T07:00 (Europe/Berlin)"
    assert about["Period"] == "Fri 2026-06-12 09:00 CEST to Mon 2026-06-15 07:00 CEST"
    assert about["Sheets"] == "sales"
    sheet = book["sales"]
    assert [c.value for c in sheet[1]] == [
        "Region",
        "Revenue",
        "Share of revenue",
        "Share",
        "Day",
        "Orders",
    ]
    region, revenue, share_pct, share, day, orders = sheet[2]
    assert (revenue.value, revenue.number_format) == (13096.15999999998, '"USD" #,##0.00')
    assert (share_pct.value, share_pct.number_format) == (4.78, '0.0"%"')
    assert share.number_format == "0.0%"
    assert day.is_date
    assert day.number_format == "yyyy-mm-dd"  # all at midnight: dates, not 00:00:00
    assert orders.number_format == "#,##0"
    assert region.number_format == "General"


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"formats": {"nope": "currency"}}, "not a column"),
        ({"formats": {"x": "money"}}, "is not one of"),
        ({"formats": {"x": "currency:usd"}}, "is not one of"),
        ({"labels": {"x": ""}}, "1 to 100 characters"),
        ({"labels": ["x"]}, "must be a dict"),
    ],
)
def test_bad_labels_and_formats_are_refused_in_the_notebook(
    options: dict[str, Any], message: str
) -> None:
    from nbcast.delivery.tables import encode_table

    with pytest.raises(ValueError, match=message):
        encode_table(pd.DataFrame({"x": [1]}), "t", **options)
