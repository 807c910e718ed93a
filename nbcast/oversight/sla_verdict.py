"""What a slot's rows and deliveries say about its SLA: kept, or missed and why
(:mod:`nbcast.oversight.sla` says what counts)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from nbcast.delivery.models import DeliveryState
from nbcast.scheduler.models import RunState

__all__ = [
    "REASON_CHARS",
    "Sent",
    "SlaSlot",
    "SlaSlotRow",
    "group_slots",
    "judge",
    "reason_of",
    "span",
]

REASON_CHARS = 255
"""The longest reason a miss keeps."""


@dataclass(frozen=True, kw_only=True)
class SlaSlotRow:
    """One row of a slot (one audience)."""

    id: int
    slot_key: str
    fire_at: datetime
    audience: str
    state: str
    reason: str | None
    version_id: int


@dataclass(kw_only=True)
class SlaSlot:
    """One slot key's rows (one per audience), in audience order."""

    key: str
    fire_at: datetime
    rows: list[SlaSlotRow] = field(default_factory=list)


@dataclass(frozen=True, kw_only=True)
class Sent:
    """One delivery of a slot's row (or of its rerun)."""

    state: str
    reason: str | None
    sent_at: datetime | None


def span(delta: timedelta) -> str:
    """``45s``, ``12m``, ``3h05m``, ``2d04h``."""
    seconds = max(int(delta.total_seconds()), 0)
    if seconds < 60:
        return f"{seconds}s"
    minutes, _ = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}m"
    hours, minutes = divmod(minutes, 60)
    if hours < 24:
        return f"{hours}h{minutes:02d}m"
    days, hours = divmod(hours, 24)
    return f"{days}d{hours:02d}h"


def reason_of(row: SlaSlotRow, sent: list[Sent], deadline: datetime) -> str:
    """Why ``row`` was not delivered by ``deadline``, given its deliveries ``sent``
    (its reruns' included)."""
    state, why = row.state, f" ({row.reason})" if row.reason else ""
    if state in (RunState.SKIPPED, RunState.MISSED):
        return f"{state}{why}: the slot had no run"
    late = sorted(s.sent_at for s in sent if s.state == DeliveryState.SENT and s.sent_at)
    if late:
        return f"SENT {span(late[0] - deadline)} after the deadline"
    if state in (RunState.QUEUED, RunState.LEASED, RunState.RUNNING):
        return f"{state} at the deadline"
    if state != RunState.SUCCEEDED:
        return f"{state}{why}: the run did not succeed"
    if not sent:
        return "SUCCEEDED, but nothing was to be delivered (no subscription)"
    counts: dict[str, int] = {}
    for s in sent:
        label = f"{s.state} {s.reason}" if s.reason else s.state
        counts[label] = counts.get(label, 0) + 1
    told = ", ".join(f"{n} {label}" for label, n in sorted(counts.items()))
    return f"no delivery SENT by the deadline ({told})"


def judge(
    slot: SlaSlot, deadline: datetime, sent: Mapping[int, list[Sent]]
) -> tuple[str, str] | None:
    """The state and reason of a missed slot; None when it was kept: each of its rows
    has a delivery SENT by ``deadline`` (``sent`` by row id)."""
    for row in slot.rows:
        mine = sent.get(row.id, [])
        if any(
            s.state == DeliveryState.SENT and s.sent_at is not None and s.sent_at <= deadline
            for s in mine
        ):
            continue
        reason = reason_of(row, mine, deadline)
        if len(slot.rows) > 1:
            reason = f"audience {row.audience or 'base'} of {len(slot.rows)}: {reason}"
        return row.state, reason[:REASON_CHARS]
    return None


def group_slots(rows: Sequence[SlaSlotRow]) -> list[list[SlaSlot]]:
    """Rows as slots, the slots grouped by fire time (oldest first)."""
    groups: list[list[SlaSlot]] = []
    for row in rows:
        if not groups or groups[-1][0].fire_at != row.fire_at:
            groups.append([])
        group = groups[-1]
        if not group or group[-1].key != row.slot_key:
            group.append(SlaSlot(key=row.slot_key, fire_at=row.fire_at))
        group[-1].rows.append(row)
    return groups
