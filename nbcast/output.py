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
  Table Schema JSON — see :mod:`nbcast.delivery.tables` for the encoding and how
  each column type (integers, numbers, strings, booleans, datetimes, dates, nulls)
  comes back;

and the output's metadata is ``{"nbcast": {"table": name}}``.

Decisions:

- **Names** match ``[A-Za-z0-9][A-Za-z0-9 _.-]{0,30}``: at most 31 characters and
  none of ``[]:*?/\\``, so every name is a valid spreadsheet sheet name and a safe
  file name in a zip. A bad name is a :class:`ValueError` at the call, in the
  notebook, where the author sees it.
- **Duplicate names: the later table wins.** Re-running a cell in Jupyter replaces
  its outputs, and an author who publishes ``"summary"`` twice means the last one;
  so :func:`nbcast.delivery.tables.read_tables` keeps the later table (at the later
  position) and drops the earlier one. Names are compared case-insensitively,
  because spreadsheet sheet names and many file systems are.
- **The index**: a default ``RangeIndex`` (0, 1, 2, …, unnamed) is dropped; any other
  index (``set_index("rank")``, a date index, a MultiIndex) becomes leading columns,
  because a spreadsheet or a CSV has no index.
- Importing this module is cheap (it runs in every kernel): pandas and IPython are
  imported inside :func:`table`.
"""

from __future__ import annotations

import re
from typing import Any

__all__ = ["TABLE_MIME_TYPE", "TABLE_NAME_PATTERN", "check_table_name", "table"]

TABLE_MIME_TYPE = "application/vnd.nbcast.table+json"
"""The MIME type of a recorded table in a display output's bundle."""

TABLE_NAME_PATTERN = re.compile(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,30}")
"""What a table name must match, in full (spreadsheet-sheet and file-name safe)."""


def check_table_name(name: object) -> str:
    """Return ``name`` if it is an acceptable table name, else raise ValueError."""
    if not isinstance(name, str) or TABLE_NAME_PATTERN.fullmatch(name) is None:
        raise ValueError(
            f"table name {name!r} is not acceptable: use 1 to 31 characters, letters, "
            "digits, spaces, '_', '.' or '-', starting with a letter or a digit"
        )
    return name


def table(df: Any, name: str) -> None:
    """Display ``df`` and record it as the report table ``name`` (module docstring).

    ``df`` is a pandas DataFrame (a Series is shown as a one-column table). Raises
    ValueError for a bad name or duplicate column names, TypeError for anything
    that is not a DataFrame or a Series.
    """
    check_table_name(name)
    import pandas as pd
    from IPython.display import display

    from nbcast.delivery.tables import encode_table

    if isinstance(df, pd.Series):
        df = df.to_frame()
    if not isinstance(df, pd.DataFrame):
        raise TypeError(f"output.table() wants a pandas DataFrame, not {type(df).__name__}")
    payload = encode_table(df, name)
    html = df._repr_html_() or df.to_html()
    display(  # type: ignore[no-untyped-call]
        {"text/plain": repr(df), "text/html": html, TABLE_MIME_TYPE: payload},
        raw=True,
        metadata={"nbcast": {"table": name}},
    )
