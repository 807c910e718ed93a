"""The delivery ledger: one row per (run, channel, recipient), sent effectively once.

States: ``PENDING → SENDING → SENT | FAILED | SUPPRESSED`` (with a reason). A
delivery worker:

1. **claims** due PENDING rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL) whose
   renditions are no longer pending: ``SENDING``, ``attempt + 1``, a lease, and an
   attempt row — committed before anything is sent;
2. **decides**, per row, whether to send at all — SUPPRESSED ``unsubscribed`` (the
   recipient opted out), ``superseded`` (this recipient already received a newer slot
   of the same definition), ``stale`` (past ``staleness.after`` with action
   ``suppress``; with action ``banner`` it is sent with the *late* renditions, which
   carry the banner), ``no_results`` (``only_if: results`` and no marked table has a
   row), ``unchanged`` (``only_if: changed`` and the files are byte-identical to the
   last ones this recipient received); FAILED ``render_failed`` when a rendition it
   needs failed;
3. **sends** through the channel, and records the answer at once, fenced by attempt
   and lease owner: SENT with the channel's receipt; on a transient error PENDING
   again after the channel's backoff (exponential, full jitter, at least the peer's
   ``Retry-After``), FAILED once the channel's ``max_attempts`` are spent; FAILED at
   once on a permanent error. Each row is tried on its own, so a failure for one
   recipient never re-sends to the others.

**Unknown outcomes.** When a send times out after the request went out
(:class:`~nbcast.errors.OutcomeUnknownError`), or a worker died between sending and
recording (its SENDING row's lease expires and :meth:`Ledger.reap` returns it), the
row is flagged ``outcome_unknown``. Before sending it again the ledger asks the
channel to :meth:`~nbcast.delivery.channels.base.Channel.check`: Slack looks in the
channel's history for the message's key, and if it is there the row is SENT with the
earlier receipt (attempt outcome ``FOUND``) and nothing is posted twice. A channel that
cannot check (SMTP) sends again and the row is marked ``possible_duplicate``: at most
one extra copy, and it is on the record.

The claim commits durably; the records of each send commit asynchronously on
PostgreSQL (``synchronous_commit = off``): a server crash may lose the last moments'
records, which leaves those rows SENDING — exactly the unknown-outcome case above,
handled the same way.
"""

from __future__ import annotations

import hashlib
import json
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.dialects import postgresql
from sqlalchemy.orm import Session

