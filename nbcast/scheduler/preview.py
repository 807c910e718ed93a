"""``nbcast schedule preview``: the slots a schedule would produce in a UTC range.

:func:`preview` returns JSON-ready rows (``--json``); :func:`table_cells` turns them
into the cells of a table for people. Every problem is a one-line
:class:`~nbcast.errors.ScheduleError`, which the CLI prints and exits 2 on.

Decisions where the spec is silent:

- ``range_from``/``range_to`` must be timezone-aware instants (the CLI parses them with
  :func:`nbcast.clock.parse_instant`); a naive one is refused rather than guessed.
- ``start`` is an instant and applies to ``every`` only: it is both the anchor and the
  first possible slot. With a cron it is refused (a cron's start is a wall time in the
  definition; previews of a range need none).
- ``every`` accepts a duration string (``15m``) or a timedelta; it must be at least 1m.
- The range is limited to ``limit`` slots (100,000 by default): enumeration stops at
  ``limit + 1`` and raises, so a huge range never materializes millions of rows.
- A shifted gap slot is ``scheduled`` with ``reason`` null; only skipped slots carry one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import replace
from datetime import UTC, date, datetime, timedelta
from itertools import islice
from typing import Any

from nbcast.definitions.compiler import Slot, SlotStatus, compile_schedule, load_zone
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.definitions.transitions import range_bound
from nbcast.definitions.zones import zone_problem
from nbcast.durations import parse_duration
from nbcast.errors import ScheduleError
from nbcast.limits import MAX_SCHEDULE_DURATION

__all__ = [
    "MAX_PREVIEW_SLOTS",
    "PREVIEW_COLUMNS",
    "PreviewRow",
    "preview",
    "preview_definition",
    "slot_row",
    "table_cells",
]

MAX_PREVIEW_SLOTS = 100_000
"""The most slots one preview lists."""

PreviewRow = dict[str, str | None]
"""One previewed slot: ``slot_key``, ``local``, ``fire_at``, ``status``, ``reason``."""


def slot_row(slot: Slot) -> PreviewRow:
    """The JSON-ready form of ``slot`` (keys as in the module docstring)."""
    return {
        "slot_key": slot.key,
        "local": slot.local.isoformat(),
        "fire_at": slot.fire_at.astimezone(UTC).replace(tzinfo=None).isoformat() + "Z",
        "status": slot.status.value,
        "reason": slot.reason,
    }


def _bound(value: datetime | date, zone: str, name: str) -> datetime:
    """A range end: an instant, or a bare date as the start of that day in ``zone``
    (:func:`~nbcast.definitions.transitions.range_bound`)."""
    if isinstance(value, date) and not isinstance(value, datetime):
        problem = zone_problem(zone)
        if problem:
            raise ScheduleError(f"timezone: {problem}", "timezone")
        return range_bound(value, load_zone(zone))
    return _instant(value, name)


def _instant(value: datetime, name: str) -> datetime:
    if not isinstance(value, datetime):
        raise ScheduleError(f"{name}: an instant is required", name)
    if value.tzinfo is None or value.utcoffset() is None:
        raise ScheduleError(
            f"{name}: {value.isoformat()} has no UTC offset (add 'Z' or '+HH:MM')", name
        )
    return value.astimezone(UTC)


def _policy(enum: type[DstGap] | type[DstFold], value: str, name: str) -> Any:
    try:
        return enum(value)
    except ValueError:
        choices = "|".join(member.value for member in enum)
        raise ScheduleError(f"{name}: {value!r} is not one of {choices}", name) from None


def _build_spec(
    cron: str | None,
    every: str | timedelta | None,
    tz: str,
    dst_gap: str,
    dst_fold: str,
) -> ScheduleSpec:
    if (cron is None) == (every is None):
        raise ScheduleError("preview needs exactly one of a cron expression or an every interval")
    problem = zone_problem(tz)
    if problem:
        raise ScheduleError(f"timezone: {problem}", "timezone")
    load_zone(tz)
    gap = _policy(DstGap, dst_gap, "dst gap")
    fold = _policy(DstFold, dst_fold, "dst fold")
    if cron is not None:
        return ScheduleSpec(cron=cron, timezone=tz, dst_gap=gap, dst_fold=fold)
    if isinstance(every, timedelta):
        interval = every
    else:
        try:
            interval = parse_duration(str(every), MAX_SCHEDULE_DURATION)
        except ValueError as exc:
            raise ScheduleError(f"every: {exc}", "every") from None
    if interval < timedelta(minutes=1):
        raise ScheduleError(f"every: {every} is shorter than 1m", "every")
    return ScheduleSpec(every=interval, timezone=tz, dst_gap=gap, dst_fold=fold)


def preview(
    spec: ScheduleSpec | None = None,
    *,
    range_from: datetime | date,
    range_to: datetime | date,
    cron: str | None = None,
    every: str | timedelta | None = None,
    start: datetime | None = None,
    tz: str = "UTC",
    dst_gap: str = "auto",
    dst_fold: str = "auto",
    limit: int = MAX_PREVIEW_SLOTS,
    notes: bool = False,
    bindings: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """The slots firing in ``[range_from, range_to)``, in fire order, as JSON-ready rows.

    With ``bindings`` (parameter name → slot binding, at most :data:`MAX_BINDINGS`,
    stepping over at most :data:`MAX_BUSINESS_DAYS` business days in all), the first
    :data:`MAX_BOUND_SLOTS` rows that fire also have ``parameters``: what each binding
    resolves to for a run of that slot — the scheduler's own resolution
    (:func:`nbcast.scheduler.period.resolve_run` over the slot's period), so the Lab's
    dialog shows a draft's bound values before anything is published.

    Give either a ``spec`` or ``cron``/``every`` with ``tz`` and the DST policies (the
    CLI's options, as strings). ``start`` is the anchor instant of an ``every`` schedule.
    With ``notes``, each row also has ``note``: what DST does to that slot, or None
    (:func:`~nbcast.scheduler.upcoming.dst_note`; the API's rows have it, the CLI's not).
    Raises :class:`~nbcast.errors.ScheduleError` (one line) for an unparseable cron or
    duration, an unknown zone, ``range_from >= range_to``, or more than ``limit`` slots.
    """
    if spec is None:
        spec = _build_spec(cron, every, tz, dst_gap, dst_fold)
    elif cron is not None or every is not None:
        raise ScheduleError("preview takes a spec or cron/every, not both")
    low = _bound(range_from, spec.timezone, "from")
    high = _bound(range_to, spec.timezone, "to")
    if low >= high:
        raise ScheduleError(
            f"from ({low.isoformat()}) must be before to ({high.isoformat()})", "from"
        )
    anchor = None
    if start is not None:
        if spec.every is None:
            raise ScheduleError("start applies to every schedules only", "start")
        anchor = _instant(start, "start")
        spec = replace(spec, start=None)
    schedule = compile_schedule(spec, anchor=anchor)
    slots = list(islice(schedule.slots(low, high), limit + 1))
    if len(slots) > limit:
        raise ScheduleError(
            f"more than {limit:,} slots between {low.isoformat()} and {high.isoformat()}; "
            "narrow the range"
        )
    rows: list[dict[str, Any]] = [dict(slot_row(slot)) for slot in slots]
    if bindings:
        _resolve_bindings(spec, slots, rows, bindings)
    if notes:
        from nbcast.scheduler.upcoming import slot_notes

        zone = load_zone(spec.timezone)
        for row, note in zip(rows, slot_notes(schedule, slots, zone), strict=True):
            row["note"] = note
    return rows


MAX_BINDINGS = 20
"""Bindings one preview resolves at most."""
MAX_BOUND_SLOTS = 10
"""Slots whose bindings a preview resolves (the first that fire; the Lab shows three)."""
MAX_BUSINESS_DAYS = 10_000
"""Business days the bindings of one preview may step over in all, per slot (each is a
calendar day looked at, holidays included; days, weeks and months cost nothing)."""


def _resolve_bindings(
    spec: ScheduleSpec, slots: list[Slot], rows: list[dict[str, Any]], bindings: Mapping[str, Any]
) -> None:
    from nbcast.definitions.bindings import is_binding, parse_binding
    from nbcast.definitions.compiler import interval_schedule
    from nbcast.errors import MetadataError
    from nbcast.scheduler.period import resolve_run, slot_periods

    if len(bindings) > MAX_BINDINGS:
        raise ScheduleError(f"bindings: more than {MAX_BINDINGS}", "bindings")
    steps = 0
    for name, value in bindings.items():
        if not is_binding(value):
            raise ScheduleError(f"bindings: {name} is not a slot binding", "bindings")
        try:
            parse_binding(value, name)
        except MetadataError as exc:
            raise ScheduleError(f"bindings: {exc}", "bindings") from None
        for step in value.get("steps") or ():
            business = step.get("business_days") if isinstance(step, Mapping) else None
            steps += abs(business) if isinstance(business, int) else 0
    if steps > MAX_BUSINESS_DAYS:
        raise ScheduleError(
            f"bindings: they step over {steps:,} business days, more than "
            f"{MAX_BUSINESS_DAYS:,} for one preview",
            "bindings",
        )
    firing = [i for i, slot in enumerate(slots) if slot.status is not SlotStatus.skipped]
    chosen = firing[:MAX_BOUND_SLOTS]
    if not chosen:
        return
    zone = load_zone(spec.timezone)
    span = slots[chosen[0] : chosen[-1] + 1]
    periods = dict(
        zip(
            range(chosen[0], chosen[-1] + 1),
            slot_periods(interval_schedule(spec), zone, span),
            strict=True,
        )
    )
    for index in chosen:
        slot, period, row = slots[index], periods[index], rows[index]
        try:
            row["parameters"] = resolve_run(
                dict(bindings), period, kind="scheduled", slot_key=slot.key, fire_at=slot.fire_at
            )[1]
        except MetadataError as exc:  # a step that leaves the calendar, for this slot
            row["parameters"] = {}
            row["problem"] = str(exc)


def preview_definition(
    block: dict[str, Any],
    schema: Any,
    *,
    range_from: datetime | date,
    range_to: datetime | date,
    limit: int = MAX_PREVIEW_SLOTS,
) -> list[dict[str, Any]]:
    """A published definition's slots in ``[range_from, range_to)`` — its real
    schedule and DST policies — each with its data interval and its parameter values
    as a run of that slot would get them (bindings resolved; key ``parameters``).

    ``block`` and ``schema`` are a stored version's ``nbcast`` block and parameter
    schema. A definition without a schedule is a :class:`ScheduleError`.
    """
    from nbcast.definitions.compiled import compile_version
    from nbcast.scheduler.period import resolve_run, slot_periods

    version = compile_version(block, schema)
    spec = version.spec
    if spec.schedule is None or version.compiled_schedule is None or version.intervals is None:
        raise ScheduleError("the definition has no schedule to preview (it runs on request)")
    low = _bound(range_from, spec.schedule.timezone, "from")
    high = _bound(range_to, spec.schedule.timezone, "to")
    if low >= high:
        raise ScheduleError(
            f"from ({low.isoformat()}) must be before to ({high.isoformat()})", "from"
        )
    slots = list(islice(version.compiled_schedule.slots(low, high), limit + 1))
    if len(slots) > limit:
        raise ScheduleError(f"more than {limit:,} slots in the range; narrow it")
    periods = slot_periods(version.intervals, version.zone, slots)
    rows: list[dict[str, Any]] = []
    for slot, period in zip(slots, periods, strict=True):
        row: dict[str, Any] = dict(slot_row(slot))
        row["interval_start"] = period.interval_start.isoformat()
        row["interval_end"] = period.interval_end.isoformat()
        row["parameters"] = resolve_run(
            spec.parameters,
            period,
            kind="scheduled",
            slot_key=slot.key,
            fire_at=slot.fire_at,
        )[1]
        rows.append(row)
    return rows


def _brief(iso: str | None) -> str:
    """``2026-03-08T03:00:00-04:00`` -> ``2026-03-08T03:00-04:00`` (zero seconds only)."""
    if iso is None:
        return ""
    return iso[:16] + iso[19:] if iso[16:19] == ":00" else iso


PREVIEW_COLUMNS = ("slot", "local", "fire at (UTC)", "status", "reason")
"""The columns of a preview for people (``parameters`` follows for a definition's)."""


def table_cells(rows: Iterable[Mapping[str, Any]]) -> tuple[list[str], list[list[str]]]:
    """The columns and cells of a preview for people: times drop zero seconds, rows of a
    definition's preview also show their parameter values (``--json`` has the full form).
    The CLI prints them with :func:`nbcast.cli.output.table`, which keeps keys, times and
    statuses whole at any width."""
    rows = list(rows)
    columns = list(PREVIEW_COLUMNS)
    with_parameters = any("parameters" in row for row in rows)
    if with_parameters:
        columns.append("parameters")
    cells: list[list[str]] = []
    for row in rows:
        line = [
            row["slot_key"] or "",
            _brief(row["local"]),
            _brief(row["fire_at"]),
            row["status"] or "",
            row["reason"] or "",
        ]
        if with_parameters:
            line.append(", ".join(f"{k}={v}" for k, v in (row.get("parameters") or {}).items()))
        cells.append(line)
    return columns, cells
