"""Early exits: a notebook that stops itself with ``sys.exit()`` part-way through.

What papermill (2.x) does, read from its source: nbclient raises ``CellExecutionError``
for a cell whose reply is an error, ``SystemExit`` included, and papermill's cell loop
(``PapermillNotebookClient.papermill_execute_cells`` in ``papermill/clientwrap.py``)
marks that cell ``metadata.papermill.exception`` and *stops*: no later cell runs. Then
``raise_for_execution_errors`` (``papermill/execute.py``) skips an error output whose
``ename`` is ``SystemExit`` and whose ``evalue`` is ``""`` or ``"0"`` — ``sys.exit()``,
``sys.exit(0)``, ``sys.exit(None)``, ``raise SystemExit`` — so the run *succeeds* with
its remaining cells never executed. Any other ``SystemExit`` (``sys.exit(3)``,
``sys.exit("message")``, and also ``sys.exit(False)``, whose evalue is ``"False"``) is
raised as an execution error like any exception.

nbcast keeps papermill's verdict — the run SUCCEEDED — and records where it ended
(:func:`record_early_exit`): ``metadata["nbcast"]["ended_early"] = {"cell_index": i,
"code": 0}`` in the executed notebook, ``i`` being the cell's index in the executed
notebook (papermill's ``cell_index``). The run's reason says ``ended_early`` and
:func:`nbcast.delivery.tables.has_rows` reads the notebook as having no results, so
``only_if: results`` subscriptions are not sent an incomplete report.

A cell tagged ``raises-exception`` that raises ``SystemExit`` does not stop papermill
(nbclient allows its error), so it is not an early exit. ``exit()`` / ``quit()`` in an
IPython kernel shut the kernel down instead: that is a kernel that died, a failure.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["ENDED_EARLY_KEY", "find_early_exit", "record_early_exit"]

ENDED_EARLY_KEY = "ended_early"
"""The key under the executed notebook's ``metadata["nbcast"]`` that records an early exit."""

#: papermill's test for a SystemExit that is not an error (papermill/execute.py).
_CLEAN_EXIT_VALUES = ("", "0")


def find_early_exit(notebook: Mapping[str, Any]) -> dict[str, Any] | None:
    """Where an executed notebook stopped itself cleanly (module docstring), or None."""
    for index, cell in enumerate(notebook.get("cells", ())):
        papermill = cell.get("metadata", {}).get("papermill", {})
        if not isinstance(papermill, Mapping) or papermill.get("exception") is not True:
            continue
        # papermill stops at the first cell it marks, so this one decides.
        for output in cell.get("outputs", ()):
            if (
                output.get("output_type") == "error"
                and output.get("ename") == "SystemExit"
                and output.get("evalue") in _CLEAN_EXIT_VALUES
            ):
                return {"cell_index": index, "code": 0}
        return None
    return None


def record_early_exit(notebook: Any, output_path: str) -> dict[str, Any] | None:
    """Record an early exit of ``notebook`` (as papermill returned it) in its metadata and
    rewrite it at ``output_path``; return the record, or None (nothing written)."""
    ended = find_early_exit(notebook)
    if ended is None:
        return None
    from papermill.iorw import write_ipynb

    block = notebook.metadata.get("nbcast")
    if not isinstance(block, Mapping):
        block = {}
    notebook.metadata["nbcast"] = {**block, ENDED_EARLY_KEY: ended}
    write_ipynb(notebook, output_path)
    return ended
