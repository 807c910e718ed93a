"""SLA alerts: the oversight service's step that tells an owner their report was late.

The SLA monitor records each SLA miss with the channel and recipient of its alert,
``alert_state`` PENDING (:mod:`nbcast.oversight.sla`). Once per step the oversight
service (:mod:`nbcast.oversight.service`) calls :meth:`AlertWorker.send_due`, which,
up to its limit, one alert at a time:

1. **claims** the oldest due PENDING alert — ``FOR UPDATE SKIP LOCKED`` on PostgreSQL,
   so two workers never take one alert, and a lease (``alert_lease_owner``,
   ``alert_lease_expires_at``, the ledger's lease length) — and counts the attempt
   (``alert_attempts``, the fencing token of every later write of that claim);
2. **builds** a :class:`~nbcast.delivery.channels.base.Message` for the channel — a
   short text: definition, slot, fire time, deadline, the slot's state and the reason,
   and links to the run and the definition's page when the worker's base URL
   (``NBCAST_BASE_URL``) is not a loopback address — whose key is
   ``nbcast-sla<miss id>``;
3. **sends** it and records the answer, fenced by the attempt: SENT (``alerted_at``),
   or PENDING again after the channel's backoff (``Retry-After`` honoured, cut to the
   channel's ``max_retry_after``) for a transient error, or FAILED — a refusal, the
   channel's ``max_attempts`` spent, or a channel this worker does not have
   (``alert_error`` says which: ``{"reason", "error", "message"}``).

**Once, and the edge.** A miss row is one alert, claimed by one worker at a time, so
an alert is sent once. The exception is at-least-once: when the channel's answer is
lost (a timeout after sending) or the worker dies between sending and recording, the
lease runs out and the next claim cannot know whether the first send arrived. It asks
a channel that can tell (:attr:`~nbcast.delivery.channels.base.Channel.verifiable`,
Slack) and sends again only if nothing arrived; a channel that cannot (SMTP) sends
again and the row's ``alert_error`` keeps ``"possible_duplicate": true``. A second
alert about one miss is the price of never losing one.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from html import escape
from typing import Any
from urllib.parse import quote, urlsplit

import sqlalchemy as sa

from nbcast.clock import Clock, format_instant
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.delivery.ledger.answers import error_detail, retry_delay
from nbcast.delivery.report import ReportInfo
from nbcast.errors import (
    ChannelError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.faults import crash_point
from nbcast.leasing import LeaseColumns, free, held, released, rowcount, skip_locked, taken
from nbcast.oversight.models import SlaMiss
from nbcast.oversight.sla import AlertState
from nbcast.scheduler.models import Run, RunKind
from nbcast.tenancy.models import Tenant

__all__ = ["AlertWorker"]

log = logging.getLogger("nbcast.oversight.sla_alerts")

PENDING, SENT, FAILED = AlertState.PENDING.value, AlertState.SENT.value, AlertState.FAILED.value

ALERT_LEASE = LeaseColumns(
    SlaMiss.alert_lease_owner, SlaMiss.alert_lease_expires_at, SlaMiss.alert_attempts
)
"""An alert's lease (:mod:`nbcast.leasing`): the attempt count is its fencing token."""


@dataclass(frozen=True, kw_only=True)
class _Claimed:
    """One claimed alert and what its message says."""

    id: int
    attempt: int
    unknown: bool
    """The previous attempt may have arrived (its answer was lost, or its worker died)."""
    channel: str
    to: str
    tenant: str
    definition: str
    slot_key: str
    fire_at: datetime
    deadline: datetime
    detected_at: datetime
    state: str
    reason: str | None
    run_id: int | None
    version: int


def _public_base(url: str | None) -> str | None:
    """``url`` without a trailing slash, or None when it is empty or names this machine
    (a link only a browser on the server itself could open)."""
    if not url:
        return None
    try:
        host = (urlsplit(url).hostname or "").lower()
    except ValueError:
        return None
    if not host or host == "localhost" or host.endswith(".localhost"):
        return None
    try:
        if ipaddress.ip_address(host).is_loopback:
            return None
    except ValueError:
        pass
    return url.rstrip("/")


