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
   ``Retry-After`` — cut to the channel's ``max_retry_after``, 15 minutes by
   default), FAILED once the channel's ``max_attempts`` are spent; FAILED at once on
   a permanent error. Each row is tried on its own, so a failure for one recipient
   never re-sends to the others.

**Poison rows fail alone.** Anything that raises while one row is decided, sent or
recorded — a channel's bug, an answer that cannot be stored — fails that row alone,
FAILED ``internal_error`` with a bounded message (``outcome_unknown`` if it may have
been sent), and the batch goes on; when the batch's shared queries fail, each row is
decided alone. Answers are written in groups, and one by one when a group fails
(:mod:`nbcast.delivery.answers`), so no bad answer leaves a row SENDING.

**Leases.** A claimed batch's leases are renewed by a heartbeat while it is sent,
and no send starts once this worker's own view of its lease has less than a quarter
of it (at most 30 s) left: a row another worker may have taken over is never sent
by this one too. A row that cannot be prepared (its notebook gone, say) fails alone
(``prepare_failed``), and one whose worker keeps dying on it fails once its attempts
are spent (the reaper, ``outcome_unknown``).

**Unknown outcomes.** When a send times out after the request went out
(:class:`~nbcast.errors.OutcomeUnknownError`), or a worker died between sending and
recording (its SENDING row's lease expires and :meth:`Ledger.reap` returns it), the
row is flagged ``outcome_unknown``. Before sending it again the ledger asks the
channel to :meth:`~nbcast.delivery.channels.base.Channel.check`: Slack looks in the
channel's history for the message's key, and if it is there the row is SENT with the
earlier receipt (attempt outcome ``FOUND``) and nothing is posted twice. A channel that
cannot check (SMTP), or cannot tell this time (a Slack history it may not read), sends
again and the row is marked ``possible_duplicate``: at most one extra copy, and it is
on the record. An exception that is not a channel error counts as an unknown outcome.

The claim commits durably; the records of each send commit asynchronously on
PostgreSQL (``synchronous_commit = off``): a server crash may lose the last moments'
records, which leaves those rows SENDING — exactly the unknown-outcome case above,
handled the same way.
"""

from __future__ import annotations

import functools
import hashlib
import json
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any, cast

import sqlalchemy as sa
from sqlalchemy.orm import Session

from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock
from nbcast.db import Database, insert_ignore
from nbcast.definitions.spec import ReportSpec, StalenessAction
from nbcast.delivery.answers import (
    INTERNAL_ERROR,
    Answer,
    Recorder,
    error_detail,
    record,
    retry_delay,
    write_answers,
)
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
from nbcast.delivery.unsubscribe import normalized, unsubscribe_token, unsubscribe_url
from nbcast.errors import (
    ChannelError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.executor.models import Run
from nbcast.faults import crash_point

__all__ = ["DeliveryStats", "Ledger", "retry_failed"]

log = logging.getLogger(__name__)

_DELIVERIES = cast(sa.Table, Delivery.__table__)
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

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        """Add one to the counter ``name`` (sender and recorder threads call this)."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def count_sent(self) -> None:
        self.count("sent")

    def count_retried(self) -> None:
        self.count("retried")

    def count_ended(self, failed: bool, reason: str | None) -> None:
        self.count("failed" if failed else "suppressed")
        if reason:
            with self._lock:
                self.reasons[reason] = self.reasons.get(reason, 0) + 1


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


class _Heartbeat:
    """Renews a batch's leases every third of the lease until stopped."""

    def __init__(self, ledger: Ledger, ids: list[int]) -> None:
        self._ledger = ledger
        self._ids = ids
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="nbcast-ledger-lease", daemon=True)
        self._thread.start()

    def _loop(self) -> None:
        every = self._ledger.lease.total_seconds() / 3
        while not self._stop.wait(every):
            try:
                self._ledger.renew(self._ids)
            except Exception:  # the database is away: sends stop when the lease runs low
                log.warning("could not renew delivery leases", exc_info=True)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()


