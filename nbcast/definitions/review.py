"""What a new version changes for the people who receive it, in plain language.

Every version diff — ``nbcast diff``, the API, the Lab's diff and the status page —
opens with this summary, then shows the code (:mod:`nbcast.definitions.diff`). It
reads the two versions' ``nbcast`` blocks and parameter schemas, never the notebook's
text, so it says what will *run*, in this order:

1. **Parameters**: each parameter whose effective value changes
   (:mod:`nbcast.definitions.effective`: the block's value or binding over the cell's
   default), added or removed; and, flagged, each default whose change the block hides
   ("top_n: default 10 → 5; runs still use 15 from the metadata block").
2. **Schedule**: each changed setting (cron or interval, zone, start and end, DST,
   misfire, overlap, staleness, jitter), with the next fire times before and after
   when the schedule changes.
3. **Recipients**: subscriptions added or removed (by channel and recipient), and for
   a kept one what changes — formats, condition, its own parameters or row filter
   (its audience).
4. **Outputs**, then any other block setting (description, SLA, ``retry_on``).
5. **Code**: how many cells changed, were added or removed (the diff itself follows).

Values are shown compactly (JSON, at most :data:`VALUE_CHARS` characters); a summary
holds at most :data:`MAX_ITEMS` lines, then says how many more there were.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from itertools import islice
from typing import Any

from nbcast.definitions.compiled import compile_version
from nbcast.definitions.compiler import SlotStatus
from nbcast.definitions.effective import EffectiveParameter
from nbcast.definitions.queries import VersionInfo
from nbcast.records import internal

__all__ = ["MAX_ITEMS", "SECTIONS", "VALUE_CHARS", "ReviewItem", "ReviewSummary", "review_summary"]

VALUE_CHARS = 80
"""A value longer than this (as compact JSON) is shown cut, with ``…``."""

MAX_ITEMS = 200
"""Lines a summary holds at most (a block with 1,000 subscriptions changed says so)."""

NEXT_FIRES = 3
"""Fire times shown before and after a schedule change."""

_SCHEDULE_WORDS = {
    "cron": "cron",
    "every": "every",
    "timezone": "time zone",
    "start": "start",
    "end": "end",
    "dst": "DST handling",
    "misfire": "misfire policy",
    "overlap": "overlap policy",
    "staleness": "staleness",
    "jitter": "jitter",
}


@dataclass(frozen=True)
class ReviewItem:
    """One line of the summary."""

    section: str
    """parameters, schedule, recipients, outputs, settings or code."""
    text: str
    warning: bool = False
    """A change a reader would likely get wrong (a default hidden by the block)."""

    def to_json(self) -> dict[str, Any]:
        return {"section": self.section, "text": self.text, "warning": self.warning}


SECTIONS = ("parameters", "schedule", "recipients", "outputs", "settings", "code")
"""The sections of a summary, in the order every face shows them."""


@dataclass(frozen=True, kw_only=True)
class ReviewSummary:
    """What changes from version a to b for the people who receive the report."""

    definition: str = internal()
    a: int = internal()
    b: int = internal()
    items: tuple[ReviewItem, ...]
    """One line per change, by section: parameters, schedule, recipients, outputs,
    settings, code."""
    fires_before: tuple[str, ...] = ()
    """The next fire times under version a's schedule (only when the schedule changes)."""
    fires_after: tuple[str, ...] = ()
    """The next fire times under version b's schedule (only when the schedule changes)."""
    more: int = 0
    """Lines left out past the first 200."""

    def to_json(self) -> dict[str, Any]:
        return {
            "items": [i.to_json() for i in self.items],
            "fires_before": list(self.fires_before),
            "fires_after": list(self.fires_after),
            "more": self.more,
        }

    def lines(self) -> list[str]:
        """The summary as text lines (``nbcast diff``), by section."""
        if not self.items:
            return [f"## {self.definition} v{self.a} → v{self.b}: nothing changes"]
        out = [f"## What changes for recipients ({self.definition} v{self.a} → v{self.b})"]
        for section in SECTIONS:
            mine = [i for i in self.items if i.section == section]
            if not mine:
                continue
            out.append(f"{section.capitalize()}:")
            out += [f"  {'! ' if i.warning else '- '}{i.text}" for i in mine]
            if section == "schedule" and (self.fires_before or self.fires_after):
                out.append(f"  next fires before: {', '.join(self.fires_before) or 'none'}")
                out.append(f"  next fires after:  {', '.join(self.fires_after) or 'none'}")
        if self.more:
            out.append(f"… and {self.more} more changes")
        return out


