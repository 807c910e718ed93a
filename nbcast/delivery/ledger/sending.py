"""The :class:`Ledger`: one worker's passes — claim, decide, send, record.

It ties the ledger's parts together (see :mod:`nbcast.delivery.ledger`): the claim
and its lease (:mod:`~nbcast.delivery.ledger.rows`), the decision and the message
(:mod:`~nbcast.delivery.ledger.decision`, :mod:`~nbcast.delivery.ledger.compose`),
and the record of each outcome (:mod:`~nbcast.delivery.ledger.outcomes`). Sending
itself — with the check after an unknown outcome — is here.
"""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from datetime import UTC, datetime, timedelta

from nbcast.artifacts import ArtifactStore
from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.delivery.channels.base import Channel
from nbcast.delivery.ledger.answers import error_detail
from nbcast.delivery.ledger.compose import Composer
from nbcast.delivery.ledger.decision import Decider, Verdict
from nbcast.delivery.ledger.outcomes import DeliveryStats, Outcomes
from nbcast.delivery.ledger.rows import (
    ClaimedDelivery,
    LeaseHeartbeat,
    claim_due,
    reap_expired,
    release_unsent,
    renew_leases,
)
from nbcast.delivery.models import AttemptOutcome, DeliveryReason, DeliveryState
from nbcast.delivery.signing import Signer
from nbcast.errors import (
    ChannelError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.faults import crash_point

__all__ = ["LEASE_MARGIN", "SENDER_THREAD_PREFIX", "Ledger"]

log = logging.getLogger("nbcast.delivery.ledger")

LEASE_MARGIN = timedelta(seconds=30)
"""The most lease a send must have left to start (less for leases under two minutes:
a quarter of the lease)."""

SENDER_THREAD_PREFIX = "nbcast-send"
"""Sender threads' names start so; each has channels of its own."""


class Ledger:
    """Claims, decides, sends and records deliveries (:mod:`nbcast.delivery.ledger`).

    ``channels`` are the configured channels by name; with ``make_channels`` and
    ``senders`` > 1 sends run on that many threads, each with channels of its own
    (its own SMTP session). ``lease_seconds`` is how long a claim holds its rows
    before another worker may treat their outcome as unknown; ``base_url`` and
    ``link_ttl`` make signed links and unsubscribe URLs.
    """

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
        accounting: bool = True,
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
        self.composer = Composer(store, signer, base_url=base_url, link_ttl=link_ttl)
        self.decider = Decider(db, clock, store, self.composer)
        self.outcomes = Outcomes(db, clock, self.owner, self.stats, accounting=accounting)
        self.senders = senders if make_channels is not None else 1
        self._make_channels = make_channels
        self._local = threading.local()
        self._channel_sets: list[Mapping[str, Channel]] = [self.channels]
        self._sets_lock = threading.Lock()
        self._pool: ThreadPoolExecutor | None = None
        self._lease_until = datetime.min.replace(tzinfo=UTC)

    # -- rows and leases -----------------------------------------------------------------

    def claim(self, limit: int = 50) -> list[ClaimedDelivery]:
        """Lease up to ``limit`` due PENDING rows whose renditions are settled
        (:func:`~nbcast.delivery.ledger.rows.claim_due`)."""
        return claim_due(
            self.db, owner=self.owner, now=self.clock.now(), lease=self.lease, limit=limit
        )

    def renew(self, ids: list[int]) -> None:
        """Extend the leases of this worker's SENDING rows among ``ids``."""
        now = self.clock.now()
        renew_leases(self.db, owner=self.owner, ids=ids, until=now + self.lease)
        self._lease_until = now + self.lease

    def reap(self) -> int:
        """Return or fail SENDING rows whose lease expired
        (:func:`~nbcast.delivery.ledger.rows.reap_expired`); return how many."""

        def max_attempts(name: str) -> object:
            return getattr(self.channels.get(name), "max_attempts", None)

        return reap_expired(self.db, now=self.clock.now(), max_attempts=max_attempts)

    def _lease_holds(self) -> bool:
        """Whether a send may start: the lease has a safe margin left, as far as this
        worker knows (its heartbeat renews it)."""
        margin = min(self.lease / 4, LEASE_MARGIN)
        return self.clock.now() < self._lease_until - margin

    # -- one pass ------------------------------------------------------------------------

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
        ids = [row.id for row in claimed]
        heartbeat = LeaseHeartbeat(
            functools.partial(self.renew, ids), self.lease.total_seconds() / 3
        )
        self.outcomes.open_batch()
        try:
            verdicts = self.decider.decide_each(claimed, self.channels)
            sends = []
            for row in claimed:
                verdict = verdicts[row.id]
                if verdict.state is not None:
                    end = functools.partial(
                        self.outcomes.finish,
                        row,
                        verdict.state,
                        verdict.reason,
                        error=verdict.error,
                    )
                    self.outcomes.guarded(row, end)
                elif verdict.message is None:  # waiting for the late renditions
                    release = functools.partial(
                        release_unsent, self.db, row, owner=self.owner, now=self.clock.now()
                    )
                    self.outcomes.guarded(row, release)
                else:
                    sends.append((row, functools.partial(self._send, row, verdict)))
            if self.senders > 1 and len(sends) > 1:
                if self._pool is None:
                    self._pool = ThreadPoolExecutor(
                        self.senders, thread_name_prefix=SENDER_THREAD_PREFIX
                    )
                futures = [self._pool.submit(self.outcomes.guarded, row, s) for row, s in sends]
                wait(futures)  # every sender is done before the recorder closes
                for future in futures:
                    future.result()
            else:
                for row, send in sends:
                    self.outcomes.guarded(row, send)
        finally:
            heartbeat.stop()
            self.outcomes.close_batch()  # every answer is written before returning
        return len(claimed)

    def _send(self, row: ClaimedDelivery, verdict: Verdict) -> None:
        """Send one decided row, checking first after an unknown outcome, and record
        what the channel answered (:mod:`nbcast.delivery.ledger`)."""
        assert verdict.message is not None
        channel = self._channels_here()[row.channel]
        if not self._lease_holds():  # leave it to whoever holds it next; nothing was sent
            self.outcomes.lease_low(row)
            return
        duplicate = False
        if row.outcome_unknown:
            try:
                found = channel.check(verdict.message)
            except PermanentChannelError:  # it can never tell: send, and say so
                found, duplicate = None, True
            except ChannelError as exc:  # cannot look right now: look again later
                self.outcomes.retry(row, channel, exc, unknown=True)
                return
            if found is not None:
                self.outcomes.sent(
                    row,
                    found,
                    outcome=AttemptOutcome.FOUND,
                    duplicate=False,
                    content_sha256=verdict.content_sha256,
                    variant=verdict.variant,
                )
                self.stats.count("found")
                return
            duplicate = duplicate or not channel.verifiable
        try:
            receipt = channel.send(verdict.message)
        except OutcomeUnknownError as exc:
            self.outcomes.retry(row, channel, exc, unknown=True)
            return
        except TransientChannelError as exc:
            self.outcomes.retry(row, channel, exc, unknown=False, retry_after=exc.retry_after)
            return
        except PermanentChannelError as exc:
            self.outcomes.finish(
                row, DeliveryState.FAILED, DeliveryReason.refused, error=error_detail(exc)
            )
            return
        except Exception as exc:  # a channel bug: it may have sent, so check before resending
            log.exception("delivery %d: the %s channel failed", row.id, row.channel)
            self.outcomes.retry(row, channel, exc, unknown=True)
            return
        crash_point("after_send")
        try:
            self.outcomes.sent(
                row,
                receipt,
                outcome=AttemptOutcome.SENT,
                duplicate=duplicate,
                content_sha256=verdict.content_sha256,
                variant=verdict.variant,
            )
        except Exception as exc:  # it went out: say so on the failure
            log.exception("delivery %d: sent, but its receipt could not be recorded", row.id)
            self.outcomes.internal_failure(row, exc, sent=True)

    # -- channels ------------------------------------------------------------------------

    def _channels_here(self) -> Mapping[str, Channel]:
        """This thread's channels: the ledger's own on the calling thread, a set of
        its own (``make_channels``) on each sender thread."""
        if threading.current_thread().name.startswith(SENDER_THREAD_PREFIX) and self._make_channels:
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
