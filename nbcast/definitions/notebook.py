"""Reading a report notebook: validation, normalization, hashing, the parameters cell.

A published version stores the *normalized* notebook: outputs and execution counts
removed, volatile metadata removed (execution timings, papermill's records, widget
state, ``language_info``, which names the kernel's patch version), and every cell
given an id — the notebook's own when it has one, else a deterministic one made
from the cell's position and source, so that normalizing is a pure function. The
sha256 is taken over the canonical JSON (sorted keys, no spaces) of that notebook;
saving the same notebook after re-running it does not change the hash.
"""

from __future__ import annotations

import copy
import hashlib
import json
import tomllib
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nbcast.errors import NotebookError
from nbcast.limits import MAX_NOTEBOOK_DEPTH, MAX_NOTEBOOK_FILE_BYTES, clip, too_deep

__all__ = [
    "LoadedNotebook",
    "canonical_json",
    "check_notebook",
    "load_notebook",
    "loaded_document",
    "normalize_notebook",
    "notebook_sha256",
    "parameters_cell",
    "parse_notebook_text",
]

_VOLATILE_CELL_METADATA = ("execution", "collapsed", "scrolled", "ExecuteTime", "papermill")
_VOLATILE_NOTEBOOK_METADATA = ("widgets", "papermill", "language_info", "nbcast_run")
RUN_RECORD_KEYS = ("ended_early",)
"""Keys an execution adds to the ``nbcast`` block of an *executed* notebook: a
published copy of one is a definition again, so they are dropped, not refused."""


@dataclass(frozen=True)
class LoadedNotebook:
    """A validated notebook (plain JSON dicts) and the ``nbcast`` block it declares."""

    path: Path
    notebook: dict[str, Any]
    block: dict[str, Any] | None
    block_source: str
    """Where the block came from: ``metadata``, the side file's name, or ``none``."""