@dataclass
class _Facts:
    """What the verdicts of one claimed batch need, read in three queries."""

    unsubscribed: set[tuple[int, str, str, str]]
    newest_sent: dict[tuple[int, str, str], datetime]
    renditions: dict[int, list[Rendition]]

    @classmethod
    def load(cls, session: Session, claimed: list[_Claimed]) -> _Facts:
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
    error: dict[str, Any] | None = None


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
        senders: int = 1,
        make_channels: Callable[[], Mapping[str, Channel]] | None = None,
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
        self._blobs: dict[str, bytes] = {}
        self._recorder: Recorder | None = None
        # Parallel sends: each sender thread has its own channels (its own SMTP
        # session), made by make_channels; without it, sends are sequential.
        self.senders = senders if make_channels is not None else 1
        self._make_channels = make_channels
        self._local = threading.local()
        self._channel_sets: list[Mapping[str, Channel]] = [self.channels]
        self._sets_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._lease_until = datetime.min.replace(tzinfo=UTC)

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
        """Claim, decide, send and record up to ``limit`` deliveries; return how many.

        While the batch is being sent a heartbeat renews its leases (every third of
        the lease), and no send starts once this worker's own view of its lease says
        it may have run out — so a row another worker has taken over is never sent
        by this one too."""
        claimed = self.claim(limit)
        if not claimed:
            return 0
        self._lease_until = self.clock.now() + self.lease
        heartbeat = _Heartbeat(self, [row.id for row in claimed])
        self._recorder = Recorder(self._write_answers, self.db, self._count_internal)
        try:
            verdicts = self._decide_each(claimed)
            sends = []
            for row in claimed:
                verdict = verdicts[row.id]
                if verdict.state is not None:
                    finish = functools.partial(
                        self._finish,
                        row,
                        verdict.state,
                        verdict.reason,
                        outcome=verdict.state.value,
                        error=verdict.error,
                    )
                    self._guarded(row, finish)
                elif verdict.message is None:  # waiting for the late renditions
                    self._guarded(row, functools.partial(self._release, row))
                else:
                    sends.append((row, functools.partial(self._send, row, verdict)))
            if self.senders > 1 and len(sends) > 1:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(self.senders, thread_name_prefix="nbcast-send")
                futures = [self._pool.submit(self._guarded, row, send) for row, send in sends]
                wait(futures)  # every sender is done before the recorder closes
                for future in futures:
                    future.result()
            else:
                for row, send in sends:
                    self._guarded(row, send)
        finally:
            heartbeat.stop()
            recorder, self._recorder = self._recorder, None
            recorder.close()  # every answer of the batch is written before returning
        return len(claimed)

    def renew(self, ids: list[int]) -> None:
        """Extend the leases of this worker's SENDING rows among ``ids``."""
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            conn.execute(
                sa.update(_DELIVERIES)
                .where(
                    Delivery.id.in_(ids),
                    Delivery.lease_owner == self.owner,
                    Delivery.state == DeliveryState.SENDING.value,
                )
                .values(lease_expires_at=now + self.lease)
            )
        self._lease_until = now + self.lease

    def _lease_holds(self) -> bool:
        """Whether a send may start: the lease has a safe margin left, as far as this
        worker knows (its heartbeat renews it)."""
        margin = min(self.lease / 4, timedelta(seconds=30))
        return self.clock.now() < self._lease_until - margin

    def _channels_here(self) -> Mapping[str, Channel]:
        """This thread's channels: the ledger's own on the calling thread, a set of
        its own (``make_channels``) on each sender thread."""
        if threading.current_thread().name.startswith("nbcast-send") and self._make_channels:
            mine: Mapping[str, Channel] | None = getattr(self._local, "channels", None)
            if mine is None:
                mine = self._local.channels = self._make_channels()
                with self._sets_lock:
                    self._channel_sets.append(mine)
            return mine
        return self.channels

    def close(self) -> None:
        """Stop the sender threads and close every channel."""
        if self._pool is not None:
            self._pool.shutdown(wait=True)
            self._pool = None
        with self._sets_lock:
            sets, self._channel_sets = self._channel_sets, [self.channels]
        for channels in sets:
            for channel in channels.values():
                channel.close()

    def _decide_each(self, claimed: list[_Claimed]) -> dict[int, _Verdict]:
        """Verdicts for a batch; when the batch's queries fail, each row's alone, so
        a row that breaks them fails by itself (``prepare_failed``)."""
        try:
            return self._decide(claimed)
        except Exception:
            log.exception("deciding %d deliveries failed; deciding each alone", len(claimed))
        verdicts: dict[int, _Verdict] = {}
        for row in claimed:
            try:
                verdicts.update(self._decide([row]))
            except Exception as exc:
                log.exception("delivery %d: could not prepare it", row.id)
                verdicts[row.id] = _Verdict(
                    DeliveryState.FAILED, "prepare_failed", error=error_detail(exc)
                )
        return verdicts

    def _decide(self, claimed: list[_Claimed]) -> dict[int, _Verdict]:
        """Verdicts for a claimed batch, from a few queries for the whole batch."""
        now = self.clock.now()
        verdicts: dict[int, _Verdict] = {}
        with self.db.session() as session:
            infos = report_infos(session, sorted({r.run_id for r in claimed}), self._specs)
            facts = _Facts.load(session, claimed)
            for row in claimed:
                try:
                    with session.begin_nested():
                        verdict = self._verdict(session, row, infos[row.run_id], facts, now)
                except Exception as exc:  # one bad row must not hold up its batch
                    log.exception("delivery %d: could not prepare it", row.id)
                    verdict = _Verdict(
                        DeliveryState.FAILED, "prepare_failed", error=error_detail(exc)
                    )
                verdicts[row.id] = verdict
        return verdicts

    def _verdict(
        self, session: Session, row: _Claimed, report: ReportInfo, facts: _Facts, now: datetime
    ) -> _Verdict:
        spec = spec_of(session, row.version_id, self._specs)
        if row.channel not in self.channels:
            return _Verdict(DeliveryState.FAILED, "no_channel")
        who = normalized(row.channel, row.recipient)
        opted_out = {(row.tenant_id, scope, row.channel, who) for scope in ("*", report.definition)}
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
        try:
            digest = self._content_digest(row.notebook_sha)
        except (KeyError, OSError):  # only a conditional send needs the notebook itself
            if row.only_if == "changed":
                raise
            digest = None
        if row.only_if == "changed" and self._last_sent_digest(session, row) == digest:
            return _Verdict(DeliveryState.SUPPRESSED, "unchanged")
        if variant == "late":  # the subject and summary say so too, not just the files
            report = report.late(now)
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

    def _blob(self, sha256: str) -> bytes:
        """An artifact's bytes; the last few are kept, since a run's files go to every
        recipient of the batch."""
        with self._sets_lock:
            data = self._blobs.get(sha256)
        if data is None:
            data = self.store.get(sha256)
            with self._sets_lock:
                if len(self._blobs) >= 16:
                    self._blobs.pop(next(iter(self._blobs)))
                self._blobs[sha256] = data
        return data

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
                html_body = self._blob(rendition.sha256).decode()
                if "html" not in row.formats:
                    continue
            if fmt in row.formats and row.channel in ("email", "slack"):
                attachments.append(
                    Attachment(
                        filename=rendition.filename or f"{report.stem}.{fmt}",
                        media_type=rendition.media_type or "application/octet-stream",
                        content=self._blob(rendition.sha256),
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
        channel = self._channels_here()[row.channel]
        if not self._lease_holds():  # leave it to whoever holds it next; nothing was sent
            self._write(
                row,
                {"state": DeliveryState.PENDING.value, "reason": "lease_low"},
                {"outcome": "RETRY", "detail": {"reason": "lease_low"}},
            )
            return
        duplicate = False
        if row.outcome_unknown:
            try:
                found = channel.check(verdict.message)
            except PermanentChannelError:  # it can never tell: send, and say so
                found, duplicate = None, True
            except ChannelError as exc:  # cannot look right now: look again later
                self._retry(row, channel, exc, unknown=True)
                return
            if found is not None:
                self._sent(row, found, verdict, outcome="FOUND", duplicate=False)
                self.stats.count("found")
                return
            duplicate = duplicate or not channel.verifiable
        try:
            receipt = channel.send(verdict.message)
        except OutcomeUnknownError as exc:
            self._retry(row, channel, exc, unknown=True)
            return
        except TransientChannelError as exc:
            self._retry(row, channel, exc, unknown=False, retry_after=exc.retry_after)
            return
        except PermanentChannelError as exc:
            self._finish(
                row, DeliveryState.FAILED, "refused", outcome="FAILED", error=error_detail(exc)
            )
            return
        except Exception as exc:  # a channel bug: it may have sent, so check before resending
            log.exception("delivery %d: the %s channel failed", row.id, row.channel)
            self._retry(row, channel, exc, unknown=True)
            return
        crash_point("after_send")
        try:
            self._sent(row, receipt, verdict, outcome="SENT", duplicate=duplicate)
        except Exception as exc:  # it went out: say so on the failure
            log.exception("delivery %d: sent, but its receipt could not be recorded", row.id)
            self._internal_failure(row, exc, sent=True)

    def _fence(self, row: _Claimed) -> Any:
        return sa.and_(
            Delivery.id == row.id,
            Delivery.attempt == row.attempt,
            Delivery.lease_owner == self.owner,
            Delivery.state == DeliveryState.SENDING.value,
        )

    def _write(
        self,
        row: _Claimed,
        values: dict[str, Any],
        attempt: dict[str, Any],
        then: Callable[[], None] | None = None,
    ) -> None:
        """Record one answer (through the batch's recorder when there is one), then
        call ``then`` if the row was still this worker's."""
        answer = Answer(row, values, attempt, then)
        if self._recorder is not None:
            self._recorder.submit(answer)
        else:
            with self.db.engine.connect() as conn:
                record(self._write_answers, conn, [answer], self._count_internal)

    def _write_answers(self, conn: sa.Connection, answers: list[Answer]) -> None:
        """Record answers in one transaction (:func:`~nbcast.delivery.answers.
        write_answers`), then run the callbacks of those that were still ours."""
        kept = write_answers(
            conn, answers, dialect=self.db.dialect, owner=self.owner, now=self.clock.now()
        )
        for answer in answers:
            if answer.row.id in kept and answer.then is not None:
                try:
                    answer.then()
                except Exception:  # a counter must not undo a record
                    log.exception("delivery %d: recorded, but its callback failed", answer.row.id)

    def _guarded(self, row: _Claimed, action: Callable[[], None]) -> None:
        """Run ``action`` for ``row``; if it raises, the row alone fails
        (``internal_error``) and the rest of the batch goes on."""
        try:
            action()
        except Exception as exc:
            log.exception("delivery %d: handling it failed", row.id)
            self._internal_failure(row, exc, sent=False)

    def _internal_failure(self, row: _Claimed, exc: Exception, *, sent: bool) -> None:
        """Record ``row`` FAILED ``internal_error`` with a bounded message; ``sent``
        when the message may have gone out (kept as ``outcome_unknown``)."""
        error = error_detail(exc)
        values = {
            "state": DeliveryState.FAILED.value,
            "reason": INTERNAL_ERROR,
            "error": error,
            "outcome_unknown": sent or row.outcome_unknown,
        }
        try:
            self._write(row, values, {"outcome": "FAILED", "detail": error}, self._count_internal)
        except Exception:  # the database is away: the reaper returns the row later
            log.exception("delivery %d: its failure could not be recorded", row.id)

    def _count_internal(self) -> None:
        self.stats.count_ended(True, INTERNAL_ERROR)

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
            self.stats.count("duplicates")
        detail = dict(receipt.detail)
        if verdict.variant:
            detail["variant"] = verdict.variant
        self._write(row, values, {"outcome": outcome, "detail": detail}, self.stats.count_sent)

    def _retry(
        self,
        row: _Claimed,
        channel: Channel,
        exc: Exception,
        *,
        unknown: bool,
        retry_after: float | None = None,
    ) -> None:
        error = error_detail(exc)
        if row.attempt - row.retry_base >= channel.max_attempts:
            reason = "outcome_unknown" if unknown else "max_attempts"
            self._finish(
                row, DeliveryState.FAILED, reason, outcome="FAILED", error=error, unknown=unknown
            )
            return
        # Bounded whatever the peer asked for (Channel.max_retry_after).
        delay = retry_delay(row.attempt - row.retry_base, channel, retry_after)
        values = {
            "state": DeliveryState.PENDING.value,
            "reason": "retry",
            "not_before": self.clock.now() + delay,
            "error": error,
            "outcome_unknown": unknown,
        }
        self._write(
            row,
            values,
            {"outcome": "UNKNOWN" if unknown else "RETRY", "detail": error},
            self.stats.count_retried,
        )

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
            # A row suppressed after an unknown outcome may still have arrived: keep the
            # flag as evidence.
            "outcome_unknown": unknown or row.outcome_unknown,
        }
        detail = error or {"reason": reason}
        self._write(
            row,
            values,
            {"outcome": outcome, "detail": detail},
            lambda: self.stats.count_ended(state is DeliveryState.FAILED, reason),
        )

    def _release(self, row: _Claimed) -> None:
        """Back to PENDING without spending the attempt (late renditions are coming)."""
        now = self.clock.now()
        with self.db.engine.begin() as conn:
            result = conn.execute(
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
            if getattr(result, "rowcount", 0):  # still ours: its attempt never started
                conn.execute(
                    sa.delete(_ATTEMPTS).where(
                        DeliveryAttempt.delivery_id == row.id,
                        DeliveryAttempt.attempt == row.attempt,
                    )
                )

    # -- housekeeping ---------------------------------------------------------------

    def reap(self) -> int:
        """SENDING rows whose lease expired (their worker died, perhaps after sending)
        go back to PENDING flagged ``outcome_unknown`` — or to FAILED once they have
        used the channel's attempts, so a row that kills every worker that sends it
        stops being tried; return how many."""
        now = self.clock.now()
        with self.db.session() as session:
            query = (
                sa.select(Delivery.id, Delivery.attempt, Delivery.retry_base, Delivery.channel)
                .where(
                    Delivery.state == DeliveryState.SENDING.value, Delivery.lease_expires_at < now
                )
                .limit(500)
            )
            if self.db.dialect == "postgresql":
                query = query.with_for_update(skip_locked=True)
            expired = session.execute(query).all()
            for delivery_id, attempt, retry_base, channel in expired:
                limit = getattr(self.channels.get(channel), "max_attempts", 5)
                if isinstance(limit, bool) or not isinstance(limit, int):
                    limit = 5  # a channel's broken setting must not stop the reaper
                spent = attempt - retry_base >= limit  # it keeps killing workers: stop
                session.execute(
                    sa.update(_DELIVERIES)
                    .where(
                        Delivery.id == delivery_id,
                        Delivery.attempt == attempt,
                        Delivery.state == DeliveryState.SENDING.value,
                    )
                    .values(
                        state=(DeliveryState.FAILED if spent else DeliveryState.PENDING).value,
                        reason="outcome_unknown" if spent else "lease_expired",
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


def retry_failed(
    session: Session, run_id: int, now: datetime, *, tenant_id: int | None = None
) -> int:
    """``nbcast deliver --retry-failed RUN``: the run's FAILED deliveries go back to
    PENDING with a fresh budget of attempts, and its FAILED renditions are rendered
    again; SENT deliveries are never touched. ``tenant_id`` limits it to one tenant's
    run. Returns how many deliveries."""
    owned = [Delivery.run_id == run_id]
    if tenant_id is not None:
        owned.append(Delivery.tenant_id == tenant_id)
    result = session.execute(
        sa.update(_DELIVERIES)
        .where(*owned, Delivery.state == DeliveryState.FAILED.value)
        .values(
            state=DeliveryState.PENDING.value,
            reason="retry_requested",
            retry_base=Delivery.attempt,
            not_before=now,
            updated_at=now,
        )
    )
    count = int(getattr(result, "rowcount", 0) or 0)
    if count:
        session.execute(
            sa.update(Rendition)
            .where(Rendition.run_id == run_id, Rendition.state == "FAILED")
            .values(state="PENDING", attempt=0, lease_owner=None, lease_expires_at=None)
        )
    return count


def _shown(output: dict[str, Any]) -> Any:
    """An output without what changes on every execution (counts, timings)."""
    return {k: v for k, v in output.items() if k not in ("execution_count", "metadata")}
