"""A run's executed notebook and its failed attempts' tracebacks, read from the
artifact store for people (the status UI's run page and its rendered notebook).

Which notebook is "the run's" is :attr:`~nbcast.views.runs.RunDetail.notebook_sha256`
— the run's own, else (a failed run) its latest attempt's — the same one
``GET /nbcast/api/v1/runs/{id}/notebook`` and ``nbcast runs show`` name, so the page,
the download and the CLI never disagree. :func:`run_notebook` reads it for the
caller's tenant only (another tenant's run is "no run", as everywhere).

Everything read here was written by a notebook, so each read is bounded and each
failure is a reason, not an exception that breaks a page: a traceback that cannot be
read says why (:attr:`Traceback.unavailable`); a notebook too large to show raises
:class:`NotebookUnavailable` with the limit in its message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.artifacts import ArtifactStore
from nbcast.errors import NbcastError
from nbcast.executor.failures import MAX_NOTEBOOK_BYTES, failing_cell
from nbcast.executor.records import AttemptRecord
from nbcast.views.runs import RunDetail, get_run

__all__ = [
    "MAX_TRACEBACK_BYTES",
    "MAX_TRACEBACK_LINES",
    "MAX_VIEW_BYTES",
    "TRACEBACKS_READ",
    "NotebookUnavailable",
    "Traceback",
    "attempt_traceback",
    "attempt_tracebacks",
    "format_traceback",
    "read_artifact",
    "run_notebook",
]

MAX_VIEW_BYTES = 32 * 1024 * 1024
"""The largest executed notebook rendered as a page (larger ones are downloaded)."""
MAX_TRACEBACK_LINES = 200
"""Lines of a traceback shown (the rest are counted, not shown)."""
MAX_TRACEBACK_BYTES = 64 * 1024
"""Bytes (UTF-8) of a traceback shown."""
TRACEBACKS_READ = 3
"""Failed attempts whose notebooks are read for a traceback: the latest ones."""

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?")
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f]")


class NotebookUnavailable(NbcastError):
    """An executed notebook that cannot be read: missing from the store (``status``
    404) or larger than the limit the reader was given (413)."""

    def __init__(self, message: str, *, status: int = 404) -> None:
        super().__init__(message)
        self.status = status


def _megabytes(size: int) -> str:
    return f"{size / (1024 * 1024):.1f} MB"


def read_artifact(store: ArtifactStore, sha256: str, *, max_bytes: int) -> bytes:
    """The artifact ``sha256``, at most ``max_bytes`` of it read (never the whole of a
    larger one); :class:`NotebookUnavailable` when it is missing or larger."""
    try:
        with store.open(sha256) as handle:
            data = handle.read(max_bytes + 1)
    except (KeyError, FileNotFoundError):
        raise NotebookUnavailable("it is not in the artifact store") from None
    except (OSError, ValueError) as exc:
        raise NotebookUnavailable(f"the artifact store could not read it: {exc}") from None
    if len(data) > max_bytes:
        raise NotebookUnavailable(
            f"it is larger than the {_megabytes(max_bytes)} shown here", status=413
        )
    return data


def run_notebook(
    session: Session,
    caller: Caller,
    run_id: int,
    store: ArtifactStore,
    *,
    max_bytes: int = MAX_VIEW_BYTES,
) -> tuple[RunDetail, bytes]:
    """Run ``run_id`` of the caller's tenant and its executed notebook's bytes (the
    run's, or for a failed run its latest attempt's: module docstring).

    Raises :class:`~nbcast.errors.UnknownRunError` for a run not the tenant's, and
    :class:`NotebookUnavailable` for a run without a notebook, one missing from the
    store, or one over ``max_bytes``."""
    detail = get_run(session, caller, run_id)
    if detail.notebook_sha256 is None:
        raise NotebookUnavailable(f"run {run_id} has no executed notebook (yet)")
    try:
        data = read_artifact(store, detail.notebook_sha256, max_bytes=max_bytes)
    except NotebookUnavailable as exc:
        raise NotebookUnavailable(
            f"the executed notebook of run {run_id}: {exc}", status=exc.status
        ) from None
    return detail, data


@dataclass(frozen=True, kw_only=True)
class Traceback:
    """A failed attempt's traceback as text, or why it cannot be shown."""

    text: str | None = None
    """ANSI codes stripped, at most :data:`MAX_TRACEBACK_LINES` lines and
    :data:`MAX_TRACEBACK_BYTES` bytes (a last line says how much was cut)."""
    unavailable: str | None = None
    """Why there is no text: the notebook is missing, too large, not JSON, or holds
    no error output."""