from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock
from nbcast.db import Database, UTCDateTime, insert_ignore
from nbcast.definitions.spec import ReportSpec, StalenessAction
from nbcast.delivery.channels.base import Attachment, Channel, Message, Receipt
from nbcast.delivery.intake import spec_of
from nbcast.delivery.links import create_link
from nbcast.delivery.models import (
    Delivery,
    DeliveryAttempt,
    DeliveryState,
    Rendition,
    Unsubscription,
)
from nbcast.delivery.rendering import report_infos
from nbcast.delivery.report import ReportInfo
from nbcast.delivery.signing import Signer
from nbcast.delivery.unsubscribe import unsubscribe_token, unsubscribe_url
from nbcast.errors import (
    ChannelError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.executor.models import Run
from nbcast.faults import crash_point
from nbcast.retry import backoff

__all__ = ["DeliveryStats", "Ledger", "retry_failed"]

_DELIVERIES = cast(sa.Table, Delivery.__table__)
# One answer recorded in one round trip on PostgreSQL: the fenced ledger row and its
# attempt; set_config (evaluated once, in FROM) makes this commit asynchronous.
_RECORD = sa.text(
    "WITH d AS (UPDATE deliveries SET state = :state, reason = :reason, "
    "not_before = COALESCE(:not_before, not_before), receipt = COALESCE(:receipt, receipt), "
    "error = :error, sent_at = COALESCE(:sent_at, sent_at), "
    "content_sha256 = COALESCE(:content, content_sha256), outcome_unknown = :unknown, "
    "possible_duplicate = possible_duplicate OR :duplicate, lease_owner = NULL, "
    "lease_expires_at = NULL, updated_at = :now "
    "FROM (SELECT set_config('synchronous_commit', 'off', true)) AS async "
    "WHERE id = :id AND attempt = :attempt AND lease_owner = :owner AND state = 'SENDING' "
    "RETURNING id), "
    "a AS (UPDATE delivery_attempts SET ended_at = :now, outcome = :outcome, detail = :detail "
    "WHERE delivery_id IN (SELECT id FROM d) AND attempt = :attempt) "
    "SELECT count(*) FROM d"
).bindparams(
    sa.bindparam("now", type_=UTCDateTime()),
    sa.bindparam("not_before", type_=UTCDateTime()),
    sa.bindparam("sent_at", type_=UTCDateTime()),
    sa.bindparam("receipt", type_=postgresql.JSONB(none_as_null=True)),
    sa.bindparam("error", type_=postgresql.JSONB(none_as_null=True)),
    sa.bindparam("detail", type_=postgresql.JSONB(none_as_null=True)),
)
_ATTEMPTS = cast(sa.Table, DeliveryAttempt.__table__)


@dataclass
class DeliveryStats:
    """What the ledger did since it was made."""

    sent: int = 0
    found: int = 0
    retried: int = 0
    failed: int = 0
    suppressed: int = 0
    duplicates: int = 0
    reasons: dict[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class _Claimed:
    id: int
    tenant_id: int
    run_id: int
    definition_id: int
    channel: str
    recipient: str
    formats: list[str]
    only_if: str | None
    fire_at: datetime
    attempt: int
    retry_base: int
    outcome_unknown: bool
    version_id: int
    notebook_sha: str | None


@dataclass
class _Facts:
    """What the verdicts of one claimed batch need, read in three queries."""

    unsubscribed: set[tuple[int, str, str, str]]
    newest_sent: dict[tuple[int, str, str], datetime]
    renditions: dict[int, list[Rendition]]

    @classmethod
    def load(cls, session: Session, claimed: list[_Claimed]) -> _Facts:
        recipients = sorted({r.recipient for r in claimed})
        unsubscribed = {
            (t, scope, c, r)
            for t, scope, c, r in session.execute(
                sa.select(
                    Unsubscription.tenant_id,
                    Unsubscription.scope,
                    Unsubscription.channel,
                    Unsubscription.recipient,
                ).where(Unsubscription.recipient.in_(recipients))
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
                .where(
                    Delivery.definition_id.in_(sorted({r.definition_id for r in claimed})),
                    Delivery.recipient.in_(recipients),
                    Delivery.state == DeliveryState.SENT.value,
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
class _Verdict:
    """What to do with one claimed row."""

    state: DeliveryState | None = None
    reason: str | None = None
    message: Message | None = None
    content_sha256: str | None = None
    variant: str = ""


class Ledger:
    """Claims, decides, sends and records deliveries (module docstring)."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        store: ArtifactStore,
        channels: Mapping[str, Channel],
        signer: Signer,
        *,
        owner: str | None = None,
        base_url: str = "http://127.0.0.1:8888",
        lease_seconds: float = 120.0,
        link_ttl: timedelta = timedelta(days=7),
    ) -> None:
        self.db = db
        self.clock = clock
        self.store = store
        self.channels = dict(channels)
        self.signer = signer
        self.owner = owner or f"delivery-{socket.gethostname()}-{id(self):x}"
        self.base_url = base_url
        self.lease = timedelta(seconds=lease_seconds)
        self.link_ttl = link_ttl
        self.stats = DeliveryStats()
        self._specs: dict[int, ReportSpec] = {}
        self._digests: dict[str, str] = {}
        self._conn: sa.Connection | None = None

    # -- claiming ---------------------------------------------------------------

    def claim(self, limit: int = 50) -> list[_Claimed]:
        """Lease up to ``limit`` due PENDING rows whose renditions are settled."""
        now = self.clock.now()
        pending_render = sa.exists().where(
            Rendition.run_id == Delivery.run_id, Rendition.state == "PENDING"
        )
        query = (
            sa.select(Delivery.id)
            .where(Delivery.state == "PENDING", Delivery.not_before <= now, ~pending_render)
            .order_by(Delivery.not_before, Delivery.id)
            .limit(limit)
        )
        if self.db.dialect == "postgresql":
            query = query.with_for_update(skip_locked=True, of=Delivery)
        with self.db.session() as session:
            ids = list(session.scalars(query))
            if not ids:
                return []
            session.execute(
                sa.update(_DELIVERIES)
                .where(Delivery.id.in_(ids))
                .values(
                    state=DeliveryState.SENDING.value,
                    attempt=Delivery.attempt + 1,
                    lease_owner=self.owner,
                    lease_expires_at=now + self.lease,
                    updated_at=now,
                )
            )
            rows = session.execute(
                sa.select(
                    Delivery.id,
                    Delivery.tenant_id,
                    Delivery.run_id,
                    Delivery.definition_id,
                    Delivery.channel,
                    Delivery.recipient,
                    Delivery.formats,
                    Delivery.only_if,
                    Delivery.fire_at,
                    Delivery.attempt,
                    Delivery.retry_base,
                    Delivery.outcome_unknown,
                    Run.version_id,
                    Run.artifact_sha256.label("notebook_sha"),
                )
                .join(Run, Run.id == Delivery.run_id)
                .where(Delivery.id.in_(ids))
                .order_by(Delivery.not_before, Delivery.id)
            ).all()
            session.execute(
                sa.insert(_ATTEMPTS),
                [
                    {
                        "tenant_id": r.tenant_id,
                        "delivery_id": r.id,
                        "attempt": r.attempt,
                        "worker": self.owner,
                        "started_at": now,
                    }
                    for r in rows
                ],
            )
        return [_Claimed(**r._mapping) for r in rows]

    # -- one pass ---------------------------------------------------------------

    def deliver_due(self, limit: int = 50) -> int:
        """Claim, decide, send and record up to ``limit`` deliveries; return how many."""
        claimed = self.claim(limit)
        if not claimed:
            return 0
        verdicts = self._decide(claimed)
        with self.db.engine.connect() as conn:  # one connection records the whole batch
            self._conn = conn
            try:
                for row in claimed:
                    verdict = verdicts[row.id]
                    if verdict.state is not None:
                        self._finish(
                            row, verdict.state, verdict.reason, outcome=verdict.state.value
                        )
                    elif verdict.message is None:  # waiting for the late renditions
                        self._release(row)
                    else:
                        self._send(row, verdict)
            finally:
                self._conn = None
        return len(claimed)

    def _decide(self, claimed: list[_Claimed]) -> dict[int, _Verdict]:
        """Verdicts for a claimed batch, from a few queries for the whole batch."""
        now = self.clock.now()
        verdicts: dict[int, _Verdict] = {}
        with self.db.session() as session:
            infos = report_infos(session, sorted({r.run_id for r in claimed}))
            facts = _Facts.load(session, claimed)
            for row in claimed:
                verdicts[row.id] = self._verdict(session, row, infos[row.run_id], facts, now)
        return verdicts

    def _verdict(
        self, session: Session, row: _Claimed, report: ReportInfo, facts: _Facts, now: datetime
    ) -> _Verdict:
        spec = spec_of(session, row.version_id, self._specs)
        if row.channel not in self.channels:
            return _Verdict(DeliveryState.FAILED, "no_channel")
        opted_out = {
            (row.tenant_id, scope, row.channel, row.recipient) for scope in ("*", report.definition)
        }
        if opted_out & facts.unsubscribed:
            return _Verdict(DeliveryState.SUPPRESSED, "unsubscribed")
        newest = facts.newest_sent.get((row.definition_id, row.channel, row.recipient))
        if newest is not None and newest > row.fire_at:
            return _Verdict(DeliveryState.SUPPRESSED, "superseded")
        variant = ""
        schedule = spec.schedule
        if (
            schedule
            and schedule.staleness_after is not None
            and now - row.fire_at > schedule.staleness_after
        ):
            if schedule.staleness_action is StalenessAction.suppress:
                return _Verdict(DeliveryState.SUPPRESSED, "stale")
            variant = "late"
        renditions = self._renditions(session, row, variant, facts.renditions.get(row.run_id, []))
        if renditions is None:  # late renditions asked for: deliver once they are ready
            return _Verdict(variant=variant)
        if any(r.state == "FAILED" for r in renditions.values()):
            return _Verdict(DeliveryState.FAILED, "render_failed")
        if row.only_if == "results" and not self._has_results(row):
            return _Verdict(DeliveryState.SUPPRESSED, "no_results")
        digest = self._content_digest(row.notebook_sha)
        if row.only_if == "changed" and self._last_sent_digest(session, row) == digest:
            return _Verdict(DeliveryState.SUPPRESSED, "unchanged")
        message = self._message(session, row, report, renditions, now)
        return _Verdict(message=message, content_sha256=digest, variant=variant)

    def _last_sent_digest(self, session: Session, row: _Claimed) -> str | None:
        return session.scalar(
            sa.select(Delivery.content_sha256)
            .where(
                Delivery.definition_id == row.definition_id,
                Delivery.channel == row.channel,
                Delivery.recipient == row.recipient,
                Delivery.state == DeliveryState.SENT.value,
                Delivery.id != row.id,
            )
            .order_by(Delivery.fire_at.desc(), Delivery.id.desc())
            .limit(1)
        )

    def _renditions(
        self, session: Session, row: _Claimed, variant: str, rows: list[Rendition]
    ) -> dict[str, Rendition] | None:
        """The renditions this delivery sends (plus the HTML body of an email), by
        format; for a late delivery the *late* ones, or None after asking for them."""
        wanted = set(row.formats) | ({"html"} if row.channel == "email" else set())
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
                        "state": "PENDING",
                        "attempt": 0,
                        "created_at": now,
                    }
                    for fmt in missing
                ],
                self.db.dialect,
            )
        )
        return None

    def _content_digest(self, notebook_sha: str | None) -> str | None:
        """What ``only_if: changed`` compares: a digest of what the report shows — its
        cells' sources and outputs — and not of the rendered files, whose header
        names the run and its time and so differs for every run."""
        if notebook_sha is None:
            return None
        cached = self._digests.get(notebook_sha)
        if cached is None:
            notebook = json.loads(self.store.get(notebook_sha))
            shown = [
                [cell.get("source"), [_shown(o) for o in cell.get("outputs", [])]]
                for cell in notebook.get("cells", [])
                if "injected-parameters" not in cell.get("metadata", {}).get("tags", [])
            ]
            cached = hashlib.sha256(json.dumps(shown, sort_keys=True).encode()).hexdigest()
            if len(self._digests) > 10_000:
                self._digests.clear()
            self._digests[notebook_sha] = cached
        return cached

    def _has_results(self, row: _Claimed) -> bool:
        if row.notebook_sha is None:
            return False
        import nbformat

        from nbcast.delivery.tables import has_rows

        notebook = nbformat.reads(self.store.get(row.notebook_sha).decode(), as_version=4)
        return has_rows(notebook)

    def _message(
        self,
        session: Session,
        row: _Claimed,
        report: ReportInfo,
        renditions: dict[str, Rendition],
        now: datetime,
    ) -> Message:
        attachments: list[Attachment] = []
        html_body = ""
        for fmt in sorted(renditions):
            rendition = renditions[fmt]
            assert rendition.sha256 is not None
            if fmt == "html" and row.channel == "email":
                html_body = self.store.get(rendition.sha256).decode()
                if "html" not in row.formats:
                    continue
            if fmt in row.formats and row.channel in ("email", "slack"):
                attachments.append(
                    Attachment(
                        filename=rendition.filename or f"{report.stem}.{fmt}",
                        media_type=rendition.media_type or "application/octet-stream",
                        content=self.store.get(rendition.sha256),
                    )
                )
        links: list[str] = []
        if row.channel in ("link", "webhook"):
            for fmt in sorted(row.formats):
                rendition = renditions[fmt]
                assert rendition.sha256 is not None
                links.append(
                    create_link(
                        session,
                        self.signer,
                        tenant_id=row.tenant_id,
                        run_id=row.run_id,
                        delivery_id=row.id,
                        recipient=row.recipient,
                        sha256=rendition.sha256,
                        filename=rendition.filename or f"{report.stem}.{fmt}",
                        media_type=rendition.media_type or "application/octet-stream",
                        now=now,
                        ttl=self.link_ttl,
                        base_url=self.base_url,
                    ).url
                )
        unsubscribe = None
        if row.channel == "email":
            token = unsubscribe_token(
                self.signer,
                tenant_id=row.tenant_id,
                scope=report.definition,
                channel=row.channel,
                recipient=row.recipient,
            )
            unsubscribe = unsubscribe_url(self.base_url, token)
        late = " (late)" if report.late_by else ""
        summary = f"{report.title}{late}: version {report.version}, run {report.run_id}"
        return Message(
            key=f"nbcast-d{row.id}-r{row.run_id}",
            delivery_id=row.id,
            attempt=row.attempt,
            recipient=row.recipient,
            report=report,
            subject=f"{report.title}{late}",
            html=html_body or f"<p>{summary}</p>",
            text=summary,
            attachments=tuple(attachments),
            unsubscribe_url=unsubscribe,
            links=tuple(links),
        )

    # -- sending and recording ----------------------------------------------------

    def _send(self, row: _Claimed, verdict: _Verdict) -> None:
        assert verdict.message is not None
        channel = self.channels[row.channel]
        duplicate = False
        if row.outcome_unknown:
            try:
                found = channel.check(verdict.message)
            except ChannelError as exc:  # cannot look right now: look again later
                self._retry(row, channel, exc, unknown=True)
                return
            if found is not None:
                self._sent(row, found, verdict, outcome="FOUND", duplicate=False)
                self.stats.found += 1
                return
            duplicate = not channel.verifiable
        try:
            receipt = channel.send(verdict.message)
        except OutcomeUnknownError as exc:
            self._retry(row, channel, exc, unknown=True)
            return
        except TransientChannelError as exc:
            self._retry(row, channel, exc, unknown=False, retry_after=exc.retry_after)
            return
        except PermanentChannelError as exc:
            self._finish(row, DeliveryState.FAILED, "refused", outcome="FAILED", error=_error(exc))
            return
        except ChannelError as exc:
            self._retry(row, channel, exc, unknown=False)
            return
        crash_point("after_send")
        self._sent(row, receipt, verdict, outcome="SENT", duplicate=duplicate)

    def _fence(self, row: _Claimed) -> Any:
        return sa.and_(
            Delivery.id == row.id,
            Delivery.attempt == row.attempt,
            Delivery.lease_owner == self.owner,
            Delivery.state == DeliveryState.SENDING.value,
        )

    def _write(self, row: _Claimed, values: dict[str, Any], attempt: dict[str, Any]) -> bool:
        """Record one answer, fenced by attempt and lease owner; False if the lease was
        lost. On PostgreSQL one statement updates the row and its attempt and the
        commit does not wait for the WAL flush (module docstring)."""
        conn = self._conn
        if conn is None:
            with self.db.engine.connect() as own:
                self._conn = own
                try:
                    return self._write(row, values, attempt)
                finally:
                    self._conn = None
        now = self.clock.now()
        with conn.begin():
            if self.db.dialect == "postgresql":
                return bool(
                    conn.execute(
                        _RECORD,
                        {
                            "id": row.id,
                            "attempt": row.attempt,
                            "owner": self.owner,
                            "now": now,
                            "state": values["state"],
                            "reason": values.get("reason"),
                            "not_before": values.get("not_before"),
                            "receipt": values.get("receipt"),
                            "error": values.get("error"),
                            "sent_at": values.get("sent_at"),
                            "content": values.get("content_sha256"),
                            "unknown": bool(values.get("outcome_unknown", False)),
                            "duplicate": bool(values.get("possible_duplicate", False)),
                            "outcome": attempt["outcome"],
                            "detail": attempt.get("detail"),
                        },
                    ).scalar()
                )
            result = conn.execute(
                sa.update(_DELIVERIES)
                .where(self._fence(row))
                .values(lease_owner=None, lease_expires_at=None, updated_at=now, **values)
            )
            if not getattr(result, "rowcount", 0):
                return False  # the lease was lost: another worker has the row now
            conn.execute(
                sa.update(_ATTEMPTS)
                .where(
                    DeliveryAttempt.delivery_id == row.id, DeliveryAttempt.attempt == row.attempt
                )
                .values(ended_at=now, **attempt)
            )
        return True

    def _sent(
        self, row: _Claimed, receipt: Receipt, verdict: _Verdict, *, outcome: str, duplicate: bool
    ) -> None:
        values: dict[str, Any] = {
            "state": DeliveryState.SENT.value,
            "reason": None,
            "receipt": receipt.detail,
            "sent_at": self.clock.now(),
            "content_sha256": verdict.content_sha256,
            "outcome_unknown": False,
            "error": None,
        }
        if duplicate:
            values["possible_duplicate"] = True
            self.stats.duplicates += 1
        detail = dict(receipt.detail)
        if verdict.variant:
            detail["variant"] = verdict.variant
        if self._write(row, values, {"outcome": outcome, "detail": detail}):
            self.stats.sent += 1

    def _retry(
        self,
        row: _Claimed,
        channel: Channel,
        exc: ChannelError,
        *,
        unknown: bool,
        retry_after: float | None = None,
    ) -> None:
        error = _error(exc)
        if row.attempt - row.retry_base >= channel.max_attempts:
            reason = "outcome_unknown" if unknown else "max_attempts"
            self._finish(
                row, DeliveryState.FAILED, reason, outcome="FAILED", error=error, unknown=unknown
            )
            return
        delay = backoff(
            row.attempt - row.retry_base, base=channel.backoff_base, cap=channel.backoff_cap
        )
        if retry_after is not None:
            delay = max(delay, timedelta(seconds=retry_after))
        values = {
            "state": DeliveryState.PENDING.value,
            "reason": "retry",
            "not_before": self.clock.now() + delay,
            "error": error,
            "outcome_unknown": unknown,
        }
        if self._write(
            row, values, {"outcome": "UNKNOWN" if unknown else "RETRY", "detail": error}
        ):
            self.stats.retried += 1

    def _finish(
        self,
        row: _Claimed,
        state: DeliveryState,
        reason: str | None,
        *,
        outcome: str,
        error: dict[str, Any] | None = None,
        unknown: bool = False,
    ) -> None:
        values = {
            "state": state.value,
            "reason": reason,
            "error": error,
            "outcome_unknown": unknown,
        }
        if self._write(row, values, {"outcome": outcome, "detail": error or {"reason": reason}}):
            if state is DeliveryState.FAILED:
                self.stats.failed += 1
            else:
                self.stats.suppressed += 1
            if reason:
                self.stats.reasons[reason] = self.stats.reasons.get(reason, 0) + 1

    def _release(self, row: _Claimed) -> None:
        """Back to PENDING without spending the attempt (late renditions are coming)."""
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            conn.execute(
                sa.delete(_ATTEMPTS).where(
                    DeliveryAttempt.delivery_id == row.id, DeliveryAttempt.attempt == row.attempt
                )
            )
            conn.execute(
                sa.update(_DELIVERIES)
                .where(self._fence(row))
                .values(
                    state=DeliveryState.PENDING.value,
                    attempt=Delivery.attempt - 1,
                    lease_owner=None,
                    lease_expires_at=None,
                    not_before=now,
                    updated_at=now,
                )
            )

    # -- housekeeping ---------------------------------------------------------------

    def reap(self) -> int:
        """SENDING rows whose lease expired (their worker died, perhaps after sending)
        go back to PENDING flagged ``outcome_unknown``; return how many."""
        now = self.clock.now()
        with self.db.session() as session:
            query = (
                sa.select(Delivery.id, Delivery.attempt)
                .where(
                    Delivery.state == DeliveryState.SENDING.value, Delivery.lease_expires_at < now
                )
                .limit(500)
            )
            if self.db.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            expired = session.execute(query).all()
            for delivery_id, attempt in expired:
                session.execute(
                    sa.update(_DELIVERIES)
                    .where(
                        Delivery.id == delivery_id,
                        Delivery.attempt == attempt,
                        Delivery.state == DeliveryState.SENDING.value,
                    )
                    .values(
                        state=DeliveryState.PENDING.value,
                        reason="lease_expired",
                        outcome_unknown=True,
                        lease_owner=None,
                        lease_expires_at=None,
                        not_before=now,
                        updated_at=now,
                    )
                )
                session.execute(
                    sa.update(_ATTEMPTS)
                    .where(
                        DeliveryAttempt.delivery_id == delivery_id,
                        DeliveryAttempt.attempt == attempt,
                        DeliveryAttempt.outcome.is_(None),
                    )
                    .values(outcome="UNKNOWN", ended_at=now, detail={"reason": "lease_expired"})
                )
        return len(expired)


def retry_failed(session: Session, run_id: int, now: datetime) -> int:
    """``nbcast deliver --retry-failed RUN``: the run's FAILED deliveries go back to
    PENDING with a fresh budget of attempts; SENT ones are never touched. Returns how
    many."""
    result = session.execute(
        sa.update(_DELIVERIES)
        .where(Delivery.run_id == run_id, Delivery.state == DeliveryState.FAILED.value)
        .values(
            state=DeliveryState.PENDING.value,
            reason="retry_requested",
            retry_base=Delivery.attempt,
            not_before=now,
            updated_at=now,
        )
    )
    return int(getattr(result, "rowcount", 0) or 0)


def _shown(output: dict[str, Any]) -> Any:
    """An output without what changes on every execution (counts, timings)."""
    return {k: v for k, v in output.items() if k not in ("execution_count", "metadata")}


def _error(exc: Exception) -> dict[str, Any]:
    error: dict[str, Any] = {"error": type(exc).__name__, "message": str(exc)[:2000]}
    retry_after = getattr(exc, "retry_after", None)
    if retry_after is not None:
        error["retry_after"] = retry_after
    return error
