"""What the ledger records for each send, and how it writes it.

- **Errors** are recorded as ``{"error": <type>, "message": <at most
  ERROR_MESSAGE_LIMIT characters, no control characters>}`` (plus ``retry_after``),
  so a peer's text can neither bloat a row nor break the write (PostgreSQL's
  ``jsonb`` refuses a NUL).
- **Retry delays** are the channel's backoff, or the peer's ``Retry-After`` cut to the
  channel's :attr:`~nbcast.delivery.channels.base.Channel.max_retry_after` when that
  is longer — never more than :data:`MAX_RETRY_DELAY`, whatever a channel or a peer
  says.
- **The recorder** writes a batch's answers on a thread of its own, in groups (one
  transaction each). When a group cannot be written, its answers are written one by
  one; an answer that cannot be written even alone is replaced by a minimal FAILED
  record (reason ``internal_error``), so a bad answer fails its own row — never the
  others, and never leaves a row SENDING.

Every write is fenced by the row's attempt and lease owner
(:func:`~nbcast.delivery.ledger.rows.fence`): a worker that lost its lease writes
nothing.
"""

from __future__ import annotations

import contextlib
import json
import logging
import math
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Protocol, cast

import sqlalchemy as sa

from nbcast.db import Database, UTCDateTime
from nbcast.delivery.channels._peer import peer_text
from nbcast.delivery.channels.base import Channel
from nbcast.delivery.models import (
    DELIVERY_LEASE,
    AttemptOutcome,
    Delivery,
    DeliveryAttempt,
    DeliveryReason,
    DeliveryState,
)
from nbcast.leasing import held, held_text, released, rowcount
from nbcast.retry import backoff

__all__ = [
    "ERROR_MESSAGE_LIMIT",
    "MAX_RETRY_DELAY",
    "Answer",
    "Recorder",
    "error_detail",
    "failed_answer",
    "record",
    "retry_delay",
    "write_answers",
]

log = logging.getLogger("nbcast.delivery.ledger")

ERROR_MESSAGE_LIMIT = 500
"""The most characters of an error message kept on a ledger row."""

MAX_RETRY_DELAY = 86_400.0
"""The longest any retry waits, in seconds (one day), whatever a channel says."""

_GROUP_WINDOW = 0.005
"""Seconds the recorder waits for more answers to write in the same transaction."""

_DELIVERIES = cast(sa.Table, Delivery.__table__)
_HELD = held_text(DELIVERY_LEASE, "x", owner=":owner", token="f.attempt")
_RELEASED = ", ".join(f"{column} = NULL" for column in released(DELIVERY_LEASE))
_ATTEMPTS = cast(sa.Table, DeliveryAttempt.__table__)


