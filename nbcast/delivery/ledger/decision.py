"""The decision: whether, and what, a claimed row sends.

In this order, for each row of a claimed batch (from a few queries for the whole
batch, :class:`Facts`):

- FAILED ``no_channel`` when its channel is not configured here;
- SUPPRESSED ``unsubscribed`` when the recipient opted out of this report or of
  every report on the channel (compared as the channel normalizes recipients);
- SUPPRESSED ``superseded`` when this recipient already received a newer slot of the
  same definition;
- **staleness**: past ``staleness.after``, SUPPRESSED ``stale`` with action
  ``suppress``; with action ``banner`` the *late* renditions (which carry the banner)
  are sent instead — asked for first, if they do not exist yet (the row is then
  released, unsent, until they are rendered);

  neither applies to the rows of a **backfill** or a **rerun**, and they supersede
  nothing: such a run is asked for on purpose, for a period that has passed, and every
  run reports its own period (:mod:`nbcast.scheduler.period`), so its reports are late
  by design and replace no other — ``nbcast backfill`` of last week sends last week's
  five reports; a **test run** (:mod:`nbcast.scheduler.trial`) is neither either, and
  its copies are never the ``only_if: changed`` baseline of a real recipient;
- FAILED ``render_failed`` when a rendition it needs failed;
- SUPPRESSED ``no_results`` (``only_if: results``) when no marked table has a row;
- SUPPRESSED ``unchanged`` (``only_if: changed``) when the **content digest** — of
  what the report shows, its cells' sources and outputs, not of the rendered files,
  whose header names the run and its time — equals the one of the last report this
  recipient received;
- otherwise: send the composed message (:mod:`nbcast.delivery.ledger.compose`).

A row whose decision raises fails alone (``prepare_failed``); when the batch's
shared queries fail, each row is decided alone.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.definitions.spec import ReportSpec, StalenessAction
from nbcast.delivery.channels.base import Channel, Message
from nbcast.delivery.intake import spec_of
from nbcast.delivery.ledger.answers import error_detail
from nbcast.delivery.ledger.compose import Composer
from nbcast.delivery.ledger.rows import ClaimedDelivery
from nbcast.delivery.models import (
    Delivery,
    DeliveryReason,
    DeliveryState,
    Rendition,
    RenditionState,
    Unsubscription,
)
from nbcast.delivery.rendering import report_infos
from nbcast.delivery.report import ReportInfo
from nbcast.delivery.unsubscribe import ALL_REPORTS, normalized
from nbcast.scheduler.models import DELIBERATE_KINDS, Run, RunKind

__all__ = [
    "DIGEST_CACHE_SIZE",
    "LATE",
    "Decider",
    "Facts",
    "Verdict",
    "content_digest_of",
]

log = logging.getLogger("nbcast.delivery.ledger")

LATE = "late"
"""The rendition variant that carries the staleness banner."""

DIGEST_CACHE_SIZE = 10_000
"""Content digests kept in memory (by notebook sha256) before the cache is emptied."""

ONLY_IF_RESULTS = "results"
ONLY_IF_CHANGED = "changed"


@dataclass
class Facts:
    """What the verdicts of one claimed batch need, read in three queries."""

    unsubscribed: set[tuple[int, str, str, str]]
    """(tenant, scope, channel, normalized recipient) of every matching opt-out."""
    newest_sent: dict[tuple[int, str, str], datetime]
    """(definition, channel, recipient) → the newest slot instant sent to them."""
    renditions: dict[int, list[Rendition]]
    """Each run's renditions."""

    @classmethod
    def load(cls, session: Session, claimed: list[ClaimedDelivery]) -> Facts:
        """The facts about ``claimed``."""
        recipients = sorted({r.recipient for r in claimed})
        opted_out = sorted({normalized(r.channel, r.recipient) for r in claimed})
        unsubscribed = {
            (t, scope, c, r)
            for t, scope, c, r in session.execute(
                sa.select(
                    Unsubscription.tenant_id,
                    Unsubscription.scope,
                    Unsubscription.channel,
                    Unsubscription.recipient,
                ).where(Unsubscription.recipient.in_(opted_out))
            )
        }
        newest = {
            (d, c, r): when
            for d, c, r, when in session.execute(
                sa.select(
                    Delivery.definition_id,
                    Delivery.channel,
                    Delivery.recipient,
                    sa.func.max(Delivery.fire_at),
                )
                .join(Run, Run.id == Delivery.run_id)
                .where(
                    Delivery.definition_id.in_(sorted({r.definition_id for r in claimed})),
                    Delivery.recipient.in_(recipients),
                    Delivery.state == DeliveryState.SENT.value,
                    Run.kind.not_in(sorted(DELIBERATE_KINDS)),
                )
                .group_by(Delivery.definition_id, Delivery.channel, Delivery.recipient)
            )
        }
        renditions: dict[int, list[Rendition]] = {}
        for rendition in session.scalars(
            sa.select(Rendition).where(Rendition.run_id.in_(sorted({r.run_id for r in claimed})))
        ):
            renditions.setdefault(rendition.run_id, []).append(rendition)
        return cls(unsubscribed, newest, renditions)