def _plain(value: Any) -> str:
    return _CONTROL.sub("", _ANSI.sub("", str(value)))


def _error_output(notebook: Mapping[str, Any], cell_index: int | None) -> Mapping[str, Any] | None:
    """The ``error`` output of the failing cell (papermill's ``cell_index``), else of
    the first cell that has one."""
    cells: list[Any] = []
    if cell_index is not None:
        cell = failing_cell(notebook, cell_index)
        if cell is not None:
            cells.append(cell)
    found = notebook.get("cells")
    if isinstance(found, list):
        cells.extend(found)
    for cell in cells:
        outputs = cell.get("outputs") if isinstance(cell, Mapping) else None
        if not isinstance(outputs, list):
            continue
        for output in outputs:
            if isinstance(output, Mapping) and output.get("output_type") == "error":
                return output
    return None


def format_traceback(output: Mapping[str, Any]) -> str:
    """An ``error`` output as bounded plain text (:class:`Traceback`)."""
    entries = output.get("traceback")
    lines: list[str] = []
    cut = False
    if isinstance(entries, Sequence) and not isinstance(entries, str):
        for entry in entries:
            if len(lines) > MAX_TRACEBACK_LINES:
                cut = True
                break
            text = str(entry)
            if len(text) > MAX_TRACEBACK_BYTES:
                text, cut = text[:MAX_TRACEBACK_BYTES], True
            lines.extend(_plain(text).splitlines())
    if not lines:
        ename, evalue = output.get("ename"), output.get("evalue")
        text = ": ".join(_plain(p)[:MAX_TRACEBACK_BYTES] for p in (ename, evalue) if p)
        lines = [text or "(an error without a name or a message)"]
    kept: list[str] = []
    size = 0
    for line in lines[:MAX_TRACEBACK_LINES]:
        size += len(line.encode("utf-8")) + 1
        if size > MAX_TRACEBACK_BYTES:
            break
        kept.append(line)
    if cut or len(kept) < len(lines):
        kept.append(f"… cut at {len(kept)} lines / {MAX_TRACEBACK_BYTES // 1024} KiB")
    return "\n".join(kept)


def attempt_traceback(store: ArtifactStore, attempt: AttemptRecord) -> Traceback:
    """The traceback in the executed notebook ``attempt`` left (module docstring)."""
    if attempt.artifact_sha256 is None:
        return Traceback(unavailable="the attempt left no executed notebook")
    try:
        data = read_artifact(store, attempt.artifact_sha256, max_bytes=MAX_NOTEBOOK_BYTES)
    except NotebookUnavailable as exc:
        return Traceback(unavailable=f"the executed notebook: {exc}")
    try:
        notebook = json.loads(data)
    except ValueError:
        return Traceback(unavailable="the executed notebook is not JSON")
    if not isinstance(notebook, Mapping):
        return Traceback(unavailable="the executed notebook is not a notebook")
    cell_index = attempt.error.cell_index if attempt.error is not None else None
    output = _error_output(notebook, cell_index)
    if output is None:
        return Traceback(unavailable="no cell of the executed notebook raised an error")
    return Traceback(text=format_traceback(output))


def attempt_tracebacks(
    store: ArtifactStore | None, detail: RunDetail, *, limit: int = TRACEBACKS_READ
) -> dict[int, Traceback]:
    """The tracebacks of the run's latest ``limit`` failed attempts, by attempt number
    (earlier ones keep their one-line summary; reading every notebook of a run retried
    many times would make its page slow)."""
    failed = [a for a in detail.attempts if a.error is not None][-limit:] if limit > 0 else []
    if store is None:
        return {a.attempt: Traceback(unavailable="no artifact store") for a in failed}
    return {a.attempt: attempt_traceback(store, a) for a in failed}
