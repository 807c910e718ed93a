"""The ``nbcast`` metadata block: its policies, its records and its syntax checks.

A notebook's metadata key ``nbcast`` (or a side file ``<notebook>.nbcast.toml``)
says how the report is scheduled, what it renders and who receives it. Every key is
optional; unknown keys are refused so typos do not pass silently. Errors name the
dotted field, e.g. ``schedule.timezone: 'Mars/Olympus' is not an IANA time zone``.

This module checks syntax (the cron parses, the zone exists, enums are known,
durations parse, parameters fit the schema). What a schedule *means* — slots, DST,
misfires — is the scheduler's business. Output formats and channels are the names
the renderer and channel registries know (built-ins and installed plug-ins,
:mod:`nbcast.registry`), and each channel judges its own recipients
(:meth:`~nbcast.delivery.channels.base.Channel.check_recipient`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, ClassVar

from nbcast.definitions.zones import zone_problem
from nbcast.durations import parse_duration
from nbcast.errors import MetadataError, ParameterValueError, ScheduleError
from nbcast.limits import (
    MAX_CATCHUP,
    MAX_DESCRIPTION_CHARS,
    MAX_JITTER,
    MAX_SCHEDULE_DURATION,
    MAX_SUBSCRIPTIONS,
    WALL_TIME_MAX,
    WALL_TIME_MIN,
    clip,
    json_problem,
)

__all__ = [
    "DstFold",
    "DstGap",
    "MisfirePolicy",
    "OutputFormat",
    "OverlapPolicy",
    "ReportSpec",
    "ScheduleSpec",
    "SlaSpec",
    "StalenessAction",
    "Subscription",
    "parse_spec",
]


class DstGap(StrEnum):
    """What happens to a slot whose wall time does not exist (spring forward)."""

    auto = "auto"
    """``skip`` for schedules that fire at least hourly, otherwise ``shift``."""
    shift = "shift"
    """Fire at the first instant after the gap (once per gap per definition)."""
    skip = "skip"
    """Record the slot SKIPPED with reason ``dst_gap``."""


class DstFold(StrEnum):
    """Which pass of a wall time that happens twice (fall back) fires."""

    auto = "auto"
    """``both`` for schedules that fire at least hourly, otherwise ``first``."""
    first = "first"
    """Only the first pass (the earlier UTC instant)."""
    last = "last"
    """Only the second pass (the later UTC instant)."""
    both = "both"
    """Both passes: two slots, the second keyed with ``~2``."""


class MisfirePolicy(StrEnum):
    """What the scheduler does with slots it materializes later than fire time + grace."""

    run_latest = "run_latest"
    """Run only the newest due slot; earlier missed ones are MISSED ``superseded``."""
    run_all = "run_all"
    """Queue every missed slot, oldest first, up to ``max_catchup``; the rest MISSED."""
    skip = "skip"
    """Record every missed slot MISSED ``misfire``; run only slots still within grace."""


class OverlapPolicy(StrEnum):
    """What happens when a slot is due while an earlier run is still queued or running."""

    skip = "skip"
    """Record the new slot SKIPPED ``overlap``."""
    allow = "allow"
    """Run both concurrently."""
    buffer_one = "buffer_one"
    """Keep at most one run waiting behind the active one."""
    buffer_all = "buffer_all"
    """Queue every slot; they run one after another."""
    replace = "replace"  # type: ignore[assignment]  # the domain word; shadows str.replace
    """Cancel the active run and run the new slot."""


class StalenessAction(StrEnum):
    """What delivery does with a report that is later than ``staleness.after``."""

    banner = "banner"
    """Deliver it with a visible 'this report is late' banner."""
    suppress = "suppress"
    """Do not deliver it; the ledger row is SUPPRESSED ``stale``."""


class OutputFormat(str):
    """The name of a format a report renders to: any renderer the registry knows
    (:data:`nbcast.plugins.renderers` — the built-in ``html``, ``pdf``,
    ``xlsx``, ``csv``, and a plug-in's). A ``str``: it compares equal to its name. The
    built-ins are also attributes (``OutputFormat.html``)."""

    __slots__ = ()

    html: ClassVar[OutputFormat]
    pdf: ClassVar[OutputFormat]
    xlsx: ClassVar[OutputFormat]
    csv: ClassVar[OutputFormat]

    @property
    def value(self) -> str:
        """The name, as an enum member's ``value`` would be."""
        return str(self)


OutputFormat.html = OutputFormat("html")
OutputFormat.pdf = OutputFormat("pdf")
OutputFormat.xlsx = OutputFormat("xlsx")
OutputFormat.csv = OutputFormat("csv")

CONDITIONS = ("results", "changed")
"""What a subscription's ``only_if`` may say."""
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}", re.ASCII)


