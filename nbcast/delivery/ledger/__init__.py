"""The delivery ledger: one row per (run, channel, recipient), sent effectively once.

States: ``PENDING → SENDING → SENT | FAILED | SUPPRESSED``
(:class:`~nbcast.delivery.models.DeliveryState`, with a
:class:`~nbcast.delivery.models.DeliveryReason`). A delivery worker
(:class:`Ledger`):

1. **claims** due PENDING rows (``FOR UPDATE SKIP LOCKED`` on PostgreSQL) whose
   renditions are no longer pending: ``SENDING``, ``attempt + 1``, a lease, and an
   attempt row — committed before anything is sent (:mod:`.rows`);
2. **decides**, per row, whether to send at all — SUPPRESSED ``unsubscribed``,
   ``superseded``, ``stale``, ``no_results``, ``unchanged``; FAILED ``render_failed``
   or ``no_channel`` — and composes what it sends, following the channel's
   capabilities, never its name (:mod:`.decision`, :mod:`.compose`);
3. **sends** through the channel, and records the answer at once, fenced by attempt
   and lease owner: SENT with the channel's receipt; on a transient error PENDING
   again after the channel's backoff (exponential, full jitter, at least the peer's
   ``Retry-After`` — cut to the channel's ``max_retry_after``, 15 minutes by
   default), FAILED once the channel's ``max_attempts`` are spent; FAILED at once on
   a permanent error (:mod:`.sending`, :mod:`.outcomes`, :mod:`.answers`). Each row
   is tried on its own, so a failure for one recipient never re-sends to the others.

Every claim leaves an attempt row (:class:`~nbcast.delivery.models.DeliveryAttempt`)
with its :class:`~nbcast.delivery.models.AttemptOutcome`; none is ever deleted. A
claim given back unsent because its late (bannered) renditions are still to be
rendered is recorded ``RELEASED`` and costs none of the channel's attempts.

**Poison rows fail alone.** Anything that raises while one row is decided, sent or
recorded — a channel's bug, an answer that cannot be stored — fails that row alone,
FAILED ``internal_error`` with a bounded message (``outcome_unknown`` if it may have
been sent), and the batch goes on; when the batch's shared queries fail, each row is
decided alone. Answers are written in groups, and one by one when a group fails
(:mod:`.answers`), so no bad answer leaves a row SENDING.

**Leases.** A claimed batch's leases are renewed by a heartbeat while it is sent,
and no send starts once this worker's own view of its lease has less than a quarter
of it (at most 30 s) left (``lease_low``): a row another worker may have taken over
is never sent by this one too. A row that cannot be prepared (its notebook gone, say)
fails alone (``prepare_failed``), and one whose worker keeps dying on it fails once
its attempts are spent (the reaper, ``outcome_unknown``).

**Unknown outcomes.** When a send times out after the request went out
(:class:`~nbcast.errors.OutcomeUnknownError`), or a worker died between sending and
recording (its SENDING row's lease expires and :meth:`Ledger.reap` returns it), the
row is flagged ``outcome_unknown``. Before sending it again the ledger asks the
channel to :meth:`~nbcast.delivery.channels.base.Channel.check`: Slack looks in the
channel's history for the message's key, and if it is there the row is SENT with the
earlier receipt (attempt outcome ``FOUND``) and nothing is posted twice. A channel
that cannot check (``verifiable`` False: SMTP), or cannot tell this time (a Slack
history it may not read), sends again and the row is marked ``possible_duplicate``:
at most one extra copy, and it is on the record. An exception that is not a channel
error counts as an unknown outcome.

The claim commits durably; the records of each send commit asynchronously on
PostgreSQL (``synchronous_commit = off``): a server crash may lose the last moments'
records, which leaves those rows SENDING — exactly the unknown-outcome case above,
handled the same way.

The modules, in the order a row meets them:

=================  ==============================================================
:mod:`.rows`       claims, leases, release, the reaper, retry by hand
:mod:`.decision`   suppression, staleness, supersession, content digests
:mod:`.compose`    the message: attachments, links, HTML body, unsubscribe URL
:mod:`.sending`    :class:`Ledger`: one pass — claim, decide, send, record
:mod:`.outcomes`   each outcome as the row's new values; :class:`DeliveryStats`
:mod:`.answers`    writing answers: fenced, grouped, and one by one on failure
=================  ==============================================================
"""

from __future__ import annotations

from nbcast.delivery.ledger.outcomes import DeliveryStats
from nbcast.delivery.ledger.rows import retry_failed
from nbcast.delivery.ledger.sending import Ledger

__all__ = ["DeliveryStats", "Ledger", "retry_failed"]
