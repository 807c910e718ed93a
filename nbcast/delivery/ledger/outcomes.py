"""What each claimed row's outcome becomes on the record, and the ledger's counters.

:class:`Outcomes` turns what happened to one claimed row — sent, found already
delivered, a transient error, a refusal, a suppression, a failure while handling it —
into the row's new values and its attempt's outcome (an
:class:`~nbcast.delivery.ledger.answers.Answer`), and hands that to the batch's
recorder (:class:`~nbcast.delivery.ledger.answers.Recorder`). Counters move only
once an answer is written, and only if the row was still this worker's.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import sqlalchemy as sa

from nbcast.clock import Clock
from nbcast.db import Database
from nbcast.delivery.channels.base import Channel, Receipt
from nbcast.delivery.ledger.answers import (
    Answer,
    Recorder,
    error_detail,
    record,
    retry_delay,
    write_answers,
)
from nbcast.delivery.ledger.rows import ClaimedDelivery
from nbcast.delivery.models import AttemptOutcome, DeliveryReason, DeliveryState

__all__ = ["DeliveryStats", "Outcomes"]

log = logging.getLogger("nbcast.delivery.ledger")


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
    """FAILED and SUPPRESSED rows by reason."""

    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def count(self, name: str) -> None:
        """Add one to the counter ``name`` (sender and recorder threads call this)."""
        with self._lock:
            setattr(self, name, getattr(self, name) + 1)

    def count_sent(self) -> None:
        """One more SENT."""
        self.count("sent")

    def count_retried(self) -> None:
        """One more retry scheduled."""
        self.count("retried")

    def count_ended(self, failed: bool, reason: str | None) -> None:
        """One more FAILED (``failed``) or SUPPRESSED row, for ``reason``."""
        self.count("failed" if failed else "suppressed")
        if reason:
            with self._lock:
                self.reasons[reason] = self.reasons.get(reason, 0) + 1


class Outcomes:
    """Records the outcomes of one worker's claimed rows (module docstring).

    Between :meth:`open_batch` and :meth:`close_batch` answers go through the batch's
    recorder thread; outside a batch each is written at once.
    """

    def __init__(
        self,
        db: Database,
        clock: Clock,
        owner: str,
        stats: DeliveryStats,
        *,
        accounting: bool = True,
    ) -> None:
        self.db = db
        self.accounting = accounting
        """Each answer that ends a delivery is audited (:mod:`nbcast.tenancy`)."""
        self.clock = clock
        self.owner = owner
        self.stats = stats
        self._recorder: Recorder | None = None

    def open_batch(self) -> None:
        """Start a recorder for the batch about to be sent."""
        self._recorder = Recorder(self.write_answers, self.db, self.count_internal)

    def close_batch(self) -> None:
        """Wait until every answer of the batch is written (raises what stopped the
        recorder, if anything did)."""
        recorder, self._recorder = self._recorder, None
        if recorder is not None:
            recorder.close()

    # -- writing ---------------------------------------------------------------------

    def write(
        self,
        row: ClaimedDelivery,
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
                record(self.write_answers, conn, [answer], self.count_internal)

    def write_answers(self, conn: sa.Connection, answers: list[Answer]) -> None:
        """Record ``answers`` in one transaction
        (:func:`~nbcast.delivery.ledger.answers.write_answers`), then run the
        callbacks of those that were still ours."""
        kept = write_answers(
            conn,
            answers,
            dialect=self.db.dialect,
            owner=self.owner,
            now=self.clock.now(),
            audited=self.accounting,
        )
        for answer in answers:
            if answer.row.id in kept and answer.then is not None:
                try:
                    answer.then()
                except Exception:  # a counter must not undo a record
                    log.exception("delivery %d: recorded, but its callback failed", answer.row.id)

    # -- what happened -----------------------------------------------------------------

    def guarded(self, row: ClaimedDelivery, action: Callable[[], object]) -> None:
        """Run ``action`` for ``row``; if it raises, the row alone fails
        (``internal_error``) and the rest of the batch goes on."""
        try:
            action()
        except Exception as exc:
            log.exception("delivery %d: handling it failed", row.id)
            self.internal_failure(row, exc, sent=False)

    def internal_failure(self, row: ClaimedDelivery, exc: Exception, *, sent: bool) -> None:
        """Record ``row`` FAILED ``internal_error`` with a bounded message; ``sent``
        when the message may have gone out (kept as ``outcome_unknown``)."""
        error = error_detail(exc)
        values = {
            "state": DeliveryState.FAILED.value,
            "reason": DeliveryReason.internal_error.value,
            "error": error,
            "outcome_unknown": sent or row.outcome_unknown,
        }
        attempt = {"outcome": AttemptOutcome.FAILED.value, "detail": error}
        try:
            self.write(row, values, attempt, self.count_internal)
        except Exception:  # the database is away: the reaper returns the row later
            log.exception("delivery %d: its failure could not be recorded", row.id)

    def count_internal(self) -> None:
        """Count one ``internal_error`` failure."""
        self.stats.count_ended(True, DeliveryReason.internal_error)

    def sent(
        self,
        row: ClaimedDelivery,
        receipt: Receipt,
        *,
        outcome: AttemptOutcome,
        duplicate: bool,
        content_sha256: str | None,
        variant: str,
    ) -> None:
        """``row`` was sent (``SENT``), or found sent earlier (``FOUND``)."""
        values: dict[str, Any] = {
            "state": DeliveryState.SENT.value,
            "reason": None,
            "receipt": receipt.detail,
            "sent_at": self.clock.now(),
            "content_sha256": content_sha256,
            "outcome_unknown": False,
            "error": None,
        }
        if duplicate:
            values["possible_duplicate"] = True
            self.stats.count("duplicates")
        detail = dict(receipt.detail)
        if variant:
            detail["variant"] = variant
        self.write(row, values, {"outcome": outcome.value, "detail": detail}, self.stats.count_sent)

    def retry(
        self,
        row: ClaimedDelivery,
        channel: Channel,
        exc: Exception,
        *,
        unknown: bool,
        retry_after: float | None = None,
    ) -> None:
        """A transient error (``unknown``: it may have arrived): PENDING again after
        the channel's backoff, or FAILED once its attempts are spent."""
        error = error_detail(exc)
        tries = row.attempt - row.retry_base
        if tries >= channel.max_attempts:
            reason = DeliveryReason.outcome_unknown if unknown else DeliveryReason.max_attempts
            self.finish(row, DeliveryState.FAILED, reason, error=error, unknown=unknown)
            return
        # Bounded whatever the peer asked for (Channel.max_retry_after).
        delay = retry_delay(tries, channel, retry_after)
        values = {
            "state": DeliveryState.PENDING.value,
            "reason": DeliveryReason.retry.value,
            "not_before": self.clock.now() + delay,
            "error": error,
            "outcome_unknown": unknown,
        }
        outcome = AttemptOutcome.UNKNOWN if unknown else AttemptOutcome.RETRY
        self.write(
            row, values, {"outcome": outcome.value, "detail": error}, self.stats.count_retried
        )

    def lease_low(self, row: ClaimedDelivery) -> None:
        """Too little lease was left to start the send: PENDING again, unsent, for
        whoever holds it next."""
        self.write(
            row,
            {"state": DeliveryState.PENDING.value, "reason": DeliveryReason.lease_low.value},
            {
                "outcome": AttemptOutcome.RETRY.value,
                "detail": {"reason": DeliveryReason.lease_low.value},
            },
        )

    def finish(
        self,
        row: ClaimedDelivery,
        state: DeliveryState,
        reason: DeliveryReason | None,
        *,
        error: dict[str, Any] | None = None,
        unknown: bool = False,
    ) -> None:
        """``row`` ends FAILED or SUPPRESSED with ``reason`` (the attempt's outcome
        says the same)."""
        values = {
            "state": state.value,
            "reason": None if reason is None else reason.value,
            "error": error,
            # A row suppressed after an unknown outcome may still have arrived: keep the
            # flag as evidence.
            "outcome_unknown": unknown or row.outcome_unknown,
        }
        outcome = (
            AttemptOutcome.FAILED if state is DeliveryState.FAILED else AttemptOutcome.SUPPRESSED
        )
        detail = error or {"reason": None if reason is None else reason.value}
        self.write(
            row,
            values,
            {"outcome": outcome.value, "detail": detail},
            lambda: self.stats.count_ended(state is DeliveryState.FAILED, reason),
        )