@dataclass(frozen=True, kw_only=True)
class ScheduleSpec:
    """A schedule as written: cron or ``every``, its zone and policies."""

    cron: str | None = None
    every: timedelta | None = None
    timezone: str = "UTC"
    start: datetime | None = None
    """Local wall time (naive) in ``timezone``; no slot before it."""
    end: datetime | None = None
    """Local wall time (naive) in ``timezone``; no slot after it."""
    dst_gap: DstGap = DstGap.auto
    dst_fold: DstFold = DstFold.auto
    misfire: MisfirePolicy = MisfirePolicy.run_latest
    grace: timedelta = timedelta(minutes=10)
    max_catchup: int = 100
    overlap: OverlapPolicy = OverlapPolicy.skip
    staleness_after: timedelta | None = None
    staleness_action: StalenessAction = StalenessAction.banner
    jitter: timedelta = timedelta(0)


@dataclass(frozen=True, kw_only=True)
class Subscription:
    """One recipient of a report on one channel."""

    channel: str
    to: str
    formats: tuple[OutputFormat, ...] = ()
    only_if: str | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    """Recipient-scoped parameter values (:mod:`nbcast.definitions.audiences`)."""
    row_filter: dict[str, Any] = field(default_factory=dict)
    """Recipient-scoped row-filter attributes the warehouse applies."""

    @property
    def audience(self) -> str:
        """The key of the audience this subscription belongs to."""
        from nbcast.definitions.audiences import audience_key

        return audience_key(self.parameters, self.row_filter)


@dataclass(frozen=True, kw_only=True)
class SlaSpec:
    """A delivery promise: every slot delivered (a delivery SENT) within
    ``delivered_within`` of its fire time (:mod:`nbcast.oversight.sla`)."""

    delivered_within: timedelta


@dataclass(frozen=True, kw_only=True)
class ReportSpec:
    """The parsed ``nbcast`` metadata block."""

    name: str | None = None
    description: str = ""
    schedule: ScheduleSpec | None = None
    parameters: dict[str, Any] = field(default_factory=dict)
    outputs: tuple[OutputFormat, ...] = (OutputFormat.html,)
    subscriptions: tuple[Subscription, ...] = ()
    sla: SlaSpec | None = None
    retry_on: tuple[str, ...] = ()
    """Exception names (``ConnectionError``, ``requests.exceptions.Timeout``) that the
    report's own code may raise and that are worth another attempt; any other
    exception the notebook raises fails the run at once (``notebook_error``)."""


def _require(value: Any, kind: type | tuple[type, ...], path: str, what: str) -> Any:
    if not isinstance(value, kind) or (kind is not bool and isinstance(value, bool)):
        raise MetadataError(path, f"must be {what}, not {type(value).__name__}")
    return value


def _no_unknown(block: dict[str, Any], allowed: set[str], path: str) -> None:
    for key in block:
        if key not in allowed:
            where = f"{path}.{key}" if path else key
            raise MetadataError(where, f"unknown key (allowed: {', '.join(sorted(allowed))})")


def _enum(enum: type[StrEnum], value: Any, path: str) -> Any:
    _require(value, str, path, "a string")
    try:
        return enum(value)
    except ValueError:
        choices = "|".join(m.value for m in enum)
        raise MetadataError(path, f"{clip(value)} is not one of {choices}") from None


