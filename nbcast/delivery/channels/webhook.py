"""The ``webhook`` channel: a signed JSON POST to the recipient URL.

The body says which report is ready, where its signed links are and what its files
are (name, type, size, sha256 — never the bytes)::

    {"type": "nbcast.delivery", "key": "nbcast-d7-r42", "delivery_id": 7, "attempt": 1,
     "subject": "...", "report": {"tenant": ..., "definition": ..., "version": 3,
     "run_id": 42, "slot_key": "2026-10-30T07:00", "fire_at": "2026-10-30T06:00:00+00:00",
     "finished_at": ..., "late_by": null}, "links": [...], "attachments": [...]}

Headers, in the manner of Stripe and GitHub:

- ``X-Nbcast-Timestamp``: Unix seconds when the request was signed;
- ``X-Nbcast-Signature: sha256=<hex HMAC-SHA256 of "{timestamp}.{body}">`` with the
  shared secret — receivers check it with :func:`verify_signature`, which also
  refuses a timestamp outside a tolerance (replays);
- ``X-Nbcast-Delivery``: the ledger key, the same on every attempt: an idempotency
  key for receivers, since a webhook cannot be asked afterwards whether it got one
  (:meth:`~nbcast.delivery.channels.base.Channel.check` stays None).

Error mapping:

==============================================  =======================================
What happened                                   Raised
==============================================  =======================================
2xx                                             (a Receipt: status and the response's
                                                first 200 characters)
408, 425, 429, 5xx                              TransientChannelError, ``retry_after``
                                                from ``Retry-After`` (seconds or date)
3xx, other 4xx (404, 410 Gone, 401, …)          PermanentChannelError (redirects are
                                                not followed: a moved hook is config)
connect error or timeout, pool timeout          TransientChannelError (nothing sent)
read timeout, write error, disconnect before    OutcomeUnknownError
the status line
==============================================  =======================================

Connections: one :class:`httpx.Client` (keep-alive pool) per channel, closed by
:meth:`WebhookChannel.close` unless the caller passed its own ``client``. httpx
clients are thread-safe, and so is this channel.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any, ClassVar

import httpx

from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.errors import OutcomeUnknownError, PermanentChannelError, TransientChannelError

__all__ = ["WebhookChannel", "payload", "sign", "verify_signature"]

_TRANSIENT_STATUSES = frozenset({408, 425, 429})


def sign(secret: str | bytes, timestamp: int | str, body: bytes) -> str:
    """The ``X-Nbcast-Signature`` value for ``body`` sent at ``timestamp``."""
    key = secret.encode() if isinstance(secret, str) else secret
    digest = hmac.new(key, f"{timestamp}.".encode() + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def verify_signature(
    secret: str | bytes,
    timestamp: str | int,
    body: bytes,
    signature: str,
    tolerance_s: float = 300,
    now: float | None = None,
) -> bool:
    """Whether ``signature`` (the ``X-Nbcast-Signature`` header) signs ``body`` with
    ``secret`` at ``timestamp`` (``X-Nbcast-Timestamp``), and that timestamp is
    within ``tolerance_s`` seconds of ``now``. Compares in constant time."""
    try:
        sent_at = int(timestamp)
    except (TypeError, ValueError):
        return False
    current = time.time() if now is None else now
    if abs(current - sent_at) > tolerance_s:
        return False
    return hmac.compare_digest(sign(secret, sent_at, body), signature)


def payload(message: Message) -> dict[str, Any]:
    """The JSON document posted for ``message`` (module docstring)."""
    report = message.report
    return {
        "type": "nbcast.delivery",
        "key": message.key,
        "delivery_id": message.delivery_id,
        "attempt": message.attempt,
        "subject": message.subject,
        "report": {
            "tenant": report.tenant,
            "definition": report.definition,
            "version": report.version,
            "run_id": report.run_id,
            "slot_key": report.slot_key,
            "fire_at": report.fire_at.isoformat(),
            "finished_at": report.finished_at.isoformat(),
            "late_by": None if report.late_by is None else report.late_by.total_seconds(),
        },
        "links": list(message.links),
        "attachments": [
            {
                "filename": a.filename,
                "media_type": a.media_type,
                "size": len(a.content),
                "sha256": hashlib.sha256(a.content).hexdigest(),
            }
            for a in message.attachments
        ],
    }


class WebhookChannel(Channel):
    """POSTs signed delivery notices to URLs (module docstring)."""

    name: ClassVar[str] = "webhook"

    def __init__(
        self,
        secret: str | bytes,
        *,
        timeout: float = 10.0,
        client: httpx.Client | None = None,
    ) -> None:
        self.secret = secret
        self.timeout = timeout
        self._owns_client = client is None
        self.client = client if client is not None else httpx.Client(timeout=timeout)

    def send(self, message: Message) -> Receipt:
        """POST ``message``'s notice to its recipient URL (error mapping: module doc)."""
        body = json.dumps(payload(message), separators=(",", ":"), sort_keys=True).encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "nbcast-webhook",
            "X-Nbcast-Timestamp": str(timestamp),
            "X-Nbcast-Signature": sign(self.secret, timestamp, body),
            "X-Nbcast-Delivery": message.key,
        }
        try:
            response = self.client.post(
                message.recipient, content=body, headers=headers, timeout=self.timeout
            )
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise TransientChannelError(f"webhook unreachable: {exc!r}") from exc
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            raise OutcomeUnknownError(f"webhook did not answer: {exc!r}") from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise PermanentChannelError(f"webhook URL is not usable: {exc}") from exc
        status = response.status_code
        if 200 <= status < 300:
            return Receipt({"status": status, "response": response.text[:200]})
        text = f"webhook answered HTTP {status}"
        if status in _TRANSIENT_STATUSES or status >= 500:
            retry_after = _retry_after(response.headers.get("Retry-After"))
            raise TransientChannelError(text, retry_after=retry_after)
        raise PermanentChannelError(text)

    def close(self) -> None:
        """Close the connection pool (if this channel made it)."""
        if self._owns_client:
            self.client.close()


def _retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` value: delay-seconds or an HTTP-date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - (now or datetime.now(UTC))).total_seconds())
