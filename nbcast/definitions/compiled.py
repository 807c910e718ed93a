"""A stored version, compiled once: its parsed ``nbcast`` block and its parameter schema.

The ``nbcast`` block is stored as published (raw JSON) and parsed here only: every
other plane takes a :class:`CompiledVersion` (or, for a block's ``schedule`` or
``sla`` alone, :func:`compile_schedule_block` / :func:`compile_sla_block`) and never
calls :func:`~nbcast.definitions.spec.parse_spec` itself. A version is immutable, so
its compiled form is cached by the version's content (its ``sha256`` with the stored
block and schema): the scheduler's ticks, the delivery plane's intake and the previews
parse a version once per process, not once per slot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import lru_cache
from typing import Any

from nbcast.definitions.parameters import Parameter, schema_from_json
from nbcast.definitions.spec import ReportSpec, ScheduleSpec, parse_spec
from nbcast.errors import NbcastError

__all__ = [
    "CACHED_VERSIONS",
    "CompiledVersion",
    "compile_schedule_block",
    "compile_sla_block",
    "compile_version",
]

CACHED_VERSIONS = 4096
"""Compiled versions kept per process (least recently used go first)."""


@dataclass(frozen=True)
class CompiledVersion:
    """A version's block parsed against its schema."""

    spec: ReportSpec
    schema: tuple[Parameter, ...]

    @property
    def schedule(self) -> ScheduleSpec | None:
        """The schedule (None: the report runs on request)."""
        return self.spec.schedule


def compile_version(block: Any, schema: Any, *, sha256: str | None = None) -> CompiledVersion:
    """The compiled form of a stored version's ``nbcast`` block and parameter schema
    (as stored: JSON values). A block that does not parse raises the
    :class:`~nbcast.errors.MetadataError` that names its field. With ``sha256`` (the
    version's), the result is cached."""
    if sha256 is None:
        return _compile(block, schema)
    return _cached(sha256, json.dumps([block, schema], sort_keys=True, default=str))


@lru_cache(maxsize=CACHED_VERSIONS)
def _cached(sha256: str, stored: str) -> CompiledVersion:
    block, schema = json.loads(stored)
    return _compile(block, schema)


def _compile(block: Any, schema: Any) -> CompiledVersion:
    parameters = tuple(schema_from_json(schema or []))
    return CompiledVersion(parse_spec(block, parameters), parameters)


def compile_schedule_block(schedule: Any) -> ScheduleSpec | None:
    """A block's ``schedule`` alone, parsed (None: no schedule). Raises the
    :class:`~nbcast.errors.MetadataError` of a schedule that does not parse."""
    if schedule is None:
        return None
    return parse_spec({"schedule": schedule}).schedule


def compile_sla_block(sla: Any) -> timedelta | None:
    """The ``delivered_within`` of a block's ``sla`` (None: no SLA, or one that does not
    validate — a version published before it did)."""
    if not isinstance(sla, Mapping):
        return None
    try:
        spec = parse_spec({"sla": dict(sla)}).sla
    except NbcastError:
        return None
    return None if spec is None else spec.delivered_within