def _duration(value: Any, path: str, maximum: timedelta = MAX_SCHEDULE_DURATION) -> timedelta:
    _require(value, str, path, "a duration string")
    try:
        return parse_duration(value, maximum)
    except ValueError as exc:
        raise MetadataError(path, str(exc)) from None


def _wall_time(value: Any, path: str) -> datetime:
    _require(value, str, path, "a local date-time string")
    try:
        parsed = datetime.fromisoformat(value)
    except ValueError:
        raise MetadataError(path, f"{clip(value)} is not an ISO date-time") from None
    if parsed.tzinfo is not None:
        raise MetadataError(path, "is a local wall time in schedule.timezone; drop the offset")
    if not WALL_TIME_MIN <= parsed <= WALL_TIME_MAX:
        raise MetadataError(
            path,
            f"{clip(value)} is outside {WALL_TIME_MIN:%Y-%m-%d} .. {WALL_TIME_MAX:%Y-%m-%d}",
        )
    return parsed


def _zone(value: Any, path: str) -> str:
    _require(value, str, path, "an IANA time zone name")
    problem = zone_problem(value)
    if problem:
        raise MetadataError(path, problem)
    return str(value)


def _schedule(block: Any) -> ScheduleSpec:
    _require(block, dict, "schedule", "a mapping")
    _no_unknown(
        block,
        {
            "cron",
            "every",
            "timezone",
            "start",
            "end",
            "dst",
            "misfire",
            "overlap",
            "staleness",
            "jitter",
        },
        "schedule",
    )
    kwargs: dict[str, Any] = {}
    if ("cron" in block) == ("every" in block):
        raise MetadataError("schedule", "needs exactly one of 'cron' or 'every'")
    if "cron" in block:
        from nbcast.definitions.cron import CronExpression

        _require(block["cron"], str, "schedule.cron", "a cron expression")
        try:
            CronExpression.parse(block["cron"])
        except ScheduleError as exc:
            raise MetadataError("schedule.cron", str(exc)) from None
        kwargs["cron"] = block["cron"].strip()
    else:
        kwargs["every"] = _duration(block["every"], "schedule.every")
        if kwargs["every"] < timedelta(minutes=1):
            raise MetadataError("schedule.every", "must be at least 1m")
        if kwargs["every"] % timedelta(seconds=1):
            raise MetadataError("schedule.every", "must be whole seconds")
    if "timezone" in block:
        kwargs["timezone"] = _zone(block["timezone"], "schedule.timezone")
    for key in ("start", "end"):
        if key in block:
            kwargs[key] = _wall_time(block[key], f"schedule.{key}")
    if "start" in kwargs and "end" in kwargs and kwargs["end"] <= kwargs["start"]:
        raise MetadataError("schedule.end", "must be after schedule.start")
    if "dst" in block:
        dst = _require(block["dst"], dict, "schedule.dst", "a mapping")
        _no_unknown(dst, {"gap", "fold"}, "schedule.dst")
        if "gap" in dst:
            kwargs["dst_gap"] = _enum(DstGap, dst["gap"], "schedule.dst.gap")
        if "fold" in dst:
            kwargs["dst_fold"] = _enum(DstFold, dst["fold"], "schedule.dst.fold")
    if "misfire" in block:
        misfire = _require(block["misfire"], dict, "schedule.misfire", "a mapping")
        _no_unknown(misfire, {"policy", "grace", "max_catchup"}, "schedule.misfire")
        if "policy" in misfire:
            kwargs["misfire"] = _enum(MisfirePolicy, misfire["policy"], "schedule.misfire.policy")
        if "grace" in misfire:
            kwargs["grace"] = _duration(misfire["grace"], "schedule.misfire.grace")
        if "max_catchup" in misfire:
            cap = _require(
                misfire["max_catchup"], int, "schedule.misfire.max_catchup", "an integer"
            )
            if not 1 <= cap <= MAX_CATCHUP:
                raise MetadataError(
                    "schedule.misfire.max_catchup", f"must be between 1 and {MAX_CATCHUP:,}"
                )
            kwargs["max_catchup"] = cap
    if "overlap" in block:
        kwargs["overlap"] = _enum(OverlapPolicy, block["overlap"], "schedule.overlap")
    if "staleness" in block:
        stale = _require(block["staleness"], dict, "schedule.staleness", "a mapping")
        _no_unknown(stale, {"after", "action"}, "schedule.staleness")
        if "after" in stale:
            kwargs["staleness_after"] = _duration(stale["after"], "schedule.staleness.after")
        if "action" in stale:
            kwargs["staleness_action"] = _enum(
                StalenessAction, stale["action"], "schedule.staleness.action"
            )
    if "jitter" in block:
        kwargs["jitter"] = _duration(block["jitter"], "schedule.jitter", MAX_JITTER)
    return ScheduleSpec(**kwargs)


