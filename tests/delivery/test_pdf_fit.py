"""Wide tables fit the PDF page: nothing is cut off at the edge, narrow reports stay
portrait, and the example reports' every table is on its page.

"On the page" is checked by :func:`tests.delivery.pdfcheck.text_outside_page`: every
text run of every page starts and ends inside the page's media box; "in the PDF" means
in :func:`~tests.delivery.pdfcheck.visible_text`, the text of the runs on their page.
"""

from __future__ import annotations

import hashlib
import io
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import papermill
import pytest
import weasyprint
from pypdf import PdfReader

from nbcast.delivery.renderers._fit import STEPS, FontStep, choose_layout
from nbcast.delivery.renderers._measure import TableMeasure
from nbcast.delivery.renderers._pages import page_geometry
from nbcast.delivery.renderers.pdf import PdfRenderer, html_to_pdf
from nbcast.delivery.renderers.thumbnails import pdf_thumbnail
from nbcast.delivery.tables import read_tables
from nbcast.errors import RenderError
from tests.delivery import executed_sample, make_report
from tests.delivery.pdfcheck import text_outside_page, text_runs, visible_text

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "notebooks" / "examples"
A4 = (595, 842)
A4_LANDSCAPE = (842, 595)

NARROW_SOURCE = """
import pandas as pd
from nbcast import output

narrow = pd.DataFrame({"narrow_region": ["EMEA", "AMER"], "narrow_orders": [12, 7]})
output.table(narrow, "narrow")
"""
# 25 columns: 24 metrics and a last one whose values no other cell has.
WIDE_SOURCE = """
wide = pd.DataFrame(
    {f"metric_{c:02d}": [1000.25 * (r + 1) + c for r in range(6)] for c in range(1, 25)}
    | {"zz_last": [9870001 + r for r in range(6)]},
    index=pd.Index([f"2026-06-{d:02d}" for d in range(1, 7)], name="day"),
)
with pd.option_context("display.max_columns", None):
    output.table(wide, "wide")
"""
WIDE_COLUMNS = [f"metric_{c:02d}" for c in range(1, 25)] + ["zz_last"]
LAST_VALUES = [str(9870001 + r) for r in range(6)]


def _execute(cells: list[Any], folder: Path) -> Any:
    """``cells`` as a notebook executed by papermill on the ``python3`` kernel."""
    notebook = nbformat.v4.new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {
        "name": "python3",
        "display_name": "Python 3",
        "language": "python",
    }
    source, target = folder / "fit.ipynb", folder / "fit.out.ipynb"
    nbformat.write(notebook, source)
    papermill.execute_notebook(
        str(source), str(target), kernel_name="python3", progress_bar=False, cwd=str(folder)
    )
    return nbformat.read(target, as_version=4)


@pytest.fixture(scope="module")
def mixed_notebook() -> Any:
    """Executed: a narrow table, a heading, the 25-column table, then text."""
    with tempfile.TemporaryDirectory(prefix="nbcast-fit-") as folder:
        return _execute(
            [
                nbformat.v4.new_markdown_cell("# Fit sample\n\nA narrow table first."),
                nbformat.v4.new_code_cell(NARROW_SOURCE),
                nbformat.v4.new_markdown_cell("## Twenty-five columns"),
                nbformat.v4.new_code_cell(WIDE_SOURCE),
                nbformat.v4.new_markdown_cell("Text after the wide table."),
            ],
            Path(folder),
        )


@pytest.fixture(scope="module")
def mixed_pdf(mixed_notebook: Any) -> bytes:
    return PdfRenderer().render(mixed_notebook, make_report())


def _sizes(pdf: bytes) -> list[tuple[int, int]]:
    reader = PdfReader(io.BytesIO(pdf))
    return [
        (round(float(page.mediabox.width)), round(float(page.mediabox.height)))
        for page in reader.pages
    ]


def _texts(pdf: bytes) -> list[str]:
    """Per page, the text on the page (not pypdf's ``extract_text``: it also returns
    text drawn past the page's edge, where nobody can read it)."""
    return visible_text(pdf)


def _squeezed(text: str) -> str:
    """Without whitespace: a header wrapped inside its cell still reads as itself."""
    return "".join(text.split())


def _outside_message(pdf: bytes) -> str:
    return "\n".join(str(found) for found in text_outside_page(pdf)[:10])


# -- the 25-column table, through the real pipeline ---------------------------------