def review_summary(old: VersionInfo, new: VersionInfo, now: datetime) -> ReviewSummary:
    """The summary of what changes from ``old`` to ``new`` (module docstring); next fire
    times are counted from ``now``."""
    items: list[ReviewItem] = []
    items += _parameters(old.effective, new.effective)
    schedule = list(_schedule(old.block.get("schedule"), new.block.get("schedule")))
    items += schedule
    items += _recipients(old.block.get("subscriptions"), new.block.get("subscriptions"))
    items += _outputs(old.block.get("outputs"), new.block.get("outputs"))
    items += _settings(old.block, new.block)
    items += _code(old.notebook, new.notebook)
    before: tuple[str, ...] = ()
    after: tuple[str, ...] = ()
    if schedule:
        before, after = _fires(old, now), _fires(new, now)
    return ReviewSummary(
        definition=old.definition,
        a=old.version,
        b=new.version,
        items=tuple(items[:MAX_ITEMS]),
        fires_before=before,
        fires_after=after,
        more=max(0, len(items) - MAX_ITEMS),
    )


def shown(value: Any) -> str:
    """``value`` as compact JSON, cut at :data:`VALUE_CHARS` (a string as written)."""
    text = json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    return text if len(text) <= VALUE_CHARS else text[: VALUE_CHARS - 1] + "…"


_SOURCES = {"metadata": "the metadata block", "binding": "a binding", "default": "the default"}


def _parameters(
    before: Iterable[EffectiveParameter], after: Iterable[EffectiveParameter]
) -> list[ReviewItem]:
    old = {p.name: p for p in before}
    new = {p.name: p for p in after}
    items = []
    for name, p in new.items():
        q = old.get(name)
        source = _SOURCES[p.source]
        if q is None:
            items.append(
                ReviewItem(
                    "parameters", f"new parameter {name}: runs with {shown(p.value)} ({source})"
                )
            )
        elif q.value != p.value:
            what = "binding" if "binding" in (p.source, q.source) else "runs with"
            items.append(
                ReviewItem(
                    "parameters",
                    f"{name}: {what} {shown(q.value)} → {shown(p.value)} ({source})",
                )
            )
        elif q.default != p.default and p.overridden:
            items.append(
                ReviewItem(
                    "parameters",
                    f"{name}: default {shown(q.default)} → {shown(p.default)}; runs still use "
                    f"{shown(p.value)} from {source}",
                    warning=True,
                )
            )
    for name, q in old.items():
        if name not in new:
            items.append(
                ReviewItem("parameters", f"parameter {name} removed (runs had {shown(q.value)})")
            )
    return items


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _schedule(before: Any, after: Any) -> Iterable[ReviewItem]:
    if before is None and after is not None:
        yield ReviewItem("schedule", f"now scheduled: {_schedule_text(after)}")
        return
    if before is not None and after is None:
        yield ReviewItem("schedule", "no longer scheduled: it runs only on request")
        return
    old, new = _mapping(before), _mapping(after)
    for key in sorted(set(old) | set(new), key=lambda k: (k not in _SCHEDULE_WORDS, k)):
        if old.get(key) != new.get(key):
            word = _SCHEDULE_WORDS.get(key, key)
            yield ReviewItem("schedule", f"{word}: {_or_unset(old, key)} → {_or_unset(new, key)}")


def _schedule_text(schedule: Any) -> str:
    s = _mapping(schedule)
    when = f"cron {s['cron']}" if "cron" in s else f"every {s.get('every', '?')}"
    return f"{when} ({s.get('timezone', 'UTC')})"


def _or_unset(block: Mapping[str, Any], key: str) -> str:
    if key not in block:
        return "(not set)"
    value = block[key]
    return value if isinstance(value, str) and len(value) <= VALUE_CHARS else shown(value)


def _subscription_key(sub: Mapping[str, Any]) -> tuple[str, str]:
    return str(sub.get("channel", "")), str(sub.get("to", ""))


