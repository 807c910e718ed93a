"""What a kernel says, made storable before it reaches the database.

An attempt's error (``ename``, ``evalue``, traceback lines) and its warehouse usage
come from the report's kernel, i.e. from code nbcast does not control. PostgreSQL
refuses a NUL character in ``text`` and in ``jsonb`` (``\\u0000``), and a lone UTF-16
surrogate (``"\\ud800"``, which Python strings may hold) cannot be encoded at all; a
cell that raises ``ValueError("a\\x00b\\ud800")`` made the database refuse the
attempt's outcome again and again, until the worker gave up and the run ended
``lease_expired`` with its real error lost. So everything the executor stores from a
kernel passes through here first:

=========================  ==========================================================
what                       made storable
=========================  ==========================================================
any text                   NUL → ``\\0`` (visible, two characters); every surrogate
                           code point → U+FFFD; cut to its bound *before* the rest
                           of the work, so a 100 MB message costs nothing
error ``ename``            :data:`MAX_NAME_CHARS` (200) characters
error ``evalue``, message  :data:`MAX_ERROR_TEXT` (4,000) characters
traceback                  its last :data:`MAX_TRACEBACK_ENTRIES` (20) lines, each
                           :data:`MAX_ERROR_TEXT` characters
other error fields         JSON only (strings as above, finite numbers, lists of at
                           most 100 items, nesting at most 8 levels); anything else
                           becomes its text
usage records              at most :data:`MAX_USAGE_RECORDS` (10,000) per attempt,
                           the rest summed into one last record; ``connection`` 128
                           characters, ``sql_sha256`` 64, ``error`` 4,000; a line of
                           the usage file that is not a record is skipped (the
                           kernel may write anything there); at most
                           :data:`MAX_USAGE_FILE_BYTES` (16 MiB) of it is read
=========================  ==========================================================

One more step happens inside the kernel, before the first cell
(:data:`KERNEL_SETUP`): ipykernel cannot even send a message holding a lone surrogate
(its JSON is encoded to UTF-8, which has none), so the error of
``raise ValueError("\ud800")`` never left the kernel and the run failed with an empty
``CellExecutionError``. The kernel's message packer is wrapped to fall back to
ASCII JSON (``\ud800`` escaped) for such a message; the worker then receives the text
and replaces the surrogate as above — and so does the notebook client before
keeping an output (:func:`without_surrogates`), or papermill could not write the
executed notebook (UTF-8 again).
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

__all__ = [
    "MAX_ERROR_TEXT",
    "MAX_NAME_CHARS",
    "MAX_TRACEBACK_ENTRIES",
    "MAX_USAGE_FILE_BYTES",
    "MAX_USAGE_LINE_BYTES",
    "MAX_USAGE_RECORDS",
    "read_usage_file",
    "storable_error",
    "storable_json",
    "storable_text",
    "storable_usage",
    "without_surrogates",
]

MAX_ERROR_TEXT = 4000
"""Characters kept of an error's ``evalue`` or message and of each traceback line."""

MAX_NAME_CHARS = 200
"""Characters kept of an error's ``ename`` (and of other short fields)."""

MAX_TRACEBACK_ENTRIES = 20
"""Traceback lines kept (the last ones: where it was raised)."""

MAX_USAGE_RECORDS = 10_000
"""Warehouse usage records stored per attempt; the rest are summed into the last one."""

MAX_USAGE_FILE_BYTES = 16 * 1024 * 1024
"""Bytes of an attempt's usage file read."""

MAX_USAGE_LINE_BYTES = 64 * 1024
"""The longest line of a usage file that is read (a query's record is a few hundred)."""

KERNEL_SETUP = """\
def _nbcast_sendable_messages():
    import json
    from IPython import get_ipython
    from jupyter_client.jsonutil import json_clean, json_default
    session = getattr(getattr(get_ipython(), "kernel", None), "session", None)
    if session is None:
        return
    pack = session.pack
    def pack_or_escape(obj):
        try:
            return pack(obj)
        except (TypeError, ValueError):  # a lone surrogate: UTF-8 cannot carry it
            text = json.dumps(json_clean(obj), default=json_default, allow_nan=False)
            return text.encode("ascii")
    session.pack = pack_or_escape
_nbcast_sendable_messages()
del _nbcast_sendable_messages
"""
"""Kernel code run (silently) before a run's first cell: messages with lone
surrogates are sent as ASCII JSON instead of failing (module docstring)."""

_MAX_ITEMS = 100
_MAX_DEPTH = 8
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")
_SURROGATE = re.compile("[\ud800-\udfff]")
_OVERFLOW_CONNECTION = "(more queries)"


def _replace(match: re.Match[str]) -> str:
    return "\\0" if match.group() == "\x00" else "\ufffd"


def storable_text(value: object, limit: int = MAX_ERROR_TEXT) -> str:
    """``value`` as text PostgreSQL and SQLite both store: at most ``limit``
    characters, NUL written ``\\0``, surrogates replaced (module docstring)."""
    text = value if isinstance(value, str) else _str(value)
    text = text[:limit]
    if _UNSTORABLE.search(text):
        text = _UNSTORABLE.sub(_replace, text)[:limit]
    return text