def _formats(value: Any, path: str) -> tuple[OutputFormat, ...]:
    _require(value, list, path, "a list of formats")
    from nbcast.plugins import renderers

    known = renderers.names()
    formats = []
    for i, item in enumerate(value):
        _require(item, str, f"{path}[{i}]", "a format name")
        if item not in known:
            raise MetadataError(f"{path}[{i}]", f"{clip(item)} is not one of " + "|".join(known))
        formats.append(OutputFormat(item))
    if len(set(formats)) != len(formats):
        raise MetadataError(path, "lists a format twice")
    return tuple(formats)


def _subscriptions(
    value: Any, outputs: tuple[OutputFormat, ...], schema: Any = ()
) -> tuple[Subscription, ...]:
    _require(value, list, "subscriptions", "a list")
    if len(value) > MAX_SUBSCRIPTIONS:
        raise MetadataError("subscriptions", f"more than {MAX_SUBSCRIPTIONS:,} subscriptions")
    from nbcast.plugins import channels, recipient_rules

    known = channels.names()
    result = []
    seen: set[tuple[str, str]] = set()
    for i, item in enumerate(value):
        path = f"subscriptions[{i}]"
        _require(item, dict, path, "a mapping")
        _no_unknown(item, {"channel", "to", "formats", "only_if", "parameters", "row_filter"}, path)
        channel = _require(item.get("channel"), str, f"{path}.channel", "a channel name")
        if channel not in known:
            raise MetadataError(
                f"{path}.channel", f"{clip(channel)} is not one of " + "|".join(known)
            )
        to = _require(item.get("to"), str, f"{path}.to", "a recipient")
        if not to.strip():
            raise MetadataError(f"{path}.to", "is empty")
        if len(to) > 512 or to != to.strip():
            raise MetadataError(f"{path}.to", f"{clip(to)} is not a recipient")
        # The channel's own rules: an email address, a webhook URL, a plug-in's.
        kind = recipient_rules(channel)
        problem = kind.check_recipient(to)
        if problem:
            raise MetadataError(f"{path}.to", problem)
        from nbcast.definitions.audiences import parse_row_filter, parse_scoped_parameters

        scoped = (
            parse_scoped_parameters(item["parameters"], schema, f"{path}.parameters")
            if "parameters" in item
            else {}
        )
        row_filter = (
            parse_row_filter(item["row_filter"], f"{path}.row_filter")
            if "row_filter" in item
            else {}
        )
        # One recipient on one channel is one ledger row per run; in two audiences
        # they would get two different reports for one slot.
        identity = (channel, kind.normalize_recipient(to))
        if identity in seen:
            raise MetadataError(path, f"{channel} recipient {clip(to)} is listed twice")
        seen.add(identity)
        formats = _formats(item["formats"], f"{path}.formats") if "formats" in item else outputs
        for fmt in formats:
            if fmt not in outputs:
                raise MetadataError(f"{path}.formats", f"{str(fmt)!r} is not in outputs")
        only_if = item.get("only_if")
        if only_if is not None and only_if not in CONDITIONS:
            raise MetadataError(
                f"{path}.only_if", f"{clip(only_if)} is not one of " + "|".join(CONDITIONS)
            )
        result.append(
            Subscription(
                channel=channel,
                to=to,
                formats=formats,
                only_if=only_if,
                parameters=scoped,
                row_filter=row_filter,
            )
        )
    return tuple(result)