def test_a_25_column_table_keeps_its_last_column_in_the_pdf(mixed_pdf: bytes) -> None:
    text = _squeezed(" ".join(_texts(mixed_pdf)))
    assert "zz_last" in text
    for value in LAST_VALUES:
        assert value in text
    missing = [name for name in WIDE_COLUMNS if name not in text]
    assert not missing, f"columns missing from the PDF: {missing}"


def test_no_text_of_the_wide_report_falls_outside_the_page(mixed_pdf: bytes) -> None:
    assert text_runs(mixed_pdf), "the checker should see the text"
    assert text_outside_page(mixed_pdf) == [], _outside_message(mixed_pdf)


def test_a_mixed_report_turns_only_the_page_of_the_wide_table(mixed_pdf: bytes) -> None:
    sizes, texts = _sizes(mixed_pdf), _texts(mixed_pdf)

    def pages_with(marker: str) -> set[tuple[int, int]]:
        return {size for size, text in zip(sizes, texts, strict=True) if marker in text}

    assert pages_with("narrow_orders") == {A4}
    assert pages_with("zz_last") == {A4_LANDSCAPE}
    assert pages_with("Twenty-five columns") == {A4_LANDSCAPE}, "its heading goes with it"
    assert pages_with("Text after the wide table.") == {A4}
    assert sizes[0] == A4
    assert "Page 1 of" in texts[0]
    assert f"Page {len(texts)} of {len(texts)}" in texts[-1]
    assert all("daily-sales" in text for text in texts), "footer on every page"


def test_letter_reports_turn_wide_tables_to_letter_landscape(mixed_notebook: Any) -> None:
    pdf = PdfRenderer(page_size="letter").render(mixed_notebook, make_report())
    assert set(_sizes(pdf)) == {(612, 792), (792, 612)}
    assert text_outside_page(pdf) == [], _outside_message(pdf)


def test_a_landscape_report_keeps_its_pages_and_still_fits(mixed_notebook: Any) -> None:
    pdf = PdfRenderer(page_size="A4 landscape").render(mixed_notebook, make_report())
    assert set(_sizes(pdf)) == {A4_LANDSCAPE}
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    assert "zz_last" in _squeezed(" ".join(_texts(pdf)))


def test_a_plain_report_stays_on_portrait_a4() -> None:
    """The sample report's tables (up to 7 columns) need no turn and no change."""
    pdf = PdfRenderer().render(executed_sample(), make_report())
    assert set(_sizes(pdf)) == {A4}
    assert text_outside_page(pdf) == [], _outside_message(pdf)


def test_unknown_page_sizes_are_refused_with_the_known_ones() -> None:
    with pytest.raises(RenderError, match=r"unsupported page size 'A11'.*A4.*letter"):
        PdfRenderer(page_size="A11")
    with pytest.raises(RenderError, match="page size"):
        PdfRenderer(page_size="1mm 1mm")
    assert PdfRenderer(page_size="210mm 297mm").page_size == "210mm 297mm"


# -- the policy, step by step ------------------------------------------------------


def _measure(
    columns: int, min_em: float, max_em: float, *, headers: int = 0, splittable: bool = True
) -> TableMeasure:
    return TableMeasure(
        min_em=(min_em,) * columns,
        max_em=(max_em,) * columns,
        header_columns=headers,
        splittable=splittable,
        breaking_cells=(),
        rows=(),
    )


USUAL, SMALL, SMALLEST = STEPS


@pytest.mark.parametrize(
    ("measure", "page_size", "turned", "step", "how"),
    [
        pytest.param(_measure(3, 5, 5), "A4", False, USUAL, "as is", id="narrow_stays_as_it_is"),
        pytest.param(_measure(9, 6, 6), "A4", False, SMALL, "as is", id="a_little_wide_7_5pt"),
        pytest.param(
            _measure(6, 4, 30), "A4", False, USUAL, "as is", id="text_wraps_before_the_page_turns"
        ),
        pytest.param(_measure(10, 6.6, 6.6), "A4", True, USUAL, "as is", id="numbers_turn_page"),
        pytest.param(
            _measure(14, 6.5, 6.5), "A4", True, SMALLEST, "as is", id="landscape_then_6_5pt"
        ),
        pytest.param(_measure(31, 6, 6, headers=1), "A4", True, SMALL, "split", id="split"),
        pytest.param(
            _measure(31, 6, 6, splittable=False), "A4", True, SMALLEST, "fixed", id="ragged_fixed"
        ),
        pytest.param(
            _measure(10, 6.6, 6.6), "A4 landscape", False, USUAL, "as is", id="landscape_paper"
        ),
        pytest.param(
            _measure(14, 6.5, 6.5), "A4 landscape", False, SMALLEST, "as is", id="no_page_to_turn"
        ),
    ],
)
def test_the_first_layout_that_fits_wins(
    measure: TableMeasure, page_size: str, turned: bool, step: FontStep, how: str
) -> None:
    layout = choose_layout(measure, page_geometry(page_size))
    assert (layout.turned, layout.step) == (turned, step)
    assert ("split" if layout.groups else "fixed" if layout.fixed else "as is") == how