@dataclass
class Verdict:
    """What to do with one claimed row: end it (``state`` and ``reason``), send
    ``message``, or — neither — release it until its late renditions are ready."""

    state: DeliveryState | None = None
    reason: DeliveryReason | None = None
    message: Message | None = None
    content_sha256: str | None = None
    variant: str = ""
    error: dict[str, Any] | None = None


def content_digest_of(notebook: dict[str, Any]) -> str:
    """The digest ``only_if: changed`` compares (module docstring): the cells' sources
    and outputs, without what changes on every execution (counts, timings, metadata)
    and without the parameters papermill injected."""
    shown = [
        [cell.get("source"), [_shown(o) for o in cell.get("outputs", [])]]
        for cell in notebook.get("cells", [])
        if "injected-parameters" not in cell.get("metadata", {}).get("tags", [])
    ]
    return hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()


def _shown(output: dict[str, Any]) -> Any:
    """An output without what changes on every execution (counts, timings)."""
    return {k: v for k, v in output.items() if k not in ("execution_count", "metadata")}


class Decider:
    """Decides claimed rows (module docstring)."""

    def __init__(self, db: Database, clock: Clock, store: ArtifactStore, composer: Composer):
        self.db = db
        self.clock = clock
        self.store = store
        self.composer = composer
        self._specs: dict[int, ReportSpec] = {}
        self._digests: dict[str, str] = {}

    def decide_each(
        self, claimed: list[ClaimedDelivery], channels: Mapping[str, Channel]
    ) -> dict[int, Verdict]:
        """Verdicts for a batch; when the batch's queries fail, each row's alone, so
        a row that breaks them fails by itself (``prepare_failed``)."""
        try:
            return self.decide(claimed, channels)
        except Exception:
            log.exception("deciding %d deliveries failed; deciding each alone", len(claimed))
        verdicts: dict[int, Verdict] = {}
        for row in claimed:
            try:
                verdicts.update(self.decide([row], channels))
            except Exception as exc:
                log.exception("delivery %d: could not prepare it", row.id)
                verdicts[row.id] = _prepare_failed(exc)
        return verdicts

    def decide(
        self, claimed: list[ClaimedDelivery], channels: Mapping[str, Channel]
    ) -> dict[int, Verdict]:
        """Verdicts for a claimed batch, from a few queries for the whole batch."""
        now = self.clock.now()
        verdicts: dict[int, Verdict] = {}
        with self.db.session() as session:
            infos = report_infos(session, sorted({r.run_id for r in claimed}), self._specs)
            facts = Facts.load(session, claimed)
            for row in claimed:
                try:
                    with session.begin_nested():
                        verdict = self.verdict(
                            session, row, infos[row.run_id], facts, now, channels
                        )
                except Exception as exc:  # one bad row must not hold up its batch
                    log.exception("delivery %d: could not prepare it", row.id)
                    verdict = _prepare_failed(exc)
                verdicts[row.id] = verdict
        return verdicts

    def verdict(
        self,
        session: Session,
        row: ClaimedDelivery,
        report: ReportInfo,
        facts: Facts,
        now: datetime,
        channels: Mapping[str, Channel],
    ) -> Verdict:
        """The verdict on one row (module docstring, in its order)."""
        spec = spec_of(session, row.version_id, self._specs)
        channel = channels.get(row.channel)
        if channel is None:
            return Verdict(DeliveryState.FAILED, DeliveryReason.no_channel)
        who = normalized(row.channel, row.recipient)
        scopes = (ALL_REPORTS, report.definition)
        if {(row.tenant_id, scope, row.channel, who) for scope in scopes} & facts.unsubscribed:
            return Verdict(DeliveryState.SUPPRESSED, DeliveryReason.unsubscribed)
        deliberate = row.run_kind in DELIBERATE_KINDS
        newest = facts.newest_sent.get((row.definition_id, row.channel, row.recipient))
        if not deliberate and newest is not None and newest > row.fire_at:
            return Verdict(DeliveryState.SUPPRESSED, DeliveryReason.superseded)
        variant = ""
        schedule = spec.schedule
        if (
            not deliberate
            and schedule
            and schedule.staleness_after is not None
            and now - row.fire_at > schedule.staleness_after
        ):
            if schedule.staleness_action is StalenessAction.suppress:
                return Verdict(DeliveryState.SUPPRESSED, DeliveryReason.stale)
            variant = LATE
        wanted = Composer.wanted_formats(row, channel)
        renditions = self.renditions(session, row, wanted, variant, facts.renditions)
        if renditions is None:  # late renditions asked for: deliver once they are ready
            return Verdict(variant=variant)
        if any(r.state == RenditionState.FAILED for r in renditions.values()):
            return Verdict(DeliveryState.FAILED, DeliveryReason.render_failed)
        if row.only_if == ONLY_IF_RESULTS and not self.has_results(row):
            return Verdict(DeliveryState.SUPPRESSED, DeliveryReason.no_results)
        try:
            digest = self.content_digest(row.notebook_sha)
        except (KeyError, OSError):  # only a conditional send needs the notebook itself
            if row.only_if == ONLY_IF_CHANGED:
                raise
            digest = None
        if row.only_if == ONLY_IF_CHANGED and self.last_sent_digest(session, row) == digest:
            return Verdict(DeliveryState.SUPPRESSED, DeliveryReason.unchanged)
        if variant == LATE:  # the subject and summary say so too, not just the files
            report = report.late(now)
        message = self.composer.message(session, row, channel, report, renditions, now)
        return Verdict(message=message, content_sha256=digest, variant=variant)

    def last_sent_digest(self, session: Session, row: ClaimedDelivery) -> str | None:
        """The content digest of the last report sent to this recipient of the
        definition on this channel (a test run's copy is no baseline)."""
        return session.scalar(
            sa.select(Delivery.content_sha256)
            .outerjoin(Run, Run.id == Delivery.run_id)  # retention may have deleted it
            .where(
                sa.or_(Run.kind.is_(None), Run.kind != RunKind.test.value),
                Delivery.definition_id == row.definition_id,
                Delivery.channel == row.channel,
                Delivery.recipient == row.recipient,
                Delivery.state == DeliveryState.SENT.value,
                Delivery.id != row.id,
            )
            .order_by(Delivery.fire_at.desc(), Delivery.id.desc())
            .limit(1)
        )

    def renditions(
        self,
        session: Session,
        row: ClaimedDelivery,
        wanted: set[str],
        variant: str,
        by_run: dict[int, list[Rendition]],
    ) -> dict[str, Rendition] | None:
        """The ``wanted`` renditions of the row's run, by format; for a late delivery
        the ``variant`` ones, or None after asking for those that do not exist yet."""
        rows = by_run.get(row.run_id, [])
        base = {r.format: r for r in rows if r.variant == "" and r.format in wanted}
        if variant == "":
            return base
        late = {r.format: r for r in rows if r.variant == variant and r.format in base}
        missing = sorted(set(base) - set(late))
        if not missing:
            return late
        now = self.clock.now()
        session.execute(
            insert_ignore(
                Rendition,
                [
                    {
                        "tenant_id": row.tenant_id,
                        "run_id": row.run_id,
                        "format": fmt,
                        "variant": variant,
                        "state": RenditionState.PENDING.value,
                        "attempt": 0,
                        "created_at": now,
                    }
                    for fmt in missing
                ],
                self.db.dialect,
            )
        )
        return None

    def content_digest(self, notebook_sha: str | None) -> str | None:
        """:func:`content_digest_of` the executed notebook ``notebook_sha`` (cached)."""
        if notebook_sha is None:
            return None
        cached = self._digests.get(notebook_sha)
        if cached is None:
            cached = content_digest_of(json.loads(self.store.get(notebook_sha)))
            if len(self._digests) > DIGEST_CACHE_SIZE:
                self._digests.clear()
            self._digests[notebook_sha] = cached
        return cached

    def has_results(self, row: ClaimedDelivery) -> bool:
        """Whether a table the notebook marked has a row (``only_if: results``)."""
        if row.notebook_sha is None:
            return False
        import nbformat

        from nbcast.delivery.tables import has_rows

        notebook = nbformat.reads(self.store.get(row.notebook_sha).decode(), as_version=4)
        return has_rows(notebook)


def _prepare_failed(exc: Exception) -> Verdict:
    return Verdict(DeliveryState.FAILED, DeliveryReason.prepare_failed, error=error_detail(exc))