def canonical_json(notebook: dict[str, Any]) -> str:
    """The canonical text of a notebook: sorted keys, compact, UTF-8 safe."""
    return json.dumps(notebook, sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def notebook_sha256(notebook: dict[str, Any]) -> str:
    """sha256 (hex) of the canonical JSON of ``notebook``."""
    return hashlib.sha256(canonical_json(notebook).encode("utf-8")).hexdigest()


def _source(cell: dict[str, Any]) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else str(source)


def normalize_notebook(notebook: dict[str, Any]) -> dict[str, Any]:
    """A copy of ``notebook`` without outputs, counts or volatile metadata (see module)."""
    nb = copy.deepcopy(notebook)
    nb["nbformat"], nb["nbformat_minor"] = 4, max(_minor(nb.get("nbformat_minor", 5)), 5)
    metadata = nb.setdefault("metadata", {})
    for key in _VOLATILE_NOTEBOOK_METADATA:
        metadata.pop(key, None)
    block = metadata.get("nbcast")
    if isinstance(block, dict):
        for key in RUN_RECORD_KEYS:
            block.pop(key, None)
    for index, cell in enumerate(nb.get("cells", [])):
        cell["source"] = _source(cell)
        if not cell.get("id"):
            digest = hashlib.sha256(f"{index}\0{cell['source']}".encode()).hexdigest()
            cell["id"] = f"nbcast-{digest[:12]}"
        meta = cell.setdefault("metadata", {})
        for key in _VOLATILE_CELL_METADATA:
            meta.pop(key, None)
        if cell.get("cell_type") == "code":
            cell["outputs"] = []
            cell["execution_count"] = None
    return nb


def _minor(value: Any) -> int:
    """``nbformat_minor``: an integer 0..99 (nbformat 4 has reached 5)."""
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 99:
        raise NotebookError(f"nbformat_minor {clip(value)} is not an integer between 0 and 99")
    return value


def parameters_cell(notebook: dict[str, Any]) -> tuple[int, str] | None:
    """Index and source of the code cell tagged ``parameters``, or None.

    More than one such cell, or the tag on a markdown/raw cell, is an error: papermill
    would silently use the first, and a reader would be misled by the others.
    """
    found: list[int] = []
    for index, cell in enumerate(notebook.get("cells", [])):
        tags = cell.get("metadata", {}).get("tags", [])
        if "parameters" in tags:
            if cell.get("cell_type") != "code":
                raise NotebookError(
                    f"cell {index} is a {cell.get('cell_type')} cell tagged 'parameters'; "
                    "only a code cell can declare parameters"
                )
            found.append(index)
    if len(found) > 1:
        raise NotebookError(f"cells {found} are all tagged 'parameters'; keep exactly one")
    if not found:
        return None
    return found[0], _source(notebook["cells"][found[0]])


def parse_notebook_text(text: str, origin: str) -> dict[str, Any]:
    """The notebook in ``text`` (JSON), validated; ``origin`` names it in errors.

    :class:`NotebookError` for anything that is not an nbformat 4 notebook nbcast
    accepts (duplicate keys, nesting, duplicate cell ids included).
    """
    file = origin
    try:
        raw: Any = json.loads(text, object_pairs_hook=_unique_keys)
    except _DuplicateKey as exc:
        raise NotebookError(
            f"{file}: the key {clip(exc.args[0])} appears twice in one object"
        ) from None
    except RecursionError:
        raise NotebookError(f"{file}: JSON nested too deeply") from None
    except ValueError as exc:
        raise NotebookError(f"{file}: not JSON ({clip(str(exc), 200)[1:-1]})") from None
    return check_notebook(raw, origin)


def check_notebook(raw: Any, origin: str) -> dict[str, Any]:
    """``raw`` (decoded JSON, e.g. from a request body) if it is an nbformat 4
    notebook nbcast accepts, else :class:`NotebookError` naming ``origin``."""
    import nbformat

    file = origin
    if not isinstance(raw, dict) or "cells" not in raw or "nbformat" not in raw:
        raise NotebookError(f"{file}: not a Jupyter notebook (no 'cells'/'nbformat')")
    if too_deep(raw, MAX_NOTEBOOK_DEPTH):
        raise NotebookError(f"{file}: JSON nested more than {MAX_NOTEBOOK_DEPTH} levels deep")
    if raw.get("nbformat") != 4:
        raise NotebookError(
            f"{file}: nbformat {clip(raw.get('nbformat'))} is not supported; save it as "
            "nbformat 4 (jupyter nbconvert --to notebook)"
        )
    minor = _minor(raw.get("nbformat_minor", 0))
    _check_cell_ids(file, raw)
    try:
        with warnings.catch_warnings():
            # nbformat warns about missing ids (nbcast adds them) on stderr: not for users.
            warnings.simplefilter("ignore")
            nbformat.validate(copy.deepcopy(raw), version=4, version_minor=minor)
    except Exception as exc:  # nbformat raises several unrelated types
        message = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise NotebookError(f"{file}: not a valid notebook: {clip(message, 200)[1:-1]}") from None
    notebook: dict[str, Any] = raw
    return notebook


def load_notebook(path: str | Path) -> LoadedNotebook:
    """Read and validate the notebook at ``path``; :class:`NotebookError` if it is not one."""
    file = Path(path)
    try:
        size = file.stat().st_size
        if size > MAX_NOTEBOOK_FILE_BYTES:
            raise NotebookError(
                f"{file}: {size:,} bytes is over the {MAX_NOTEBOOK_FILE_BYTES:,}-byte limit "
                "of a notebook file"
            )
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise NotebookError(f"{clip(str(file), 200)[1:-1]}: no such file") from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:  # ValueError: a NUL in the path
        raise NotebookError(
            f"{clip(str(file), 200)[1:-1]}: cannot read: {clip(str(exc), 200)[1:-1]}"
        ) from None
    notebook = parse_notebook_text(text, str(file))
    block, source = notebook.get("metadata", {}).get("nbcast"), "metadata"
    if isinstance(block, dict) and any(key in block for key in RUN_RECORD_KEYS):
        block = {k: v for k, v in block.items() if k not in RUN_RECORD_KEYS}
    side = file.with_name(file.stem + ".nbcast.toml")
    if side.exists():
        if block is not None:
            raise NotebookError(
                f"{file}: both the notebook metadata and {side.name} define the nbcast "
                "block; keep one"
            )
        try:
            block, source = _plain_toml(tomllib.loads(side.read_text(encoding="utf-8"))), side.name
        except tomllib.TOMLDecodeError as exc:
            raise NotebookError(f"{side}: not valid TOML ({clip(str(exc), 200)[1:-1]})") from None
        except (OSError, UnicodeDecodeError, RecursionError) as exc:
            raise NotebookError(f"{side}: cannot read: {type(exc).__name__}") from None
    return LoadedNotebook(file, notebook, block, source if block is not None else "none")


def loaded_document(raw: Any, origin: str) -> LoadedNotebook:
    """A notebook given as decoded JSON (an API request's body, a file a contents
    manager read), validated like a file; ``origin`` is its path or name, which also
    names the definition by default. Its ``nbcast`` block is its metadata's."""
    notebook = check_notebook(raw, origin)
    block = notebook.get("metadata", {}).get("nbcast")
    if isinstance(block, dict) and any(key in block for key in RUN_RECORD_KEYS):
        block = {k: v for k, v in block.items() if k not in RUN_RECORD_KEYS}
    return LoadedNotebook(
        Path(origin), notebook, block, "metadata" if block is not None else "none"
    )


class _DuplicateKey(ValueError):
    pass


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise _DuplicateKey(key)
        result[key] = value
    return result


def _check_cell_ids(file: str, notebook: dict[str, Any]) -> None:
    """Cell ids, where given, are unique (nbformat only warns; nbdime and the
    reviewers' diffs rely on them)."""
    cells = notebook.get("cells")
    if not isinstance(cells, list):
        return
    seen: set[str] = set()
    for index, cell in enumerate(cells):
        cell_id = cell.get("id") if isinstance(cell, dict) else None
        if isinstance(cell_id, str) and cell_id:
            if cell_id in seen:
                raise NotebookError(f"{file}: cell {index} repeats the cell id {clip(cell_id)}")
            seen.add(cell_id)


def _plain_toml(value: Any) -> Any:
    """A TOML document as JSON values: TOML's native dates and times become ISO
    strings (``start = 2026-11-02T07:00:00`` means what ``"2026-11-02T07:00:00"``
    means; an offset date-time keeps its offset, which the block then refuses for a
    wall time), so the block reads the same from TOML as from notebook metadata and
    is stored as JSON."""
    import datetime as dt

    if isinstance(value, dict):
        return {key: _plain_toml(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_plain_toml(item) for item in value]
    if isinstance(value, (dt.datetime, dt.date, dt.time)):
        return value.isoformat()
    return value