def test_column_groups_repeat_the_row_headers_and_share_the_columns_evenly() -> None:
    layout = choose_layout(_measure(31, 6, 6, headers=1), page_geometry("A4"))
    assert [len(group) for group in layout.groups] == [11, 11, 11]
    assert all(group[0] == 0 for group in layout.groups)
    assert sorted({c for group in layout.groups for c in group}) == list(range(31))


def test_a_table_inside_a_list_is_reckoned_narrower() -> None:
    page = page_geometry("A4")
    fits = _measure(8, 6, 6)
    assert not choose_layout(fits, page).turned
    assert choose_layout(fits, page, indent_pt=60).step == SMALL


# -- tables wider than a landscape page, built from outputs -------------------------


def _notebook_of(*htmls: str) -> Any:
    cells = [nbformat.v4.new_markdown_cell("# Outputs")]
    for html in htmls:
        output = nbformat.v4.new_output("display_data", data={"text/html": html})
        cells.append(nbformat.v4.new_code_cell("", outputs=[output]))
    return nbformat.v4.new_notebook(cells=cells)


def _frame_html(frame: pd.DataFrame) -> str:
    with pd.option_context("display.max_columns", None, "display.max_colwidth", None):
        return str(frame._repr_html_())


def test_a_table_too_wide_for_landscape_is_split_into_column_groups() -> None:
    frame = pd.DataFrame(
        {f"col_{c:02d}": [123456.78 + c + r for r in range(4)] for c in range(60)},
        index=pd.Index(["north", "south", "east", "west"], name="area"),
    )
    pdf = PdfRenderer().render(_notebook_of(_frame_html(frame)), make_report())
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    text = " ".join(_texts(pdf))
    assert "columns 1–" in text
    squeezed = _squeezed(text)
    assert all(f"col_{c:02d}" in squeezed for c in range(60))
    groups = text.count("of 60")
    assert groups >= 2
    assert text.count("north") == groups, "the index is repeated beside every group"
    assert A4_LANDSCAPE in _sizes(pdf)


def test_a_multiindex_header_is_split_with_its_spans() -> None:
    columns = pd.MultiIndex.from_product([["alpha", "beta", "gamma"], [f"m{i}" for i in range(12)]])
    frame = pd.DataFrame([[100000 + i for i in range(36)]] * 3, columns=columns)
    pdf = PdfRenderer().render(_notebook_of(_frame_html(frame)), make_report())
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    text = " ".join(_texts(pdf))
    assert "of 36" in text
    assert "gamma" in text
    assert "100035" in text


def test_a_table_that_cannot_be_split_wraps_inside_fixed_columns() -> None:
    cells = "".join(f"<td>cell_number_{i:03d}</td>" for i in range(40))
    ragged = f"<table><tr>{cells}</tr><tr><td colspan='3'>short row</td></tr></table>"
    pdf = PdfRenderer().render(_notebook_of(ragged), make_report())
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    squeezed = _squeezed(" ".join(_texts(pdf)))
    assert all(f"cell_number_{i:03d}" in squeezed for i in range(40))


def test_a_long_word_breaks_instead_of_widening_the_table() -> None:
    frame = pd.DataFrame({"id": [1], "digest": ["f" * 300], "note": ["ok"]})
    pdf = PdfRenderer().render(_notebook_of(_frame_html(frame)), make_report())
    assert set(_sizes(pdf)) == {A4}
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    assert "f" * 300 in _squeezed(" ".join(_texts(pdf)))


def test_a_wide_table_outside_a_notebook_cell_turns_alone() -> None:
    cells = "".join(f"<td>value_{i:02d}_xxxx</td>" for i in range(14))
    html = (
        "<html><body><p>before</p>"
        f"<table><tr>{cells}</tr></table><p>after the table</p></body></html>"
    )
    pdf, pages = html_to_pdf(html, make_report())
    assert _sizes(pdf) == [A4, A4_LANDSCAPE, A4]
    assert pages == 3
    assert text_outside_page(pdf) == [], _outside_message(pdf)


# -- the checker itself -----------------------------------------------------------