def _has_surrogate(value: Any) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if _SURROGATE.search(item):
                return True
        elif isinstance(item, dict):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _replace_surrogates(value: Any) -> Any:
    if isinstance(value, str):
        return _SURROGATE.sub("\ufffd", value)
    if isinstance(value, dict):
        return {_replace_surrogates(k): _replace_surrogates(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_replace_surrogates(item) for item in value]
    return value


def without_surrogates(value: Any) -> Any:
    """JSON-like ``value`` with every surrogate code point in its strings (keys too)
    replaced by U+FFFD; ``value`` itself when it has none."""
    return _replace_surrogates(value) if _has_surrogate(value) else value


def _str(value: object) -> str:
    try:
        return str(value)
    except Exception as exc:  # a kernel's object whose __str__ raises
        return f"<unprintable {type(value).__name__}: {type(exc).__name__}>"


def _json(value: Any, depth: int, limit: int) -> Any:
    """``value`` as storable JSON (module docstring)."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        return value if -(2**63) < value < 2**63 else storable_text(value, limit)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, str):
        return storable_text(value, limit)
    if depth >= _MAX_DEPTH:
        return storable_text(value, limit)
    if isinstance(value, Mapping):
        return {
            storable_text(key, MAX_NAME_CHARS): _json(item, depth + 1, limit)
            for key, item in list(value.items())[:_MAX_ITEMS]
        }
    if isinstance(value, Sequence | set | frozenset) and not isinstance(value, bytes | bytearray):
        return [_json(item, depth + 1, limit) for item in list(value)[:_MAX_ITEMS]]
    return storable_text(value, limit)


def storable_json(value: Any, limit: int = MAX_ERROR_TEXT) -> Any:
    """JSON-like ``value`` with every string made storable (cut to ``limit``) and
    non-finite floats as None; other values as they are, bounded in size."""
    return _json(value, 0, limit)


def storable_error(error: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """An attempt's error made storable (module docstring); None stays None."""
    if error is None:
        return None
    if not isinstance(error, Mapping):
        return {"message": storable_text(error)}
    stored: dict[str, Any] = {}
    for key, value in list(error.items())[:_MAX_ITEMS]:
        name = storable_text(key, MAX_NAME_CHARS)
        if name == "ename":
            stored[name] = storable_text(value, MAX_NAME_CHARS)
        elif name == "traceback" and isinstance(value, Sequence) and not isinstance(value, str):
            lines = list(value)[-MAX_TRACEBACK_ENTRIES:]
            stored[name] = [storable_text(line) for line in lines]
        else:
            stored[name] = _json(value, 1, MAX_ERROR_TEXT)
    return stored


def _figure(value: Any, kind: type[int] | type[float]) -> int | float:
    try:
        number = kind(value)
    except (TypeError, ValueError, OverflowError):
        return kind(0)
    if isinstance(number, float) and not math.isfinite(number):
        return 0.0
    return number


def _usage_record(item: Mapping[str, Any]) -> dict[str, Any]:
    error = item.get("error")
    run_id = item.get("run_id")
    return {
        "run_id": run_id if isinstance(run_id, int) and not isinstance(run_id, bool) else None,
        "tenant": storable_text(item.get("tenant", ""), MAX_NAME_CHARS),
        "connection": storable_text(item.get("connection", "default"), 128),
        "sql_sha256": storable_text(item.get("sql_sha256", ""), 64),
        "rows": _figure(item.get("rows", 0), int),
        "bytes": _figure(item.get("bytes", 0), int),
        "seconds": _figure(item.get("seconds", 0.0), float),
        "error": None if error is None else storable_text(error),
    }


def storable_usage(usage: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Warehouse usage records made storable; beyond :data:`MAX_USAGE_RECORDS` the
    rest are summed into one last record, so the totals the budget counts stay whole."""
    records = [_usage_record(item) for item in usage if isinstance(item, Mapping)]
    if len(records) <= MAX_USAGE_RECORDS:
        return records
    kept, rest = records[: MAX_USAGE_RECORDS - 1], records[MAX_USAGE_RECORDS - 1 :]
    summed = {
        **rest[0],
        "connection": _OVERFLOW_CONNECTION,
        "sql_sha256": "",
        "rows": sum(int(r["rows"]) for r in rest),
        "bytes": sum(int(r["bytes"]) for r in rest),
        "seconds": sum(float(r["seconds"]) for r in rest),
        "error": None,
    }
    return [*kept, summed]


def read_usage_file(path: Path) -> list[dict[str, Any]]:
    """The usage records of an attempt's usage file, made storable: lines that are
    not records (or a half-written last line) are skipped, at most
    :data:`MAX_USAGE_FILE_BYTES` are read.

    The file is in the run folder, which the report may write: one it replaced with a
    symbolic link (to a key the worker can read), a FIFO or a device is not read, and a
    line longer than :data:`MAX_USAGE_LINE_BYTES` (or nested past the parser's depth) is
    skipped."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return []
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return []
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_USAGE_FILE_BYTES)
    except OSError:
        return []
    finally:
        if fd >= 0:
            os.close(fd)
    records: list[Mapping[str, Any]] = []
    for line in data.split(b"\n")[:-1]:  # the last piece is b"" or a torn write
        if len(line) > MAX_USAGE_LINE_BYTES:  # the report writes this file: bounded
            continue
        try:
            item = json.loads(line)
        except (ValueError, RecursionError):
            continue
        if isinstance(item, Mapping):
            records.append(item)
    return storable_usage(records)