def parse_spec(block: Any, schema: Any = ()) -> ReportSpec:
    """Validate the ``nbcast`` block against its syntax and the parameter ``schema``.

    ``schema`` is the sequence of :class:`~nbcast.definitions.parameters.Parameter`
    declared by the notebook's parameters cell; the block's ``parameters`` must fit it.
    """
    if block is None:
        block = {}
    _require(block, dict, "nbcast", "a mapping")
    problem = json_problem(block, "nbcast")
    if problem:
        field, _, message = problem.partition(": ")
        raise MetadataError(field.removeprefix("nbcast.") or "nbcast", message)
    _no_unknown(
        block,
        {
            "name",
            "description",
            "schedule",
            "parameters",
            "outputs",
            "subscriptions",
            "sla",
            "retry_on",
            "allowed",
        },
        "",
    )
    if "allowed" in block:  # the parameters' allowed values, checked with every value below
        from nbcast.definitions.parameters import with_allowed

        schema = with_allowed(schema, block)
    kwargs: dict[str, Any] = {}
    if "name" in block:
        kwargs["name"] = check_name(_require(block["name"], str, "name", "a string"))
    if "description" in block:
        kwargs["description"] = _require(block["description"], str, "description", "a string")
        if len(kwargs["description"]) > MAX_DESCRIPTION_CHARS:
            raise MetadataError(
                "description", f"is longer than {MAX_DESCRIPTION_CHARS:,} characters"
            )
    if "schedule" in block:
        kwargs["schedule"] = _schedule(block["schedule"])
    if "parameters" in block:
        from nbcast.definitions.parameters import validate_parameters

        values = _require(block["parameters"], dict, "parameters", "a mapping")
        try:
            kwargs["parameters"] = validate_parameters(schema, values, bindings=True)
        except ParameterValueError as exc:
            raise MetadataError(exc.field, exc.about_field()) from None
    outputs = _formats(block["outputs"], "outputs") if "outputs" in block else (OutputFormat.html,)
    if not outputs:
        raise MetadataError("outputs", "needs at least one format")
    kwargs["outputs"] = outputs
    if "subscriptions" in block:
        kwargs["subscriptions"] = _subscriptions(block["subscriptions"], outputs, schema)
    if "sla" in block:
        kwargs["sla"] = _sla(block["sla"])
    if "retry_on" in block:
        kwargs["retry_on"] = _retry_on(block["retry_on"])
    return ReportSpec(**kwargs)


MAX_RETRY_ON = 20
"""Exception names one ``retry_on`` lists at most."""
_EXCEPTION_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,99}(\.[A-Za-z_][A-Za-z0-9_]{0,99}){0,9}")


def _retry_on(value: Any) -> tuple[str, ...]:
    _require(value, list, "retry_on", "a list of exception names")
    if len(value) > MAX_RETRY_ON:
        raise MetadataError("retry_on", f"lists more than {MAX_RETRY_ON} exception names")
    names: list[str] = []
    for i, name in enumerate(value):
        path = f"retry_on[{i}]"
        _require(name, str, path, "an exception name")
        if not _EXCEPTION_NAME.fullmatch(name):
            raise MetadataError(
                path, f"{clip(name)} is not an exception name (ValueError, a.b.Error)"
            )
        if name not in names:
            names.append(name)
    return tuple(names)


MIN_SLA = timedelta(minutes=1)
MAX_SLA = timedelta(days=7)


def _sla(value: Any) -> SlaSpec:
    _require(value, dict, "sla", "a mapping")
    _no_unknown(value, {"delivered_within"}, "sla")
    if "delivered_within" not in value:
        raise MetadataError("sla.delivered_within", "is required (a duration such as 30m)")
    within = _duration(value["delivered_within"], "sla.delivered_within", MAX_SLA)
    if within < MIN_SLA:
        raise MetadataError("sla.delivered_within", "must be at least 1m")
    return SlaSpec(delivered_within=within)


def check_name(name: str) -> str:
    """Return ``name`` if it is a valid definition name, else raise MetadataError."""
    if not isinstance(name, str) or not _NAME.fullmatch(name):
        raise MetadataError("name", f"{clip(name)} must match {_NAME.pattern}")
    return name