def test_the_checker_finds_text_past_the_right_edge() -> None:
    """What an unfitted wide table looks like: the check must see it."""
    html = (
        "<html><body><p>on the page</p>"
        '<div style="width: 2000px"><span style="margin-left: 1200px">off the page</span></div>'
        "</body></html>"
    )
    pdf = weasyprint.HTML(string=html).write_pdf()
    found = text_outside_page(pdf)
    assert len(found) == 1
    assert found[0].run.x > 595
    assert found[0].run.text == "off the page"
    assert "outside the page box" in str(found[0])


def test_the_checker_finds_a_run_that_starts_inside_and_ends_outside() -> None:
    html = (
        '<html><body><div style="width: 3000px; margin-left: 500px">'
        "a long line that starts inside the page and runs off it</div></body></html>"
    )
    found = text_outside_page(weasyprint.HTML(string=html).write_pdf())
    assert found
    assert found[0].run.x < 595 < found[0].run.end_x


# -- the example reports ------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("example", sorted(EXAMPLES.glob("*.ipynb")), ids=lambda path: path.stem)
def test_every_table_of_every_example_report_is_on_its_page(
    example: Path, example_lake: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Whatever notebooks/examples holds when the test runs, executed with its defaults."""
    monkeypatch.setenv("NBCAST_LAKE", str(example_lake))
    target = tmp_path / f"{example.stem}.out.ipynb"
    papermill.execute_notebook(
        str(example), str(target), kernel_name="python3", progress_bar=False, cwd=str(tmp_path)
    )
    executed = nbformat.read(target, as_version=4)
    pdf = PdfRenderer().render(executed, make_report(definition=example.stem))
    assert text_outside_page(pdf) == [], _outside_message(pdf)
    text = _squeezed(" ".join(_texts(pdf)))
    for name, frame in read_tables(executed).items():
        if len(frame.columns):
            assert _squeezed(str(frame.columns[-1])) in text, f"{name}: last column missing"


# -- thumbnails ---------------------------------------------------------------------


def _png_size(png: bytes) -> tuple[int, int]:
    assert png.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", png[16:24])
    return width, height


def test_a_thumbnail_is_a_png_of_the_requested_width(mixed_pdf: bytes) -> None:
    first = pdf_thumbnail(mixed_pdf)
    assert _png_size(first) == (600, round(600 * 842 / 595))
    assert pdf_thumbnail(mixed_pdf) == first, "the same PDF gives the same bytes"
    landscape = _sizes(mixed_pdf).index(A4_LANDSCAPE)
    assert _png_size(pdf_thumbnail(mixed_pdf, width=300, page=landscape)) == (300, 212)


def test_thumbnail_arguments_are_checked(mixed_pdf: bytes) -> None:
    with pytest.raises(RenderError, match="width"):
        pdf_thumbnail(mixed_pdf, width=10**6)
    with pytest.raises(RenderError, match="no page 100"):
        pdf_thumbnail(mixed_pdf, page=99)
    with pytest.raises(RenderError, match="not a PDF"):
        pdf_thumbnail(b"%PDF-1.7 but not really")


def test_without_pypdfium2_the_error_names_the_extra(
    mixed_pdf: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(sys.modules, "pypdfium2", None)  # what an absent package does
    with pytest.raises(RenderError, match=r"nbcast\[thumbnails\]"):
        pdf_thumbnail(mixed_pdf)


# -- determinism of the fitted layout -----------------------------------------------

RENDER_PDF = """
import hashlib, sys
import nbformat
from nbcast.delivery.renderers.pdf import PdfRenderer
from tests.delivery import make_report

notebook = nbformat.read(sys.argv[1], as_version=4)
print(hashlib.sha256(PdfRenderer().render(notebook, make_report())).hexdigest())
"""


def test_fitted_pdfs_are_the_same_bytes_in_another_process(
    mixed_notebook: Any, mixed_pdf: bytes, tmp_path: Path
) -> None:
    assert PdfRenderer().render(mixed_notebook, make_report()) == mixed_pdf
    path = tmp_path / "mixed.ipynb"
    nbformat.write(mixed_notebook, path)
    env = {**os.environ, "PYTHONHASHSEED": "7", "TZ": "Asia/Kolkata"}
    env.pop("SOURCE_DATE_EPOCH", None)
    done = subprocess.run(
        [sys.executable, "-c", RENDER_PDF, str(path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=120,
    )
    assert done.stdout.strip().splitlines()[-1] == hashlib.sha256(mixed_pdf).hexdigest()