class AlertWorker:
    """Claims, sends and records SLA alerts (module docstring) for one delivery worker:
    its database and clock, its configured ``channels`` by name, its ``owner`` name,
    the lease of a claim, and the ``base_url`` of links."""

    def __init__(
        self,
        db: Database,
        clock: Clock,
        channels: Mapping[str, Channel],
        *,
        owner: str,
        lease: timedelta,
        base_url: str | None,
    ) -> None:
        self.db = db
        self.clock = clock
        self.channels = channels
        self.owner = owner
        self.lease = lease
        self.base_url = _public_base(base_url)

    def send_due(self, limit: int = 20) -> int:
        """Send up to ``limit`` due alerts, one claim at a time; return how many were
        handled (sent, retried or failed)."""
        handled = 0
        for _ in range(max(limit, 0)):
            claimed = self.claim()
            if claimed is None:
                break
            handled += 1
            try:
                self._send(claimed)
            except Exception as exc:  # a bug of ours: fail this alert alone
                log.exception("SLA alert %d could not be handled", claimed.id)
                self._record(claimed, FAILED, _error("internal_error", exc))
        return handled

    # -- claim ---------------------------------------------------------------------------

    def claim(self) -> _Claimed | None:
        """Lease the oldest due PENDING alert (None: none is due)."""
        now = self.clock.now()
        with self.db.session() as session:
            query = (
                sa.select(SlaMiss)
                .where(
                    SlaMiss.alert_state == PENDING,
                    SlaMiss.alert_not_before <= now,
                    free(ALERT_LEASE, now),
                )
                .order_by(SlaMiss.alert_not_before, SlaMiss.id)
                .limit(1)
            )
            miss = session.scalar(skip_locked(self.db.dialect, query))
            if miss is None:
                return None
            # A lease left behind: its worker died after claiming, perhaps after sending.
            unknown = miss.alert_lease_owner is not None or bool(
                (miss.alert_error or {}).get("outcome_unknown")
            )
            session.execute(
                sa.update(SlaMiss)
                .where(SlaMiss.id == miss.id)
                .values(taken(ALERT_LEASE, self.owner, now, self.lease))
            )
            session.refresh(miss)
            names = session.execute(
                sa.select(Tenant.name, ReportDefinition.name, ReportDefinition.latest_version)
                .join(ReportDefinition, ReportDefinition.tenant_id == Tenant.id)
                .where(ReportDefinition.id == miss.definition_id)
            ).one()
            run = session.execute(
                sa.select(Run.id, Run.version)
                .where(
                    Run.definition_id == miss.definition_id,
                    Run.slot_key == miss.slot_key,
                    Run.kind == RunKind.scheduled.value,
                )
                .order_by(Run.id)
                .limit(1)
            ).one_or_none()
            return _Claimed(
                id=miss.id,
                attempt=miss.alert_attempts,
                unknown=unknown,
                channel=miss.alert_channel or "",
                to=miss.alert_to or "",
                tenant=names[0],
                definition=names[1],
                slot_key=miss.slot_key,
                fire_at=miss.fire_at,
                deadline=miss.deadline,
                detected_at=miss.detected_at,
                state=miss.state,
                reason=miss.reason,
                run_id=None if run is None else int(run[0]),
                version=int(run[1]) if run is not None else int(names[2]),
            )

    # -- send ----------------------------------------------------------------------------

    def message(self, claimed: _Claimed) -> Message:
        """The alert's message (module docstring)."""
        window = claimed.deadline - claimed.fire_at
        minutes = int(window.total_seconds() // 60)
        within = f"{minutes // 60}h{minutes % 60:02d}m" if minutes >= 60 else f"{minutes}m"
        lines = [
            ("Definition", f"{claimed.definition} (tenant {claimed.tenant})"),
            ("Slot", claimed.slot_key),
            ("Fire time", format_instant(claimed.fire_at)),
            ("Deadline", f"{format_instant(claimed.deadline)} (delivered within {within})"),
            ("State", claimed.state),
            ("Reason", claimed.reason or "—"),
        ]
        if self.base_url is not None:
            if claimed.run_id is not None:
                lines.append(("Run", f"{self.base_url}/nbcast/runs/{claimed.run_id}"))
            name = quote(claimed.definition, safe="")
            lines.append(("Definition page", f"{self.base_url}/nbcast/definitions/{name}"))
        subject = f"SLA missed: {claimed.definition} — {claimed.slot_key}"
        text = "\n".join([subject, "", *(f"{k}: {v}" for k, v in lines)]) + "\n"
        rows = "".join(f"<tr><th>{escape(k)}</th><td>{_html_value(v)}</td></tr>" for k, v in lines)
        html = (
            f"<p>{escape(claimed.definition)} was not delivered within its SLA for slot "
            f"{escape(claimed.slot_key)}.</p><table>{rows}</table>"
        )
        report = ReportInfo(
            tenant=claimed.tenant,
            definition=claimed.definition,
            version=claimed.version,
            run_id=claimed.run_id or 0,
            slot_key=claimed.slot_key,
            fire_at=claimed.fire_at,
            finished_at=claimed.detected_at,
            description=subject,
        )
        return Message(
            key=f"nbcast-sla{claimed.id}",
            delivery_id=0,
            attempt=claimed.attempt,
            recipient=claimed.to,
            report=report,
            subject=subject,
            html=html,
            text=text,
        )

    def _send(self, claimed: _Claimed) -> None:
        channel = self.channels.get(claimed.channel)
        if channel is None:
            missing = f"the {claimed.channel!r} channel is not configured on this worker"
            self._record(claimed, FAILED, {"reason": "no_channel", "message": missing[:200]})
            return
        spent = claimed.attempt > max(int(channel.max_attempts), 1)
        if spent:  # the attempts ran out on claims that never recorded an answer
            self._record(claimed, FAILED, {"reason": "outcome_unknown", "message": "spent"})
            return
        try:
            message = self.message(claimed)
        except Exception as exc:
            self._record(claimed, FAILED, _error("prepare_failed", exc))
            return
        duplicate = False
        if claimed.unknown:
            try:
                found = channel.check(message)
            except PermanentChannelError:
                found = None
            except ChannelError as exc:  # cannot look now: look again later
                self._retry(claimed, channel, exc, unknown=True)
                return
            if found is not None:
                self._sent(claimed, found, duplicate=False)
                return
            duplicate = not channel.verifiable
        try:
            receipt = channel.send(message)
        except OutcomeUnknownError as exc:
            self._retry(claimed, channel, exc, unknown=True)
            return
        except TransientChannelError as exc:
            self._retry(claimed, channel, exc, unknown=False, retry_after=exc.retry_after)
            return
        except PermanentChannelError as exc:
            self._record(claimed, FAILED, _error("refused", exc))
            return
        except Exception as exc:  # a channel's bug: it may have sent
            log.exception("SLA alert %d: the %s channel failed", claimed.id, claimed.channel)
            self._retry(claimed, channel, exc, unknown=True)
            return
        crash_point("after_alert_send")
        self._sent(claimed, receipt, duplicate=duplicate)

    # -- record --------------------------------------------------------------------------

    def _sent(self, claimed: _Claimed, receipt: Receipt, *, duplicate: bool) -> None:
        log.info("SLA alert %d sent to %s: %s", claimed.id, claimed.to, receipt.detail)
        detail = {"possible_duplicate": True} if duplicate else None
        self._record(claimed, SENT, detail, alerted_at=self.clock.now())

    def _retry(
        self,
        claimed: _Claimed,
        channel: Channel,
        exc: Exception,
        *,
        unknown: bool,
        retry_after: float | None = None,
    ) -> None:
        reason = "outcome_unknown" if unknown else "max_attempts"
        error = {**_error(reason, exc), "outcome_unknown": unknown}
        if claimed.attempt >= max(int(channel.max_attempts), 1):
            self._record(claimed, FAILED, error)
            return
        error["reason"] = "retry"
        delay = retry_delay(claimed.attempt, channel, retry_after)
        self._record(claimed, PENDING, error, alert_not_before=self.clock.now() + delay)

    def _record(
        self, claimed: _Claimed, state: str, error: dict[str, Any] | None, **values: Any
    ) -> bool:
        """Write an answer, fenced by the claim's attempt and lease owner; False when
        the lease was lost (another worker holds the alert now)."""
        with self.db.session() as session:
            result = session.execute(
                sa.update(SlaMiss)
                .where(SlaMiss.id == claimed.id, held(ALERT_LEASE, self.owner, claimed.attempt))
                .values(alert_state=state, alert_error=error, **released(ALERT_LEASE), **values)
            )
            written = bool(rowcount(result))
        if not written:
            log.warning("SLA alert %d: lease lost before its answer was recorded", claimed.id)
        return written


def _error(reason: str, exc: BaseException) -> dict[str, Any]:
    return {"reason": reason, **error_detail(exc)}


def _html_value(value: str) -> str:
    if value.startswith(("https://", "http://")):
        return f'<a href="{escape(value, quote=True)}">{escape(value)}</a>'
    return escape(value)