def _recipients(before: Any, after: Any) -> list[ReviewItem]:
    old = {_subscription_key(s): s for s in before or () if isinstance(s, Mapping)}
    new = {_subscription_key(s): s for s in after or () if isinstance(s, Mapping)}
    items = []
    for key, sub in new.items():
        channel, to = key
        if key not in old:
            items.append(ReviewItem("recipients", f"{to} ({channel}) will receive it{_scope(sub)}"))
            continue
        for name in ("formats", "only_if", "parameters", "row_filter"):
            if old[key].get(name) != sub.get(name):
                what = {"only_if": "condition", "row_filter": "row filter"}.get(name, name)
                if name == "parameters":
                    what = "own parameters"
                items.append(
                    ReviewItem(
                        "recipients",
                        f"{to} ({channel}): {what} {_or_unset(old[key], name)} → "
                        f"{_or_unset(sub, name)}",
                    )
                )
    for key in old:
        if key not in new:
            channel, to = key
            items.append(ReviewItem("recipients", f"{to} ({channel}) will no longer receive it"))
    return items


def _scope(sub: Mapping[str, Any]) -> str:
    parts = []
    if sub.get("formats"):
        parts.append("as " + ", ".join(str(f) for f in sub["formats"]))
    if sub.get("parameters"):
        parts.append(f"with its own parameters {shown(sub['parameters'])}")
    if sub.get("row_filter"):
        parts.append(f"rows filtered by {shown(sub['row_filter'])}")
    return f", {', '.join(parts)}" if parts else ""


def _outputs(before: Any, after: Any) -> list[ReviewItem]:
    old = [str(f) for f in before] if isinstance(before, list) else ["html"]
    new = [str(f) for f in after] if isinstance(after, list) else ["html"]
    if old == new:
        return []
    return [ReviewItem("outputs", f"{', '.join(old)} → {', '.join(new)}")]


def _settings(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ReviewItem]:
    handled = {"schedule", "subscriptions", "outputs", "parameters"}
    items = []
    for key in sorted((set(before) | set(after)) - handled):
        if before.get(key) != after.get(key):
            items.append(
                ReviewItem("settings", f"{key}: {_or_unset(before, key)} → {_or_unset(after, key)}")
            )
    return items


def _code(before: Mapping[str, Any], after: Mapping[str, Any]) -> list[ReviewItem]:
    """How many cells changed, by id (cells are stored with ids), else by position."""
    old = _cells(before)
    new = _cells(after)
    changed = sum(1 for key, source in new.items() if key in old and old[key] != source)
    added = sum(1 for key in new if key not in old)
    removed = sum(1 for key in old if key not in new)
    parts = [
        f"{n} cell{'s' if n != 1 else ''} {what}"
        for n, what in ((changed, "changed"), (added, "added"), (removed, "removed"))
        if n
    ]
    return [ReviewItem("code", ", ".join(parts))] if parts else []


def _cells(notebook: Mapping[str, Any]) -> dict[str, tuple[str, str]]:
    cells = notebook.get("cells")
    out: dict[str, tuple[str, str]] = {}
    for index, cell in enumerate(cells if isinstance(cells, list) else ()):
        if not isinstance(cell, Mapping):
            continue
        key = str(cell.get("id") or f"#{index}")
        source = cell.get("source", "")
        text = "".join(source) if isinstance(source, list) else str(source)
        out[key] = (str(cell.get("cell_type", "")), text)
    return out


def _fires(version: VersionInfo, now: datetime) -> tuple[str, ...]:
    """The next fire times of ``version``'s schedule from ``now`` (none if it cannot
    be compiled: its diff still shows)."""
    try:
        compiled = compile_version(version.block, [p.to_json() for p in version.schema])
        schedule = compiled.compiled_schedule
    except Exception:  # a version that no longer compiles has no next fires
        return ()
    if schedule is None:
        return ()
    slots = schedule.slots(now, now + timedelta(days=3660))
    fired = (s for s in slots if s.status is not SlotStatus.skipped)
    return tuple(
        f"{s.local:%a %Y-%m-%d %H:%M} {s.local.tzname()}" for s in islice(fired, NEXT_FIRES)
    )
