"""Report tables in an executed notebook, as the delivery plane reads them: ``has_rows``.

The table format itself — :func:`encode_table`, :func:`read_tables`,
:func:`decode_table`, :func:`table_payloads`, :data:`TABLE_MIME_TYPE` — is kernel-side
and lives in :mod:`nbcast.output.tables` (both halves in one place, so they cannot drift
apart); it is re-exported here for the renderers. What is the delivery plane's own is
:func:`has_rows`, the ledger's ``only_if: results``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from nbcast.output.tables import (
    TABLE_MIME_TYPE,
    decode_table,
    encode_table,
    read_tables,
    table_payloads,
)

__all__ = [
    "TABLE_MIME_TYPE",
    "decode_table",
    "encode_table",
    "has_rows",
    "read_tables",
    "table_payloads",
]


def has_rows(notebook: Any) -> bool:
    """True when at least one recorded table has a row (the ledger's ``only_if: results``).

    False, whatever its tables, for a notebook that stopped itself part-way with
    ``sys.exit()``: the executor records that as ``metadata["nbcast"]["ended_early"]``
    and an early exit means "no results" (see :mod:`nbcast.executor.attempt`).
    """
    if _ended_early(notebook):
        return False
    return any(payload["data"] for payload in table_payloads(notebook).values())


_ENDED_EARLY_KEY = "ended_early"
"""Written by the executor (``nbcast.executor.early_exit.ENDED_EARLY_KEY``); the
delivery plane reads the executed notebook, never the executor's modules."""


def _ended_early(notebook: Any) -> bool:
    metadata = notebook.get("metadata")
    block = metadata.get("nbcast") if isinstance(metadata, Mapping) else None
    return isinstance(block, Mapping) and isinstance(block.get(_ENDED_EARLY_KEY), Mapping)