def _record(audited: bool) -> sa.TextClause:
    """Answers recorded in one round trip on PostgreSQL.

    The fenced ledger rows and their attempts are updated from arrays; set_config
    (evaluated once, in FROM) makes the commit asynchronous. The statement returns
    the ids whose lease still held. With ``audited`` (governance on) the audit
    entries of the answers that end a delivery are appended in the same statement:
    ``nbcast_audit_append`` (migration 0011) chains each entry after its tenant's
    head, hashing exactly as ``audit.append`` does for the ASCII details text it is
    given, in tenant and delivery order. No extra round trip, and no statement is
    built per group: both variants are built once, at import.
    """
    columns = (
        "id, attempt, state, reason, not_before, receipt, error, sent_at, content, "
        "unknown, duplicate, outcome, detail"
    )
    arrays = (
        "CAST(:ids AS bigint[]), CAST(:attempts AS integer[]), CAST(:states AS text[]), "
        "CAST(:reasons AS text[]), CAST(:not_befores AS timestamptz[]), "
        "CAST(:receipts AS text[]), CAST(:errors AS text[]), CAST(:sent_ats AS timestamptz[]), "
        "CAST(:contents AS text[]), CAST(:unknowns AS boolean[]), "
        "CAST(:duplicates AS boolean[]), CAST(:outcomes AS text[]), CAST(:details AS text[])"
    )
    returning = "x.id"
    if audited:
        columns += ", audit_action, audit_detail"
        arrays += ", CAST(:audit_actions AS text[]), CAST(:audit_details AS text[])"
        returning += ", x.tenant_id"
    audit_cte = (
        ", audited AS (SELECT nbcast_audit_append(s.tenant_id, :now, :actor, s.audit_action, "
        "'delivery:' || s.id, s.audit_detail) AS seq FROM (SELECT d.id, d.tenant_id, "
        "f.audit_action, f.audit_detail FROM d JOIN f ON f.id = d.id "
        "WHERE f.audit_action IS NOT NULL ORDER BY d.tenant_id, d.id) AS s) "
    )
    # A data-modifying CTE always runs; a SELECT-only one runs only when referenced.
    final = (
        audit_cte + "SELECT id FROM d WHERE (SELECT count(*) FROM audited) >= 0"
        if audited
        else " SELECT id FROM d"
    )
    statement = sa.text(
        f"WITH f AS (SELECT * FROM unnest({arrays}) AS f({columns})), "
        "d AS (UPDATE deliveries x SET state = f.state, reason = f.reason, "
        "not_before = COALESCE(f.not_before, x.not_before), "
        "receipt = COALESCE(CAST(f.receipt AS jsonb), x.receipt), error = CAST(f.error AS jsonb), "
        "sent_at = COALESCE(f.sent_at, x.sent_at), "
        "content_sha256 = COALESCE(f.content, x.content_sha256), outcome_unknown = f.unknown, "
        f"possible_duplicate = x.possible_duplicate OR f.duplicate, {_RELEASED}, "
        "updated_at = :now "
        "FROM f, (SELECT set_config('synchronous_commit', 'off', true)) AS async "
        f"WHERE x.id = f.id AND {_HELD} AND x.state = :sending RETURNING {returning}), "
        "a AS (UPDATE delivery_attempts y SET ended_at = :now, outcome = f.outcome, "
        "detail = CAST(f.detail AS jsonb) FROM f JOIN d ON d.id = f.id "
        "WHERE y.delivery_id = f.id AND y.attempt = f.attempt)" + final
    )
    binds = [
        sa.bindparam("now", type_=UTCDateTime()),
        sa.bindparam("sending", value=DeliveryState.SENDING.value),
    ]
    if audited:
        binds.append(sa.bindparam("actor", value="delivery-worker"))
    return statement.bindparams(*binds)


_RECORD = _record(audited=False)
_RECORD_AUDITED = _record(audited=True)


class ClaimedRow(Protocol):
    """What an answer needs to know of the ledger row it answers for."""

    @property
    def id(self) -> int: ...

    @property
    def attempt(self) -> int: ...

    @property
    def outcome_unknown(self) -> bool: ...


@dataclass(frozen=True)
class Answer:
    """One send's outcome, to be recorded: the row's new ``values``, its attempt's
    outcome and detail, and what to call once it is written (if the row was still
    this worker's)."""

    row: ClaimedRow
    values: dict[str, Any]
    attempt: dict[str, Any]
    then: Callable[[], None] | None


def error_detail(exc: BaseException, limit: int = ERROR_MESSAGE_LIMIT) -> dict[str, Any]:
    """An exception as a ledger row records it (module docstring)."""
    error: dict[str, Any] = {"error": type(exc).__name__, "message": peer_text(exc, limit)}
    retry_after = getattr(exc, "retry_after", None)
    if isinstance(retry_after, int | float) and math.isfinite(retry_after):
        error["retry_after"] = float(retry_after)
    return error


def retry_delay(tries: int, channel: Channel, retry_after: object = None) -> timedelta:
    """How long a row waits before its next attempt, after ``tries`` attempts: the
    channel's backoff (exponential, full jitter), or the peer's ``retry_after`` cut to
    the channel's ``max_retry_after`` when that is longer; at most
    :data:`MAX_RETRY_DELAY`. Never raises, whatever the numbers."""
    base = _seconds(channel.backoff_base, default=30.0)
    cap = _seconds(channel.backoff_cap, default=3600.0)
    delay = backoff(min(max(tries, 1), 64), base=base, cap=cap).total_seconds()
    wanted = _seconds(retry_after, default=None)
    if wanted is not None:
        delay = max(delay, min(wanted, _seconds(channel.max_retry_after, default=900.0)))
    return timedelta(seconds=min(delay, MAX_RETRY_DELAY))


