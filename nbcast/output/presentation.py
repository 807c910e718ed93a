"""How a recorded table's columns are presented to readers: labels and formats.

``output.table(df, name, labels={...}, formats={...})`` says, per column, the header
people read (``labels``: ``{"revenue_last_week": "Revenue, a week ago"}``) and how its
values are shown (``formats``), from a closed vocabulary:

===================  ============================================================
format               shown as (a spreadsheet's number format)
===================  ============================================================
``currency``         ``1,234.50`` — two decimals with separators
``currency:USD``     ``USD 1,234.50`` — any three-letter ISO 4217 code
``percent``          ``4.8%`` — the value is a fraction (0.048)
``percent_points``   ``4.8%`` — the value is already in percent (4.78)
``thousands``        ``1,235`` — whole, with separators
``integer``          ``1235``
``decimal``          ``1,234.50``
``date``             ``2026-11-23``
``datetime``         ``2026-11-23 07:00``
``text``             as written
===================  ============================================================

Without a label a header is the column's name made readable (``revenue_last_week`` →
``Revenue last week``); without a format a column is shown by its type (whole numbers
with separators, other numbers with two decimals, a datetime column whose values are
all at midnight as dates). Both travel in the table's payload (each field's ``label``
and ``format``), checked at the call — a column that does not exist, a format outside
the vocabulary or a label over :data:`MAX_LABEL_CHARS` characters is a ValueError the
author sees in the notebook. Standard library only (this runs in every kernel).
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["FORMATS", "MAX_LABEL_CHARS", "check_format", "column_presentation", "readable"]

FORMATS = (
    "currency",
    "percent",
    "percent_points",
    "thousands",
    "integer",
    "decimal",
    "date",
    "datetime",
    "text",
)
"""The formats a column may have (``currency:XXX`` besides)."""

MAX_LABEL_CHARS = 100

_CURRENCY = re.compile(r"currency:[A-Z]{3}")


def check_format(value: object) -> str:
    """``value`` if it is a format of the vocabulary (module docstring), else ValueError."""
    if isinstance(value, str) and (value in FORMATS or _CURRENCY.fullmatch(value)):
        return value
    raise ValueError(
        f"format {value!r} is not one of {', '.join(FORMATS)} or currency:XXX (an ISO code)"
    )


def readable(name: str) -> str:
    """A column name as a header people read: ``revenue_last_week`` → ``Revenue last
    week`` (a name with capitals or spaces is kept as written)."""
    if name != name.lower() or " " in name:
        return name
    words = name.replace("_", " ").strip()
    return words[:1].upper() + words[1:] if words else name


def column_presentation(
    columns: Sequence[str],
    labels: Mapping[str, Any] | None,
    formats: Mapping[str, Any] | None,
) -> dict[str, dict[str, str]]:
    """Each column's ``label`` and ``format`` given at the call, checked (module
    docstring); columns given neither are left out."""
    known = set(columns)
    out: dict[str, dict[str, str]] = {}
    for kind, given in (("label", labels), ("format", formats)):
        if given is None:
            continue
        if not isinstance(given, Mapping):
            raise ValueError(f"{kind}s must be a dict of column name to {kind}")
        for column, value in given.items():
            if str(column) not in known:
                raise ValueError(f"{kind}s names {column!r}, which is not a column of the table")
            if kind == "label":
                if not isinstance(value, str) or not 0 < len(value) <= MAX_LABEL_CHARS:
                    raise ValueError(
                        f"the label of {column!r} must be text of 1 to {MAX_LABEL_CHARS} characters"
                    )
            else:
                value = check_format(value)
            out.setdefault(str(column), {})[kind] = value
    return out
