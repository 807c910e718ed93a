"""The figures every warehouse query leaves, for cost attribution: :class:`QueryUsage`.

Notebooks see them with ``warehouse.usage()``; the executor reads a run's usage file
after the kernel ends::

    from nbcast.warehouse import read_usage, summarize
    summarize(read_usage(run_dir / "usage.jsonl"))   # {"queries": 3, "rows": ..., ...}

Design decisions
----------------
* **One line per query.** Every query, failed ones too (with ``error``), appends one
  JSON line to the run context's ``usage_path`` with a single ``O_APPEND`` write, so
  concurrent appends never interleave, and is kept in memory (:func:`usage`).
* **What is counted.** ``rows`` and ``bytes`` are what was fetched into the kernel, also
  on failure; ``sql_sha256`` hashes the SQL text only, so the same query groups together
  and parameter values (possibly personal data) are not recorded.
* **Never unrecorded.** A usage file that cannot be written is a
  :class:`~nbcast.errors.ConfigError`: an unrecorded query would escape the budget.
* **Import cost.** Only the standard library.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from nbcast.errors import ConfigError

__all__ = ["QueryUsage", "clear", "read_usage", "record", "summarize", "usage"]


@dataclasses.dataclass(frozen=True, kw_only=True)
class QueryUsage:
    """One query's figures for cost attribution, as written to the usage file."""

    run_id: int | str | None
    tenant: str
    connection: str
    sql_sha256: str
    rows: int
    bytes: int
    seconds: float
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        """The record as the JSON object of one usage line."""
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> QueryUsage:
        """Parse one usage line's object; ``ValueError`` when a field is missing or wrong."""
        try:
            error = data.get("error")
            return cls(
                run_id=data["run_id"],
                tenant=str(data["tenant"]),
                connection=str(data["connection"]),
                sql_sha256=str(data["sql_sha256"]),
                rows=int(data["rows"]),
                bytes=int(data["bytes"]),
                seconds=float(data["seconds"]),
                error=None if error is None else str(error),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"not a usage record: {exc!r}") from exc


_lock = threading.Lock()
_usage: list[QueryUsage] = []


def record(figures: QueryUsage, usage_path: Path | None) -> None:
    """Keep ``figures`` in memory and append them to ``usage_path`` (if any) as one line."""
    with _lock:
        _usage.append(figures)
    if usage_path is None:
        return
    line = (json.dumps(figures.to_json(), separators=(",", ":")) + "\n").encode("utf-8")
    try:
        fd = os.open(usage_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line)  # one write of one line: concurrent appends don't interleave
        finally:
            os.close(fd)
    except OSError as exc:
        raise ConfigError(f"cannot append to usage file {usage_path}: {exc}") from exc


def usage() -> list[QueryUsage]:
    """Figures of every query this process ran since start (or :func:`~nbcast.warehouse.reset`)."""
    with _lock:
        return list(_usage)


def clear() -> None:
    """Forget the figures :func:`usage` returns (``warehouse.reset()`` calls it)."""
    with _lock:
        _usage.clear()


def read_usage(path: str | os.PathLike[str]) -> list[QueryUsage]:
    """Read a usage file; a missing file means no queries.

    A last line without its newline (the kernel died mid-write) is ignored; any other
    line that is not a usage record raises ``ValueError`` naming the line.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines[:-1], start=1):  # lines[-1] is "" or a torn write
        if not line.strip():
            continue
        try:
            records.append(QueryUsage.from_json(json.loads(line)))
        except ValueError as exc:
            raise ValueError(f"{path}:{number}: {exc}") from exc
    return records


def summarize(usages: Iterable[QueryUsage]) -> dict[str, int | float]:
    """Totals for the executor: ``queries``, ``errors``, ``rows``, ``bytes``, ``seconds``."""
    totals: dict[str, int | float] = {"queries": 0, "errors": 0, "rows": 0, "bytes": 0}
    seconds = 0.0
    for figures in usages:
        totals["queries"] += 1
        totals["errors"] += figures.error is not None
        totals["rows"] += figures.rows
        totals["bytes"] += figures.bytes
        seconds += figures.seconds
    totals["seconds"] = round(seconds, 6)
    return totals