def _seconds(value: object, *, default: Any) -> Any:
    """``value`` as seconds in ``[0, MAX_RETRY_DELAY]``, or ``default`` if it is not a
    finite, non-negative number."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return default
    number = float(value)
    if not math.isfinite(number) or number < 0:
        return default
    return min(number, MAX_RETRY_DELAY)


def failed_answer(answer: Answer, exc: BaseException, then: Callable[[], None] | None) -> Answer:
    """The minimal record of a row whose own answer could not be written: FAILED,
    ``internal_error``. A row that was sent keeps the evidence that it may have
    arrived (``outcome_unknown``)."""
    sent = answer.values.get("state") == DeliveryState.SENT.value
    what = "sent, but its record could not be written" if sent else "not recordable"
    error = {"error": type(exc).__name__, "message": f"{what}: {peer_text(exc, 200)}"}
    values = {
        "state": DeliveryState.FAILED.value,
        "reason": DeliveryReason.internal_error.value,
        "error": error,
        "outcome_unknown": sent or answer.row.outcome_unknown,
    }
    return Answer(
        answer.row, values, {"outcome": AttemptOutcome.FAILED.value, "detail": error}, then
    )


def write_answers(
    conn: sa.Connection,
    answers: list[Answer],
    *,
    dialect: str,
    owner: str,
    now: datetime,
    audited: bool = True,
) -> set[int]:
    """Record ``answers`` in one transaction, each fenced by attempt and lease owner
    (a lost lease writes nothing), with the audit entries of those that end a
    delivery unless not ``audited``; return the ids written. On PostgreSQL one
    statement updates the rows and their attempts, and the commit does not wait for
    the WAL flush (see :mod:`nbcast.delivery.ledger`)."""
    kept: set[int] = set()
    with conn.begin():
        if dialect == "postgresql":
            arrays = _record_arrays(answers, owner, now)
            if audited:
                arrays.update(_audit_arrays(answers))
            statement = _RECORD_AUDITED if audited else _RECORD
            return set(conn.execute(statement, arrays).scalars())
        for answer in answers:
            row = answer.row
            result = conn.execute(
                sa.update(_DELIVERIES)
                .where(
                    Delivery.id == row.id,
                    held(DELIVERY_LEASE, owner, row.attempt),
                    Delivery.state == DeliveryState.SENDING.value,
                )
                .values(**released(DELIVERY_LEASE), updated_at=now, **answer.values)
            )
            if not rowcount(result):
                continue  # the lease was lost: another worker has the row now
            conn.execute(
                sa.update(_ATTEMPTS)
                .where(
                    DeliveryAttempt.delivery_id == row.id, DeliveryAttempt.attempt == row.attempt
                )
                .values(ended_at=now, **answer.attempt)
            )
            kept.add(row.id)
        if audited:
            _audit(conn, answers, kept, now)
    return kept


_AUDITED = {
    DeliveryState.SENT.value: "delivery.sent",
    DeliveryState.FAILED.value: "delivery.failed",
    DeliveryState.SUPPRESSED.value: "delivery.suppressed",
}


def _audit(conn: sa.Connection, answers: list[Answer], kept: set[int], now: datetime) -> None:
    """The audit entries of the answers written that end a delivery (SENT, FAILED,
    SUPPRESSED): who received which run on which channel, or why not."""
    from nbcast.tenancy import audit

    noted = []
    for answer in answers:
        state = answer.values.get("state")
        row = answer.row
        if row.id not in kept or state not in _AUDITED:
            continue
        noted.append(
            audit.entry(
                getattr(row, "tenant_id", 0),
                actor="delivery-worker",
                action=audit.Action(_AUDITED[state]),
                obj=f"delivery:{row.id}",
                at=now,
                details=_audit_details(answer),
            )
        )
    if noted:
        audit.append(conn, noted)


def _audit_details(answer: Answer) -> dict[str, Any]:
    row = answer.row
    return {
        "run": getattr(row, "run_id", None),
        "channel": getattr(row, "channel", None),
        "recipient": getattr(row, "recipient", None),
        "reason": answer.values.get("reason"),
        "possible_duplicate": bool(answer.values.get("possible_duplicate")),
    }


def _audit_arrays(answers: list[Answer]) -> dict[str, Any]:
    """The audit action and details text of each answer (None: not audited)."""
    from nbcast.tenancy import audit

    actions: list[str | None] = []
    details: list[str | None] = []
    for answer in answers:
        action = _AUDITED.get(answer.values.get("state"))  # type: ignore[arg-type]
        actions.append(action)
        details.append(None if action is None else audit.details_text(_audit_details(answer)))
    return {"audit_actions": actions, "audit_details": details}


def _record_arrays(answers: list[Answer], owner: str, now: datetime) -> dict[str, Any]:
    def js(value: Any) -> str | None:
        return None if value is None else json.dumps(value, default=str)

    def utc(value: datetime | None) -> datetime | None:
        return None if value is None else value.astimezone(UTC)

    return {
        "ids": [a.row.id for a in answers],
        "attempts": [a.row.attempt for a in answers],
        "states": [a.values["state"] for a in answers],
        "reasons": [a.values.get("reason") for a in answers],
        "not_befores": [utc(a.values.get("not_before")) for a in answers],
        "receipts": [js(a.values.get("receipt")) for a in answers],
        "errors": [js(a.values.get("error")) for a in answers],
        "sent_ats": [utc(a.values.get("sent_at")) for a in answers],
        "contents": [a.values.get("content_sha256") for a in answers],
        "unknowns": [bool(a.values.get("outcome_unknown", False)) for a in answers],
        "duplicates": [bool(a.values.get("possible_duplicate", False)) for a in answers],
        "outcomes": [a.attempt["outcome"] for a in answers],
        "details": [js(a.attempt.get("detail")) for a in answers],
        "owner": owner,
        "now": now,
    }


Write = Callable[[sa.Connection, list[Answer]], None]


def record(
    write: Write, conn: sa.Connection, answers: list[Answer], failed: Callable[[], None] | None
) -> None:
    """Write ``answers`` together; if that fails, one by one; an answer that fails
    alone gets :func:`failed_answer` instead (``failed`` is called when that is
    written). Raises nothing an ordinary failure raises: a row whose failure cannot
    be written either stays SENDING, and the reaper returns it once its lease ends."""
    try:
        write(conn, answers)
        return
    except Exception as exc:
        if len(answers) == 1:
            _record_failure(write, conn, answers[0], exc, failed)
            return
        log.warning("%d delivery records failed together; writing each alone", len(answers))
    for answer in answers:
        try:
            write(conn, [answer])
        except Exception as exc:
            _record_failure(write, conn, answer, exc, failed)


def _record_failure(
    write: Write,
    conn: sa.Connection,
    answer: Answer,
    exc: Exception,
    failed: Callable[[], None] | None,
) -> None:
    log.error("delivery %d: its answer could not be recorded: %r", answer.row.id, exc)
    try:
        write(conn, [failed_answer(answer, exc, failed)])
    except Exception:
        log.exception("delivery %d: not even its failure could be recorded", answer.row.id)


class Recorder:
    """Records a batch's answers on a thread of its own, so that recording overlaps
    sending. Each answer is queued the moment its send returns and written within
    :data:`_GROUP_WINDOW` of it, together with every answer that queued up by then, in
    one transaction (group commit; :func:`record` when a group fails). A crash loses
    at most the answers in flight, and those rows come back as unknown outcomes (see
    :mod:`nbcast.delivery.ledger`) — the same as a crash between a send and its
    record."""

    def __init__(self, write: Write, db: Database, failed: Callable[[], None] | None) -> None:
        self._write = write
        self._db = db
        self._failed = failed
        self._queue: queue.Queue[Answer | None] = queue.Queue()
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._loop, name="nbcast-ledger-record", daemon=True)
        self._thread.start()

    def submit(self, answer: Answer) -> None:
        """Queue ``answer`` for writing."""
        self._queue.put(answer)

    def _loop(self) -> None:
        try:
            conn = self._db.engine.connect()  # opened in this thread (SQLite wants that)
        except BaseException as exc:  # reported by close(); the rows are reaped later
            self._error = exc
            conn = None
        done = False
        while not done:
            first = self._queue.get()
            answers = [] if first is None else [first]
            done = first is None
            deadline = time.monotonic() + _GROUP_WINDOW
            while not done:  # what queued up meanwhile, or arrives within the window
                try:
                    more = self._queue.get(timeout=max(deadline - time.monotonic(), 0))
                except queue.Empty:
                    break
                if more is None:
                    done = True
                else:
                    answers.append(more)
            if answers and conn is not None and self._error is None:
                try:
                    record(self._write, conn, answers, self._failed)
                except BaseException as exc:  # reported by close()
                    self._error = exc
        if conn is not None:
            with contextlib.suppress(Exception):
                conn.close()

    def close(self) -> None:
        """Wait until every answer is written; raise what stopped the recorder, if
        anything did (not an answer that failed: that fails its own row)."""
        self._queue.put(None)
        self._thread.join()
        if self._error is not None:
            raise self._error
