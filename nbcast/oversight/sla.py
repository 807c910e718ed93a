"""SLA monitoring: one miss per slot that was not delivered within its promise.

A definition promises ``sla: {delivered_within: "30m"}`` (1 minute to 7 days). The
monitor (:func:`check_slas`) runs from every oversight replica every 30 s of clock
time (:mod:`nbcast.oversight.jobs`) and only reads the other planes' rows.

**What counts.** A *slot* is a scheduled run's slot key; it has one row per audience
(``runs.audience``). Its *deadline* is its fire time plus the window of the version its
rows pinned (the version whose schedule made them), so a slot is judged by the promise
in force when it was made. The slot is *kept* when each of its rows — or a rerun of
that row (``rerun_of``) — has a delivery SENT no later than the deadline. Otherwise it
is **missed**: one :class:`~nbcast.tenancy.models.SlaMiss` row with the state of
the first row that was not delivered (SKIPPED, MISSED, FAILED, TIMED_OUT, CANCELLED,
still QUEUED or RUNNING, or SUCCEEDED with no delivery SENT in time) and a reason
(``FAILED (max_attempts): the run did not succeed``, ``SENT 12m after the deadline``).
A slot SKIPPED or MISSED by the scheduler, a definition without subscriptions and a
delivery SUPPRESSED count as missed too: nothing reached anyone in time. Backfills
(deliberate runs of past periods) and manual runs have no promise.

**When.** A slot is judged once its deadline has passed, never before. Each definition
has a watermark, ``sla_watermarks.checked_until``: every slot firing at or before it is
judged. It moves only up to ``min(now - window, the materialization watermark in
schedule_states)``, so a slot the scheduler has not recorded yet (it is behind, the
definition is paused or cannot be materialized) is judged when it is recorded, never
skipped. A new definition's watermark starts at the publish of the version that first
declares its SLA: slots before the promise are not judged. A slot whose version
promised a longer window than the current one holds the watermark until its own
deadline.

**Exactly once, with any number of replicas.** Each definition is judged in its own
transaction holding its watermark row (``FOR UPDATE SKIP LOCKED`` on PostgreSQL: a
replica skips a definition another is judging; SQLite has one writer at a time), and
misses are inserted with ``ON CONFLICT DO NOTHING`` on ``UNIQUE(definition_id,
slot_key)``; only a row actually inserted is audited (``sla.missed``, actor
:data:`ACTOR`) and alerted. A crash before the commit leaves the watermark where it
was, and the next pass judges the same slots again to the same result.

**The alert.** A miss is alerted to the definition's owner (``report_definitions
.created_by``): over the channel ``NBCAST_SLA_CHANNEL`` (any registered channel,
default ``email``) to the owner's address (``nbcast users add NAME --email E``) when
that channel takes email addresses, else to ``NBCAST_SLA_TO``; with neither its
``alert_state`` is ``NONE``. Both variables are read by the oversight service (the
monitor's process) when the miss is found, which then sends the alert
(:mod:`nbcast.oversight.sla_alerts`).

**Bounded.** One pass judges at most :data:`MAX_SLOTS_PER_DEFINITION` slot rows of a
definition and :data:`MAX_SLOTS_PER_CHECK` in all, the definitions furthest behind
first, and a pass stops taking up definitions once it has run for
:data:`MAX_SECONDS_PER_CHECK` (the alerts of the same step wait for it); what is left is
judged at the next pass. One definition that cannot be judged
(a version that no longer parses, rows the database refuses) is logged and skipped
while every other definition is judged as usual.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from enum import StrEnum
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session, aliased

from nbcast.clock import Clock, format_instant
from nbcast.db import Database, insert_ignore
from nbcast.definitions.models import DefinitionVersion, ReportDefinition
from nbcast.delivery.models import Delivery
from nbcast.leasing import skip_locked
from nbcast.oversight.models import SlaMiss, SlaWatermark
from nbcast.oversight.sla_verdict import Sent, SlaSlot, SlaSlotRow, group_slots, judge
from nbcast.scheduler.models import Run, RunKind, ScheduleState
from nbcast.tenancy import audit
from nbcast.tenancy.models import User

__all__ = [
    "ACTOR",
    "DEFAULT_CHANNEL",
    "MAX_SECONDS_PER_CHECK",
    "MAX_SLOTS_PER_CHECK",
    "MAX_SLOTS_PER_DEFINITION",
    "AlertState",
    "alert_route",
    "check_slas",
    "sla_window",
]

log = logging.getLogger("nbcast.oversight.sla")

ACTOR = "sla-monitor"
"""The actor of ``sla.missed`` audit entries."""

DEFAULT_CHANNEL = "email"
"""The alert channel when ``NBCAST_SLA_CHANNEL`` is unset."""

MAX_SLOTS_PER_DEFINITION = 500
"""SlaSlot rows of one definition judged in one pass (one transaction)."""

MAX_SLOTS_PER_CHECK = 5_000
"""SlaSlot rows judged in one pass over every definition."""

MAX_SECONDS_PER_CHECK = 1.0
"""Wall seconds after which a pass takes up no further definition (monotonic time:
the scheduler's clock may be accelerated, the work it waits for is not)."""

_CANDIDATE_BATCH = 1_000
_ASYNC_COMMIT = sa.text("SET LOCAL synchronous_commit = off")
_IN_CHUNK = 500


class AlertState(StrEnum):
    """Where a miss's alert is (``sla_misses.alert_state``)."""

    PENDING = "PENDING"
    """To be sent by a delivery worker (from ``alert_not_before`` on)."""
    SENT = "SENT"
    """The channel accepted it (``alerted_at``)."""
    FAILED = "FAILED"
    """Given up: refused, attempts spent, or the channel is not configured
    (``alert_error`` says which)."""
    NONE = "NONE"
    """No alert: the owner has no address the channel takes, and ``NBCAST_SLA_TO`` is
    unset."""


def sla_window(block: Any) -> timedelta | None:
    """The ``delivered_within`` of a version's ``sla`` block (None: no SLA, or a block
    that does not validate — a version published before it did)."""
    from nbcast.definitions.compiled import compile_sla_block

    return compile_sla_block(block)


def alert_route(environ: Mapping[str, str], owner_email: str | None) -> tuple[str, str | None]:
    """The alert's channel and recipient (None: nobody to alert), as the module
    docstring says: the owner's address on a channel that takes email addresses (one
    whose check accepts the address and refuses a bare word), else ``NBCAST_SLA_TO``."""
    from nbcast.errors import NbcastError
    from nbcast.plugins import recipient_rules

    channel = (environ.get("NBCAST_SLA_CHANNEL") or DEFAULT_CHANNEL).strip()[:32]
    fallback = (environ.get("NBCAST_SLA_TO") or "").strip()[:512] or None
    if owner_email:
        try:
            kind = recipient_rules(channel)
        except NbcastError:  # not registered: the worker records no_channel
            kind = None
        if (
            kind is not None
            and kind.check_recipient(owner_email) is None
            and kind.check_recipient("nbcast") is not None
        ):
            return channel, owner_email
    return channel, fallback


# -- candidates -------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class _Candidate:
    """A definition whose current version (latest or scheduled) declares an SLA."""

    definition_id: int
    tenant_id: int
    name: str
    window: timedelta
    """The current promise (the scheduled version's, else the latest's): how far
    behind now slots can have been judged."""
    materialized_until: datetime
    checked_until: datetime | None
    promised_since: datetime
    """Where a new watermark starts: the publish of the version with the promise."""
    owner_email: str | None

    def horizon(self, now: datetime) -> datetime:
        """How far the watermark may move now (module docstring)."""
        return min(now - self.window, self.materialized_until)

    def behind(self, now: datetime) -> bool:
        """Whether slots may wait to be judged."""
        return self.horizon(now) > (self.checked_until or self.promised_since)


def _has_sla(spec: Any, dialect: str) -> Any:
    if dialect == "postgresql":
        return spec["sla"].is_not(None)
    return sa.func.json_type(spec, "$.sla").is_not(None)


def _candidates(session: Session, dialect: str) -> list[_Candidate]:
    """Every definition with an SLA in its latest or scheduled version, in batches."""
    latest = aliased(DefinitionVersion)
    scheduled = aliased(DefinitionVersion)
    found: list[_Candidate] = []
    after = 0
    while True:
        batch: list[_Candidate] = []
        rows = session.execute(
            sa.select(
                ReportDefinition.id,
                ReportDefinition.tenant_id,
                ReportDefinition.name,
                latest.spec["sla"],
                latest.created_at,
                scheduled.spec["sla"],
                scheduled.created_at,
                ScheduleState.watermark,
                SlaWatermark.checked_until,
                User.email,
            )
            .join(
                latest,
                sa.and_(
                    latest.definition_id == ReportDefinition.id,
                    latest.version == ReportDefinition.latest_version,
                ),
            )
            .join(ScheduleState, ScheduleState.definition_id == ReportDefinition.id)
            .outerjoin(
                scheduled,
                sa.and_(
                    scheduled.definition_id == ReportDefinition.id,
                    scheduled.version == ScheduleState.schedule_version,
                ),
            )
            .outerjoin(SlaWatermark, SlaWatermark.definition_id == ReportDefinition.id)
            .outerjoin(User, User.id == ReportDefinition.created_by)
            .where(
                ReportDefinition.id > after,
                sa.or_(_has_sla(latest.spec, dialect), _has_sla(scheduled.spec, dialect)),
            )
            .order_by(ReportDefinition.id)
            .limit(_CANDIDATE_BATCH)
        ).all()
        for row in rows:
            (did, tid, name, latest_sla, latest_at, sched_sla, sched_at, mark, checked, email) = row
            windows = [
                (window, at)
                for window, at in (
                    (sla_window(sched_sla), sched_at),
                    (sla_window(latest_sla), latest_at),
                )
                if window is not None
            ]
            if not windows:  # declared, but not a valid promise: nothing to hold it to
                continue
            batch.append(
                _Candidate(
                    definition_id=did,
                    tenant_id=tid,
                    name=name,
                    window=windows[0][0],
                    materialized_until=mark,
                    checked_until=checked,
                    promised_since=min(at for _, at in windows),
                    owner_email=email,
                )
            )
        found += _first_promises(session, dialect, batch)
        if len(rows) < _CANDIDATE_BATCH:
            return found
        after = rows[-1][0]


def _first_promises(session: Session, dialect: str, batch: list[_Candidate]) -> list[_Candidate]:
    """``batch`` with each new definition's watermark starting at the publish of its
    first version with an SLA (an older one may have pinned slots still to judge)."""
    new = [c.definition_id for c in batch if c.checked_until is None]
    if not new:
        return batch
    firsts = dict(
        session.execute(
            sa.select(DefinitionVersion.definition_id, sa.func.min(DefinitionVersion.created_at))
            .where(
                DefinitionVersion.definition_id.in_(new), _has_sla(DefinitionVersion.spec, dialect)
            )
            .group_by(DefinitionVersion.definition_id)
        )
        .tuples()
        .all()
    )
    return [
        replace(
            c, promised_since=min(c.promised_since, firsts.get(c.definition_id) or c.promised_since)
        )
        if c.checked_until is None
        else c
        for c in batch
    ]


# -- one definition ---------------------------------------------------------------------


@dataclass
class _Tally:
    misses: int = 0
    slots: int = 0
    failed: int = 0
    more: bool = False


def _lock_watermark(session: Session, c: _Candidate, dialect: str) -> datetime | None:
    """The definition's watermark, locked for this transaction; None when another
    replica holds it (PostgreSQL)."""
    session.execute(
        insert_ignore(
            SlaWatermark,
            [
                {
                    "definition_id": c.definition_id,
                    "tenant_id": c.tenant_id,
                    "checked_until": c.promised_since,
                }
            ],
            dialect,
        )
    )
    query = sa.select(SlaWatermark.checked_until).where(
        SlaWatermark.definition_id == c.definition_id
    )
    return session.scalar(skip_locked(dialect, query))


def _slot_rows(
    session: Session, c: _Candidate, low: datetime, high: datetime, limit: int
) -> tuple[list[SlaSlotRow], bool]:
    """The slot rows firing in ``(low, high]``, oldest first, at most about ``limit``
    and never a fire time cut in two; whether more follow."""
    base = sa.select(
        Run.id, Run.slot_key, Run.fire_at, Run.audience, Run.state, Run.reason, Run.version_id
    ).where(
        Run.tenant_id == c.tenant_id,
        Run.definition_id == c.definition_id,
        Run.kind == RunKind.scheduled.value,
        Run.slot_key.is_not(None),
    )
    order = (Run.fire_at, Run.slot_key, Run.audience)
    rows = [
        SlaSlotRow(**r._asdict())
        for r in session.execute(
            base.where(Run.fire_at > low, Run.fire_at <= high).order_by(*order).limit(limit + 1)
        )
    ]
    if len(rows) <= limit:
        return rows, False
    cut = rows[limit].fire_at
    kept = [r for r in rows if r.fire_at < cut]
    if kept:
        return kept, True
    # One fire time holds more rows than a batch (audiences × fold keys): take it whole.
    whole = session.execute(base.where(Run.fire_at == cut).order_by(*order))
    return [SlaSlotRow(**r._asdict()) for r in whole], True


def _windows(session: Session, version_ids: Iterable[int]) -> dict[int, timedelta | None]:
    ids = sorted(set(version_ids))
    windows: dict[int, timedelta | None] = {}
    for start in range(0, len(ids), _IN_CHUNK):
        chunk = ids[start : start + _IN_CHUNK]
        for vid, block in session.execute(
            sa.select(DefinitionVersion.id, DefinitionVersion.spec["sla"]).where(
                DefinitionVersion.id.in_(chunk)
            )
        ):
            windows[vid] = sla_window(block)
    return windows


def _deliveries(session: Session, rows: Sequence[SlaSlotRow]) -> dict[int, list[Sent]]:
    """The deliveries of each row, its reruns' included (a rerun that delivered by the
    deadline keeps the slot's promise; :func:`judge` compares the times)."""
    ids = [r.id for r in rows]
    owner = {i: i for i in ids}
    if rows:
        for start in range(0, len(ids), _IN_CHUNK):
            chunk = ids[start : start + _IN_CHUNK]
            # By rerun_of alone (its partial index): reruns of the tenant's own rows
            # are the tenant's; one too late to count is judged by its sent_at.
            reruns = session.execute(
                sa.select(Run.id, Run.rerun_of).where(
                    Run.rerun_of.in_(chunk), Run.kind == RunKind.rerun.value
                )
            )
            for rerun_id, original in reruns:
                if original is not None:
                    owner[rerun_id] = original
    found: dict[int, list[Sent]] = {}
    every = sorted(owner)
    for start in range(0, len(every), _IN_CHUNK):
        chunk = every[start : start + _IN_CHUNK]
        for run_id, state, reason, sent_at in session.execute(
            sa.select(Delivery.run_id, Delivery.state, Delivery.reason, Delivery.sent_at).where(
                Delivery.run_id.in_(chunk)
            )
        ):
            found.setdefault(owner[run_id], []).append(
                Sent(state=state, reason=reason, sent_at=sent_at)
            )
    return found


def _check_definition(
    db: Database,
    c: _Candidate,
    now: datetime,
    limit: int,
    environ: Mapping[str, str],
) -> tuple[int, int, bool]:
    """Judge one definition's due slots in one transaction; return (misses recorded,
    slot rows judged, more left)."""
    horizon = c.horizon(now)
    with db.session() as session:
        checked = _lock_watermark(session, c, db.dialect)
        if checked is None or horizon <= checked:
            return 0, 0, False
        rows, more = _slot_rows(session, c, checked, horizon, limit)
        windows = _windows(session, (r.version_id for r in rows))
        sent = _deliveries(session, rows)
        mark, stopped, judged = checked, False, 0
        misses: list[dict[str, Any]] = []
        channel, to = alert_route(environ, c.owner_email)
        for group in group_slots(rows):
            decided: list[dict[str, Any]] = []
            for slot in group:
                window = windows.get(slot.rows[0].version_id)
                if window is None:  # that version promised nothing
                    continue
                deadline = slot.fire_at + window
                if deadline > now:  # a longer promise than today's: not yet due
                    stopped = True
                    break
                verdict = judge(slot, deadline, sent)
                if verdict is not None:
                    decided.append(_miss_row(c, slot, deadline, now, verdict, channel, to))
            if stopped:
                break
            misses += decided
            judged += sum(len(s.rows) for s in group)
            mark = group[0].fire_at
        if not stopped and not more:
            mark = horizon
        inserted = _insert_misses(session, db.dialect, misses)
        by_key = {m["slot_key"]: m for m in misses}
        for slot_key in inserted:
            m = by_key[slot_key]
            audit.record(
                session,
                c.tenant_id,
                actor=ACTOR,
                action=audit.Action.sla_missed,
                obj=f"definition:{c.name}",
                at=now,
                details={
                    "slot": slot_key,
                    "fire_at": format_instant(m["fire_at"]),
                    "deadline": format_instant(m["deadline"]),
                    "state": m["state"],
                    "reason": m["reason"],
                    "alert": m["alert_state"],
                },
            )
        if db.dialect == "postgresql":
            # The commit need not wait for the WAL flush: the misses, their audit
            # entries and the watermark are one transaction, so a crash that loses it
            # leaves the watermark where it was and the next pass judges the same slots
            # to the same misses (no alert was sent from a row that never existed).
            session.execute(_ASYNC_COMMIT)
        if mark > checked:
            session.execute(
                sa.update(SlaWatermark)
                .where(SlaWatermark.definition_id == c.definition_id)
                .values(checked_until=mark)
            )
        return len(inserted), judged, more and not stopped


def _miss_row(
    c: _Candidate,
    slot: SlaSlot,
    deadline: datetime,
    now: datetime,
    verdict: tuple[str, str],
    channel: str,
    to: str | None,
) -> dict[str, Any]:
    state, reason = verdict
    return {
        "tenant_id": c.tenant_id,
        "definition_id": c.definition_id,
        "slot_key": slot.key,
        "fire_at": slot.fire_at,
        "deadline": deadline,
        "detected_at": now,
        "state": state,
        "reason": reason,
        "alert_state": (AlertState.PENDING if to else AlertState.NONE).value,
        "alert_attempts": 0,
        "alert_not_before": now,
        "alert_channel": channel,
        "alert_to": to,
    }


def _insert_misses(session: Session, dialect: str, rows: list[dict[str, Any]]) -> list[str]:
    """Insert ``rows``, ignoring slots already recorded; the slot keys inserted.

    One executemany of a statement compiled once (SQLAlchemy's "insertmanyvalues"
    batches it into multi-row INSERTs with RETURNING), not a VALUES list built per
    definition, whose compilation cost more than the insert itself."""
    if not rows:
        return []
    table = cast(sa.Table, SlaMiss.__table__)
    dialect_insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    statement = dialect_insert(table).on_conflict_do_nothing().returning(table.c.slot_key)
    return [str(key) for key in session.connection().execute(statement, rows).scalars()]


# -- the pass ---------------------------------------------------------------------------


def check_slas(
    db: Database,
    clock: Clock,
    *,
    environ: Mapping[str, str] | None = None,
    max_slots: int = MAX_SLOTS_PER_CHECK,
    per_definition: int = MAX_SLOTS_PER_DEFINITION,
    max_seconds: float = MAX_SECONDS_PER_CHECK,
) -> dict[str, Any]:
    """Judge the due slots of every definition with an SLA (module docstring); return
    ``{"misses": recorded, "slots": judged, "definitions": judged, "failed": n,
    "more": whether work was left for the next pass}``."""
    env = os.environ if environ is None else environ
    started = time.monotonic()
    now = clock.now()
    with db.session() as session:
        candidates = [c for c in _candidates(session, db.dialect) if c.behind(now)]
    # The furthest behind first, so a bounded pass is fair to every definition.
    candidates.sort(key=lambda c: (c.checked_until or c.promised_since, c.definition_id))
    tally = _Tally()
    definitions = 0
    for c in candidates:
        budget = min(per_definition, max_slots - tally.slots)
        if budget <= 0 or (definitions and time.monotonic() - started >= max_seconds):
            tally.more = True
            break
        try:
            misses, slots, more = _check_definition(db, c, now, budget, env)
        except Exception:  # one definition's failure stays its own
            tally.failed += 1
            log.exception("SLA check of definition %d (%s) failed", c.definition_id, c.name)
            continue
        definitions += 1
        tally.misses += misses
        tally.slots += slots
        tally.more = tally.more or more
    return {
        "misses": tally.misses,
        "slots": tally.slots,
        "definitions": definitions,
        "failed": tally.failed,
        "more": tally.more,
    }
