"""What retention may delete: policies and their cutoffs, the runs past them, the
artifact references those runs hold, the digest that keeps deleted slot rows
provable, and the order in which a run's rows go (:func:`delete_runs`); the pass
itself is :mod:`nbcast.oversight.retention`.

**Which runs.** A run is *past the artifacts cutoff* when it is finished (a terminal
state, SKIPPED and MISSED included), fired before ``now - artifacts days``, and
*settled*: no delivery PENDING or SENDING, no rendition PENDING, its outbox row
consumed, and no **live signed link** (not revoked, not expired) to any of its files.
A run is *past the rows cutoff* likewise with ``now - rows days``, and once its
artifact references are dropped. A run that is not settled is kept, rows and files,
and looked at again by the next pass.

**References.** An artifact (content-addressed, shared by hash across runs and
tenants) is referred to by ``runs.artifact_sha256``, ``run_attempts.artifact_sha256``,
``renditions.sha256`` — of any tenant — and by every live signed link
(``signed_links.sha256``; a dead link can never serve its file again, so it holds
nothing). Retention drops a run's references by clearing those columns on its rows:
a cleared column on a finished run older than the artifacts cutoff is the mark that
retention took its file. A blob is deleted when the references being dropped are
all the references there are, and no live link names it.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.delivery.models import (
    Delivery,
    DeliveryAttempt,
    DeliveryState,
    LinkOpen,
    Rendition,
    RenditionState,
    SignedLink,
)
from nbcast.errors import ConfigError
from nbcast.executor.models import OutboxRow, RunAttempt, WarehouseUsage
from nbcast.limits import clip
from nbcast.scheduler.models import FINISHED_STATES, CancelRequest, Run
from nbcast.tenancy.models import Tenant

__all__ = [
    "BATCH",
    "RETAIN_DAYS_MAX",
    "DeletedSlotRow",
    "Policy",
    "Reference",
    "Tally",
    "artifact_candidates",
    "check_policy",
    "chunks",
    "delete_runs",
    "live_link_shas",
    "reference_counts",
    "references_of",
    "row_candidates",
    "slots_digest",
]

RETAIN_DAYS_MAX = 36_500
"""The longest a policy keeps anything, in days (about a hundred years); the shortest
is 1."""

BATCH = 200
"""Runs handled per transaction: a backlog of any size is worked through in
transactions of at most this many runs (and their rows)."""

IN_CHUNK = 500
"""Values per ``IN (…)`` list (well under SQLite's parameter limit)."""

T = TypeVar("T")


def chunks(items: Sequence[T], size: int = IN_CHUNK) -> Iterator[list[T]]:
    """``items`` in lists of at most ``size``."""
    for start in range(0, len(items), size):
        yield list(items[start : start + size])


@dataclass(frozen=True, kw_only=True)
class Policy:
    """A tenant's retention: days to keep executed notebooks and renditions, days to
    keep run and delivery rows (None: forever)."""

    artifacts_days: int | None = None
    rows_days: int | None = None

    @classmethod
    def of(cls, tenant: Tenant) -> Policy:
        """The policy of ``tenant``."""
        return cls(artifacts_days=tenant.retain_artifacts_days, rows_days=tenant.retain_rows_days)

    @property
    def active(self) -> bool:
        """Whether the policy deletes anything."""
        return self.artifacts_days is not None or self.rows_days is not None

    def artifacts_cutoff(self, now: datetime) -> datetime | None:
        """Runs fired before this lose their files. A run whose rows go loses its files
        too, so this is never earlier than :meth:`rows_cutoff`."""
        days = [d for d in (self.artifacts_days, self.rows_days) if d is not None]
        return now - timedelta(days=min(days)) if days else None

    def rows_cutoff(self, now: datetime) -> datetime | None:
        """Runs fired before this are deleted with their rows."""
        return now - timedelta(days=self.rows_days) if self.rows_days is not None else None

    def to_json(self) -> dict[str, Any]:
        """The JSON form (``retention show --json``, audit details)."""
        return {"artifacts_days": self.artifacts_days, "rows_days": self.rows_days}

    def __str__(self) -> str:
        def days(value: int | None) -> str:
            return "forever" if value is None else f"{value} day{'s' if value != 1 else ''}"

        return f"artifacts {days(self.artifacts_days)}, rows {days(self.rows_days)}"


def check_policy(policy: Policy) -> None:
    """:class:`ConfigError` unless each number of days is a whole number from 1 to
    :data:`RETAIN_DAYS_MAX` (or None) and rows are kept at least as long as artifacts."""
    for name, value in (("artifacts-days", policy.artifacts_days), ("rows-days", policy.rows_days)):
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise ConfigError(f"{name} must be a whole number of days, not {clip(value)}")
        if not 1 <= value <= RETAIN_DAYS_MAX:
            raise ConfigError(f"{name} must be 1 to {RETAIN_DAYS_MAX:,} days, not {value}")
    if policy.rows_days is not None and (
        policy.artifacts_days is None or policy.artifacts_days > policy.rows_days
    ):
        kept = "forever" if policy.artifacts_days is None else f"{policy.artifacts_days} days"
        raise ConfigError(
            f"rows would be kept {policy.rows_days} days but artifacts {kept}: rows-days "
            "must be at least artifacts-days (a run's files go with its rows)"
        )


# -- which runs -----------------------------------------------------------------------


def _live_link(now: datetime) -> sa.ColumnElement[bool]:
    return sa.exists().where(
        SignedLink.run_id == Run.id,
        SignedLink.revoked_at.is_(None),
        SignedLink.expires_at > now,
    )


def _in_flight() -> sa.ColumnElement[bool]:
    return sa.or_(
        sa.exists().where(
            Delivery.run_id == Run.id,
            Delivery.state.in_([DeliveryState.PENDING.value, DeliveryState.SENDING.value]),
        ),
        sa.exists().where(
            Rendition.run_id == Run.id, Rendition.state == RenditionState.PENDING.value
        ),
        sa.exists().where(OutboxRow.run_id == Run.id, OutboxRow.consumed_at.is_(None)),
    )


def _holds_artifacts() -> sa.ColumnElement[bool]:
    return sa.or_(
        Run.artifact_sha256.is_not(None),
        sa.exists().where(RunAttempt.run_id == Run.id, RunAttempt.artifact_sha256.is_not(None)),
        sa.exists().where(Rendition.run_id == Run.id, Rendition.sha256.is_not(None)),
    )


def _settled(tenant_id: int, cutoff: datetime, now: datetime) -> list[sa.ColumnElement[bool]]:
    return [
        Run.tenant_id == tenant_id,
        Run.state.in_([s.value for s in FINISHED_STATES]),
        Run.fire_at < cutoff,
        ~_live_link(now),
        ~_in_flight(),
    ]


def artifact_candidates(
    tenant_id: int, cutoff: datetime, now: datetime
) -> list[sa.ColumnElement[bool]]:
    """The conditions on ``runs`` of a run whose artifact references go (module
    docstring)."""
    return [*_settled(tenant_id, cutoff, now), _holds_artifacts()]


def row_candidates(
    tenant_id: int, cutoff: datetime, now: datetime, *, assume_cleared: bool = False
) -> list[sa.ColumnElement[bool]]:
    """The conditions on ``runs`` of a run deleted with its rows; ``assume_cleared``
    (a dry run) counts runs whose references the artifacts step would drop first."""
    conditions = _settled(tenant_id, cutoff, now)
    return conditions if assume_cleared else [*conditions, ~_holds_artifacts()]


# -- references -----------------------------------------------------------------------


@dataclass(frozen=True)
class Reference:
    """One row's reference to an artifact: ``table`` is ``runs``, ``run_attempts`` or
    ``renditions``; ``row_id`` that row's id."""

    table: str
    row_id: int
    run_id: int
    sha256: str


_REFERRING: tuple[tuple[str, Any, Any, Any], ...] = (
    ("runs", Run.id, Run.id, Run.artifact_sha256),
    ("run_attempts", RunAttempt.id, RunAttempt.run_id, RunAttempt.artifact_sha256),
    ("renditions", Rendition.id, Rendition.run_id, Rendition.sha256),
)


def references_of(session: Session, run_ids: Sequence[int]) -> list[Reference]:
    """Every artifact reference held by the rows of ``run_ids``."""
    found: list[Reference] = []
    for chunk in chunks(run_ids):
        for table, row_id, run_id, sha in _REFERRING:
            rows = session.execute(
                sa.select(row_id, run_id, sha).where(run_id.in_(chunk), sha.is_not(None))
            ).all()
            found += [Reference(table, int(r[0]), int(r[1]), str(r[2])) for r in rows]
    return found


def reference_counts(session: Session, shas: Iterable[str]) -> Counter[str]:
    """How many rows (of any tenant) refer to each of ``shas``."""
    counts: Counter[str] = Counter()
    for chunk in chunks(sorted(set(shas))):
        for _table, _row_id, _run_id, sha in _REFERRING:
            for digest, count in session.execute(
                sa.select(sha, sa.func.count()).where(sha.in_(chunk)).group_by(sha)
            ).tuples():
                counts[str(digest)] += int(count)
    return counts


def live_link_shas(session: Session, shas: Iterable[str], now: datetime) -> set[str]:
    """Those of ``shas`` a live signed link (of any tenant) points at."""
    live: set[str] = set()
    for chunk in chunks(sorted(set(shas))):
        live.update(
            session.scalars(
                sa.select(SignedLink.sha256).where(
                    SignedLink.sha256.in_(chunk),
                    SignedLink.revoked_at.is_(None),
                    SignedLink.expires_at > now,
                )
            )
        )
    return live


class Tally:
    """Decides which blobs go, batch by batch.

    A blob goes when the references being dropped are all it has and no live link
    names it. When dropping is real, each batch's references are gone before the next
    batch is counted, so a batch decides alone (``accumulate=False``). A dry run drops
    nothing, so it adds up the references seen over all its batches
    (``accumulate=True``) and decides a blob once all of them are seen.
    """

    def __init__(self, *, accumulate: bool) -> None:
        self.accumulate = accumulate
        self.seen: Counter[str] = Counter()

    def decide(self, session: Session, refs: Sequence[Reference], now: datetime) -> list[str]:
        """The blobs, among those ``refs`` name, that nothing kept refers to."""
        batch = Counter(r.sha256 for r in refs)
        if not batch:
            return []
        totals = reference_counts(session, batch)
        live = live_link_shas(session, batch, now)
        decided: list[str] = []
        for sha, count in sorted(batch.items()):
            seen = count + (self.seen.pop(sha, 0) if self.accumulate else 0)
            if sha in live:
                continue
            if totals[sha] <= seen:
                decided.append(sha)
            elif self.accumulate:
                self.seen[sha] = seen
        return decided


# -- the proof of deleted slot rows ---------------------------------------------------


@dataclass(frozen=True)
class DeletedSlotRow:
    """What the audit log keeps of a deleted run row."""

    slot_key: str | None
    audience: str
    state: str
    reason: str | None

    def encoded(self) -> str:
        """The row as a JSON array: ``[slot_key, audience, state, reason]`` (nulls as
        ``null``), no spaces, ASCII."""
        return json.dumps(
            [self.slot_key, self.audience, self.state, self.reason],
            separators=(",", ":"),
            ensure_ascii=True,
        )


def slots_digest(rows: Iterable[DeletedSlotRow]) -> str:
    """SHA-256 (hex) over the rows' encodings (:meth:`DeletedSlotRow.encoded`), sorted as
    strings and joined with ``\\n``: what a ``retention.deleted`` entry keeps, so anyone
    holding a copy of the rows can show they are the ones deleted."""
    lines = sorted(row.encoded() for row in rows)
    return hashlib.sha256("\n".join(lines).encode("ascii")).hexdigest()


# -- deleting -------------------------------------------------------------------------


def delete_runs(session: Session, run_ids: Sequence[int]) -> dict[str, int]:
    """Delete ``run_ids`` and every row that refers to them, children first; return
    how many rows went from each table (unchecked: the retention pass decides what goes)."""
    counts: Counter[str] = Counter()

    def gone(name: str, statement: Any) -> None:
        counts[name] += int(getattr(session.execute(statement), "rowcount", 0) or 0)

    for chunk in chunks(run_ids):
        deliveries = sa.select(Delivery.id).where(Delivery.run_id.in_(chunk))
        links = sa.select(SignedLink.id).where(
            sa.or_(SignedLink.run_id.in_(chunk), SignedLink.delivery_id.in_(deliveries))
        )
        gone(
            "link_opens",
            sa.delete(LinkOpen).where(
                sa.or_(
                    LinkOpen.run_id.in_(chunk),
                    LinkOpen.link_id.in_(links),
                    LinkOpen.delivery_id.in_(deliveries),
                )
            ),
        )
        gone("signed_links", sa.delete(SignedLink).where(SignedLink.id.in_(links)))
        gone(
            "delivery_attempts",
            sa.delete(DeliveryAttempt).where(DeliveryAttempt.delivery_id.in_(deliveries)),
        )
        gone("deliveries", sa.delete(Delivery).where(Delivery.run_id.in_(chunk)))
        gone("renditions", sa.delete(Rendition).where(Rendition.run_id.in_(chunk)))
        gone("delivery_outbox", sa.delete(OutboxRow).where(OutboxRow.run_id.in_(chunk)))
        gone("warehouse_usage", sa.delete(WarehouseUsage).where(WarehouseUsage.run_id.in_(chunk)))
        gone("run_attempts", sa.delete(RunAttempt).where(RunAttempt.run_id.in_(chunk)))
        gone("run_cancel_requests", sa.delete(CancelRequest).where(CancelRequest.run_id.in_(chunk)))
        gone("runs", sa.delete(Run).where(Run.id.in_(chunk)))
    return dict(counts)
