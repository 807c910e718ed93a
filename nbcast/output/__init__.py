"""What a report notebook publishes besides its look: ``output.table(df, name)``.

Inside a report notebook::

    from nbcast import output

    output.table(by_region, "sales_by_region")

shows the DataFrame as usual (its HTML, for people) *and* records it machine-readably
in the same display output, so that the spreadsheet and CSV renderers read the
tables from the executed notebook without running it again. The output is one
``display_data`` whose bundle holds

- ``text/html`` and ``text/plain``: the DataFrame's own reprs (what Jupyter would
  show, truncated by pandas' display options as usual);
- :data:`TABLE_MIME_TYPE` (``application/vnd.nbcast.table+json``): every row, as
  Table Schema JSON — see :mod:`nbcast.output.tables` for the encoding, how each
  column type (integers, numbers, strings, booleans, datetimes, dates, nulls) comes
  back, and the readers the renderers use;

and the output's metadata is ``{"nbcast": {"table": name}}``.

Decisions:

- **Names** match ``[A-Za-z0-9][A-Za-z0-9 _.-]{0,30}``: at most 31 characters and
  none of ``[]:*?/\\``, so every name is a valid spreadsheet sheet name and a safe
  file name in a zip. A bad name is a :class:`ValueError` at the call, in the
  notebook, where the author sees it.
- **Duplicate names: the later table wins.** Re-running a cell in Jupyter replaces
  its outputs, and an author who publishes ``"summary"`` twice means the last one;
  so :func:`~nbcast.output.tables.read_tables` keeps the later table (at the later
  position) and drops the earlier one. Names are compared case-insensitively,
  because spreadsheet sheet names and many file systems are.
- **The index**: a default ``RangeIndex`` (0, 1, 2, …, unnamed) is dropped; any other
  index (``set_index("rank")``, a date index, a MultiIndex) becomes leading columns,
  because a spreadsheet or a CSV has no index.
- **Kernel side.** This package runs in every kernel: importing it costs only the
  standard library (pandas and IPython are imported inside :func:`table`), and it
  imports no plane. The delivery plane's renderers import the format from here.
"""

from __future__ import annotations

from typing import Any

from nbcast.output.tables import (
    TABLE_MIME_TYPE,
    TABLE_NAME_PATTERN,
    check_table_name,
    encode_table,
)

__all__ = ["TABLE_MIME_TYPE", "TABLE_NAME_PATTERN", "check_table_name", "table", "table_output"]


def table(
    df: Any,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
) -> None:
    """Display ``df`` and record it as the report table ``name`` (module docstring);
    ``labels`` and ``formats`` say how a spreadsheet shows its columns
    (:mod:`nbcast.output.presentation`: ``{"revenue": "currency:USD", "share":
    "percent_points"}``).

    ``df`` is a pandas DataFrame (a Series is shown as a one-column table). Raises
    ValueError for a bad name or duplicate column names, TypeError for anything
    that is not a DataFrame or a Series.
    """
    from IPython.display import display

    output = table_output(df, name, labels=labels, formats=formats)
    display(output["data"], raw=True, metadata=output["metadata"])  # type: ignore[no-untyped-call]


def table_output(
    df: Any,
    name: str,
    *,
    labels: dict[str, str] | None = None,
    formats: dict[str, str] | None = None,
) -> dict[str, Any]:
    """The ``display_data`` output :func:`table` displays (module docstring), as an
    executed notebook holds it — for tests and tools that build executed reports
    without a kernel. Raises as :func:`table` does."""
    check_table_name(name)
    import pandas as pd

    if isinstance(df, pd.Series):
        df = df.to_frame()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"output.table() wants a pandas DataFrame, not {type(df).__name__}")
    payload = encode_table(df, name, labels=labels, formats=formats)
    html = df._repr_html_() or df.to_html()
    return {
        "output_type": "display_data",
        "data": {"text/plain": repr(df), "text/html": html, TABLE_MIME_TYPE: payload},
        "metadata": {"nbcast": {"table": name}},
    }
