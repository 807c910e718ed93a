"""A stored version, compiled once: everything a plane needs of it, typed.

The ``nbcast`` block is stored as published (raw JSON) and parsed here only: every
other plane takes a :class:`CompiledVersion` (or, for a block's ``schedule`` or
``sla`` alone, :func:`compile_schedule_block` / :func:`compile_sla_block`) and never
calls :func:`~nbcast.definitions.spec.parse_spec` itself. A compiled version holds the
parsed spec and parameter schema and, computed on first use and kept, its compiled
schedule (:attr:`~CompiledVersion.compiled_schedule`), the schedule its data intervals are read
from (:attr:`~CompiledVersion.intervals`), its zone, its audiences and whether any
parameter value is a binding. Those are lazy so that a consumer that needs only the
recipients (the delivery plane's intake) never fails on a schedule that stopped
compiling (a zone tzdata dropped after publishing) — that failure belongs to the
scheduler, which records it on the definition.

A version is immutable, so its compiled form is cached by the version's content (its
``sha256`` with the stored block and schema): the scheduler's ticks, the delivery
plane's intake and the previews compile a version once per process, not once per slot.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import timedelta
from functools import cached_property, lru_cache
from typing import Any
from zoneinfo import ZoneInfo

from nbcast.definitions.audiences import Audience, audiences
from nbcast.definitions.bindings import is_binding
from nbcast.definitions.compiler import CompiledSchedule, compile_schedule, interval_schedule
from nbcast.definitions.parameters import Parameter, schema_from_json
from nbcast.definitions.spec import ReportSpec, ScheduleSpec, parse_spec
from nbcast.errors import NbcastError

__all__ = [
    "CACHED_VERSIONS",
    "CompiledVersion",
    "compile_retry_on",
    "compile_schedule_block",
    "compile_sla_block",
    "compile_version",
]

CACHED_VERSIONS = 4096
"""Compiled versions kept per process (least recently used go first)."""


@dataclass(frozen=True)
class CompiledVersion:
    """A version's block parsed against its schema, and what follows from it (module
    docstring). The lazy attributes raise what compiling raises (a
    :class:`~nbcast.errors.ScheduleError`) each time they are read until one succeeds."""

    spec: ReportSpec
    schema: tuple[Parameter, ...]

    @property
    def schedule(self) -> ScheduleSpec | None:
        """The schedule (None: the report runs on request)."""
        return self.spec.schedule

    @cached_property
    def compiled_schedule(self) -> CompiledSchedule | None:
        """The compiled schedule: its slots, DST decisions made (None: no schedule)."""
        return compile_schedule(self.spec.schedule) if self.spec.schedule else None

    @cached_property
    def intervals(self) -> CompiledSchedule | None:
        """The schedule data intervals are read from (:mod:`nbcast.scheduler.period`)."""
        return interval_schedule(self.spec.schedule) if self.spec.schedule else None

    @cached_property
    def zone(self) -> ZoneInfo:
        """The schedule's zone (UTC for a report that runs on request)."""
        return ZoneInfo(self.spec.schedule.timezone if self.spec.schedule else "UTC")

    @cached_property
    def audiences(self) -> tuple[Audience, ...]:
        """Who receives the version's runs: one run per slot and audience
        (:mod:`nbcast.definitions.audiences`)."""
        return tuple(audiences(self.spec.subscriptions))

    @cached_property
    def bound(self) -> bool:
        """Whether any parameter value (the version's or an audience's) is a binding,
        resolved per slot."""
        values = [*self.spec.parameters.values()]
        values += [v for a in self.audiences for v in a.parameters.values()]
        return any(is_binding(v) for v in values)

    def parameters_of(self, audience: Audience) -> dict[str, Any]:
        """The version's parameters overlaid with ``audience``'s (unresolved)."""
        if not audience.parameters:
            return self.spec.parameters
        return {**self.spec.parameters, **audience.parameters}


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


def compile_retry_on(block: Any) -> tuple[str, ...]:
    """The ``retry_on`` of a stored block (empty: none, or one that does not validate —
    a version published before it did)."""
    if not isinstance(block, Mapping) or "retry_on" not in block:
        return ()
    try:
        return parse_spec({"retry_on": block["retry_on"]}).retry_on
    except NbcastError:
        return ()
