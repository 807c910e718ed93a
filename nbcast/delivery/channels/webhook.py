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

The body's ``links`` are the same on every attempt too, tokens and all: the ledger
hands a delivery's links out again (:func:`~nbcast.delivery.links.delivery_link`), so
a receiver that got a notice twice holds one link per file, not one per attempt —
unless a link was revoked or expired in between, when a fresh one replaces it.

Where it may post: only to URLs the :class:`~nbcast.delivery.webhook_policy.WebhookPolicy`
allows (HTTPS to public addresses unless ``NBCAST_WEBHOOK_ALLOW_HTTP`` and
``NBCAST_WEBHOOK_ALLOWED_HOSTS`` say otherwise). The policy is enforced when the
request is made, with the address pinned: each new connection resolves the host once,
judges every address, and connects to one of those judged addresses — the URL's host
still goes in the ``Host`` header and is what TLS sends as SNI and verifies the
certificate against. (The pin lives in the connection layer rather than in a URL
rewritten to an IP, so that keep-alive connections stay per host name and a
connection verified for one name is never reused for another name on the same
address.) Proxies from the environment are not used: a proxy would resolve the name
itself. Redirects are not followed. A refused URL fails at once; nothing is sent.

How long it may take: every request has a total deadline,
:attr:`WebhookChannel.total_timeout` (default :data:`DEFAULT_TOTAL_TIMEOUT`, 30 s; at
most :data:`MAX_TOTAL_TIMEOUT`, 5 minutes), that covers connecting, TLS, sending,
every read of the answer — ``1xx`` informational answers included — and draining its
body. httpx's own timeouts (``timeout``, 10 s) count per operation: a receiver that
trickles its status line or headers a byte every few seconds, or sends ``102
Processing`` forever, never trips them, and a sender thread would wait on it
indefinitely while the other rows of its batch wait too. So the pinned connection's
network stream (:class:`_DeadlineStream`) cuts every read and write timeout to what
is left of the current request's deadline (a context variable set around the
request, so a kept-alive connection obeys whichever request uses it). A request that
runs out of time is an :class:`~nbcast.errors.OutcomeUnknownError` once anything was
sent (the receiver may have got it), a :class:`~nbcast.errors.TransientChannelError`
while still connecting. (Looking the host name up is the system resolver's, with its
own timeouts, and comes before the deadline's first check.)

What is kept: the receipt holds the status and a few response headers
(``content-type``, ``content-length``, ``x-request-id``, ``request-id``; each value at
most 100 characters) — never the response body, which is read (at most 64 KiB, to
reuse the connection) and dropped.

Error mapping:

==============================================  =======================================
What happened                                   Raised
==============================================  =======================================
2xx                                             (a Receipt: status and header summary)
408, 425, 429, 5xx                              TransientChannelError, ``retry_after``
                                                from ``Retry-After`` (seconds or date,
                                                bounded; nonsense is ignored)
3xx, other 4xx (404, 410 Gone, 401, …)          PermanentChannelError (redirects are
                                                not followed: a moved hook is config)
a URL or an address the policy refuses          PermanentChannelError (nothing sent)
connect error or timeout, pool timeout, a       TransientChannelError (nothing sent)
name that does not resolve
read timeout, write error, disconnect before    OutcomeUnknownError
the status line, the total deadline passed
after connecting
==============================================  =======================================

Connections: one :class:`httpx.Client` (keep-alive pool) per channel, closed by
:meth:`WebhookChannel.close`. httpx clients are thread-safe, and so is this channel.
"""

from __future__ import annotations

import contextvars
import hashlib
import hmac
import json
import math
import socket
import ssl
import time
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar
from urllib.parse import urlsplit, urlunsplit

import httpcore
import httpx

from nbcast.definitions.recipients import is_masked_url
from nbcast.delivery.channels._peer import parse_retry_after, peer_text
from nbcast.delivery.channels.base import Channel, Message, Receipt
from nbcast.delivery.webhook_policy import (
    Resolver,
    WebhookPolicy,
    check_webhook_url,
    load_webhook_policy,
    resolve_webhook_host,
    webhook_url_problem,
)
from nbcast.errors import (
    ConfigError,
    OutcomeUnknownError,
    PermanentChannelError,
    TransientChannelError,
)
from nbcast.limits import clip

if TYPE_CHECKING:
    from nbcast.delivery.settings import DeliverySettings

__all__ = [
    "DEFAULT_TOTAL_TIMEOUT",
    "MAX_TOTAL_TIMEOUT",
    "WebhookChannel",
    "payload",
    "sign",
    "verify_signature",
]

DEFAULT_TOTAL_TIMEOUT = 30.0
"""Seconds one webhook request may take in all (module docstring)."""

MAX_TOTAL_TIMEOUT = 300.0
"""The largest :attr:`WebhookChannel.total_timeout` accepted (seconds)."""

_TRANSIENT_STATUSES = frozenset({408, 425, 429})
_RECEIPT_HEADERS = ("content-type", "content-length", "x-request-id", "request-id")
_HEADER_VALUE_LIMIT = 100
_DEFAULT_PORTS = {"https": 443, "http": 80}
_DRAIN_LIMIT = 64 * 1024
"""Bytes of a response body read (and dropped) so its connection can be reused."""
_WRITE_CHUNK = 16 * 1024
"""Bytes handed to the socket per write, so that each write is bounded by the deadline."""

_DEADLINE: contextvars.ContextVar[tuple[float, float] | None] = contextvars.ContextVar(
    "nbcast_webhook_deadline", default=None
)
"""``(monotonic deadline, total seconds)`` of the request under way in this context."""


_OVERTIME = "the request took longer than its total time limit of {:g}s"


def _left(timeout: float | None, error: type[Exception]) -> float | None:
    """``timeout`` cut to what is left of the current request's deadline; ``error``
    when nothing is left."""
    current = _DEADLINE.get()
    if current is None:
        return timeout
    deadline, total = current
    left = deadline - time.monotonic()
    if left <= 0:
        raise error(_OVERTIME.format(total))
    return left if timeout is None else min(timeout, left)


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


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every read and write ends by the current request's
    deadline (module docstring), whatever timeout httpcore asks for."""

    def __init__(self, stream: httpcore.NetworkStream) -> None:
        self._stream = stream

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return self._stream.read(max_bytes, _left(timeout, httpcore.ReadTimeout))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        # httpcore's stream resets the socket timeout for each send() it loops over;
        # smaller pieces bring the deadline back in between.
        for start in range(0, len(buffer), _WRITE_CHUNK):
            piece = buffer[start : start + _WRITE_CHUNK]
            self._stream.write(piece, _left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._stream.close()

    def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.NetworkStream:
        left = _left(timeout, httpcore.ConnectTimeout)
        return _DeadlineStream(self._stream.start_tls(ssl_context, server_hostname, left))

    def get_extra_info(self, info: str) -> Any:
        return self._stream.get_extra_info(info)


class _PinnedBackend(httpcore.SyncBackend):
    """Opens each connection to an address the policy judged, from one lookup, as a
    stream that keeps to the request's deadline (:class:`_DeadlineStream`)."""

    def __init__(self, policy: WebhookPolicy, resolver: Resolver) -> None:
        self.policy = policy
        self.resolver = resolver

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[Any] | None = None,
    ) -> httpcore.NetworkStream:
        try:  # ConfigError (refused) passes through httpcore and httpx untouched
            addresses = resolve_webhook_host(host, port, self.policy, resolver=self.resolver)
        except OSError as exc:  # no such name: nothing was sent
            raise httpcore.ConnectError(f"{host} does not resolve: {exc}") from exc
        failure: Exception | None = None
        for address in addresses:
            left = _left(timeout, httpcore.ConnectTimeout)
            try:
                stream = super().connect_tcp(
                    str(address), port, left, local_address, socket_options
                )
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                failure = exc
            else:
                return _DeadlineStream(stream)
        assert failure is not None
        raise failure


class _PinnedTransport(httpx.HTTPTransport):
    """httpx's transport over a connection pool whose connections are pinned
    (:class:`_PinnedBackend`): the URL, the ``Host`` header and TLS (SNI and the
    certificate's name) keep the host name; only the TCP connection uses the judged
    address."""

    def __init__(
        self,
        policy: WebhookPolicy,
        *,
        verify: ssl.SSLContext | bool,
        resolver: Resolver,
        limits: httpx.Limits,
    ) -> None:
        super().__init__(verify=verify, limits=limits)
        # httpx builds its pool without a way to pass a network backend; this one
        # is built the same way (see httpx.HTTPTransport.__init__), with ours.
        self._pool = httpcore.ConnectionPool(
            ssl_context=httpx.create_ssl_context(verify=verify),
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=_PinnedBackend(policy, resolver),
        )


class WebhookChannel(Channel):
    """POSTs signed delivery notices to URLs (module docstring).

    ``policy`` says which URLs may be reached (default: HTTPS to public addresses
    only); ``verify`` is httpx's TLS verification (True, or an
    :class:`ssl.SSLContext` trusting a private CA); ``resolver`` looks host names up
    (:func:`socket.getaddrinfo`). ``timeout`` bounds each network operation and
    ``total_timeout`` the whole request; either must be a finite number of seconds
    above 0, and ``total_timeout`` at most :data:`MAX_TOTAL_TIMEOUT`
    (:class:`~nbcast.errors.ConfigError` otherwise).
    """

    configured_by = "NBCAST_WEBHOOK_SECRET"

    name: ClassVar[str] = "webhook"
    sends_links: ClassVar[bool] = True

    total_timeout: float = DEFAULT_TOTAL_TIMEOUT
    """Seconds one request may take in all — connect, TLS, send, every read (``1xx``
    answers included) and the drained body (module docstring). Running out after
    connecting is an :class:`~nbcast.errors.OutcomeUnknownError`."""

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str], settings: DeliverySettings
    ) -> WebhookChannel | None:
        """Configured by ``NBCAST_WEBHOOK_SECRET`` (and the policy's
        ``NBCAST_WEBHOOK_ALLOW_HTTP``, ``NBCAST_WEBHOOK_ALLOWED_HOSTS``); None without
        a secret."""
        if not settings.webhook_secret:
            return None
        return cls(settings.webhook_secret, policy=settings.webhook_policy)

    @classmethod
    def check_recipient(cls, to: str) -> str | None:
        """An ``http(s)://`` URL with a host and no credentials
        (:func:`~nbcast.delivery.webhook_policy.webhook_url_problem`)."""
        return webhook_url_problem(to)

    @classmethod
    def normalize_recipient(cls, to: str) -> str:
        """The endpoint ``to`` POSTs to, spelled one way: scheme and host lower-case
        (they are case-insensitive, RFC 3986 §6.2.2.1), no default port (``:443`` for
        https, ``:80`` for http), ``/`` for an empty path and no fragment (neither is
        sent), path and query as given (they may be case-sensitive). So
        ``https://Hooks.Example.com:443/x`` and ``https://hooks.example.com/x`` are one
        recipient. What does not parse as a webhook URL is returned as it is."""
        try:
            parts = urlsplit(to)
            port = parts.port
        except ValueError:
            return to
        host = parts.hostname
        if parts.scheme not in _DEFAULT_PORTS or not host or "@" in parts.netloc:
            return to
        if ":" in host:  # an IPv6 literal keeps its brackets
            host = f"[{host}]"
        if port is not None and port != _DEFAULT_PORTS[parts.scheme]:
            host = f"{host}:{port}"
        return urlunsplit((parts.scheme, host, parts.path or "/", parts.query, ""))

    @classmethod
    def check_recipient_here(cls, to: str, environ: Mapping[str, str]) -> str | None:
        """The URL against the configured policy, without resolving its host
        (:func:`~nbcast.delivery.webhook_policy.check_webhook_url`). A URL as
        non-admins are shown it (``https://hooks.example.com/…a1b2``:
        :mod:`nbcast.definitions.recipients`) is refused too: it is what a version
        exported by an author holds, and posts nowhere. (Here rather than in
        :meth:`check_recipient`, which every parse of a stored block runs: a masked
        block must still parse.)"""
        if is_masked_url(to):
            return (
                f"{clip(to)} is a masked webhook URL (only the tenant's admins see "
                "webhook URLs whole): give the whole URL"
            )
        try:
            check_webhook_url(to, load_webhook_policy(environ), resolve=False)
        except ConfigError as exc:
            return str(exc)
        return None

    def __init__(
        self,
        secret: str | bytes,
        *,
        timeout: float = 10.0,
        total_timeout: float = DEFAULT_TOTAL_TIMEOUT,
        policy: WebhookPolicy | None = None,
        verify: ssl.SSLContext | bool = True,
        resolver: Resolver = socket.getaddrinfo,
    ) -> None:
        self.secret = secret
        self.total_timeout = _seconds("total_timeout", total_timeout, MAX_TOTAL_TIMEOUT)
        self.timeout = min(_seconds("timeout", timeout, MAX_TOTAL_TIMEOUT), self.total_timeout)
        self.policy = policy if policy is not None else WebhookPolicy()
        limits = httpx.Limits(max_connections=100, max_keepalive_connections=20)
        transport = _PinnedTransport(self.policy, verify=verify, resolver=resolver, limits=limits)
        # A transport of our own also means no proxy from the environment.
        self.client = httpx.Client(timeout=timeout, transport=transport, follow_redirects=False)

    def send(self, message: Message) -> Receipt:
        """POST ``message``'s notice to its recipient URL (error mapping: module doc)."""
        try:
            check_webhook_url(message.recipient, self.policy, resolve=False)
        except ConfigError as exc:
            raise PermanentChannelError(f"webhook URL refused: {exc}") from None
        body = json.dumps(payload(message), separators=(",", ":"), sort_keys=True).encode()
        timestamp = int(time.time())
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "nbcast-webhook",
            "X-Nbcast-Timestamp": str(timestamp),
            "X-Nbcast-Signature": sign(self.secret, timestamp, body),
            "X-Nbcast-Delivery": message.key,
        }
        deadline = time.monotonic() + self.total_timeout
        token = _DEADLINE.set((deadline, self.total_timeout))
        try:
            with self.client.stream(
                "POST",
                message.recipient,
                content=body,
                headers=headers,
                # Per operation; the wait for a free pooled connection is bounded by
                # it too and counts against the deadline, which the streams enforce.
                timeout=httpx.Timeout(self.timeout),
                follow_redirects=False,
            ) as response:
                status = response.status_code
                summary = _header_summary(response)
                retry_after = parse_retry_after(response.headers.get("Retry-After"))
                _drain(response, min(deadline, time.monotonic() + self.timeout))
        except ConfigError as exc:  # the policy refused an address: nothing was sent
            raise PermanentChannelError(f"webhook URL refused: {exc}") from None
        except (httpx.ConnectError, httpx.ConnectTimeout, httpx.PoolTimeout) as exc:
            raise TransientChannelError(f"webhook unreachable: {peer_text(repr(exc))}") from exc
        except (httpx.TimeoutException, httpx.NetworkError, httpx.RemoteProtocolError) as exc:
            if time.monotonic() >= deadline:
                text = _OVERTIME.format(self.total_timeout)
                raise OutcomeUnknownError(f"webhook did not answer: {text}") from exc
            raise OutcomeUnknownError(f"webhook did not answer: {peer_text(repr(exc))}") from exc
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            raise PermanentChannelError(f"webhook URL is not usable: {peer_text(exc)}") from exc
        finally:
            _DEADLINE.reset(token)
        if 200 <= status < 300:
            return Receipt({"status": status, "headers": summary})
        text = f"webhook answered HTTP {status}"
        if status in _TRANSIENT_STATUSES or status >= 500:
            raise TransientChannelError(text, retry_after=retry_after)
        raise PermanentChannelError(text)

    def close(self) -> None:
        """Close the connection pool."""
        self.client.close()


def _seconds(what: str, value: float, ceiling: float) -> float:
    """A configured number of seconds: finite, above 0, at most ``ceiling``."""
    try:
        seconds = float(value)
    except (TypeError, ValueError):
        seconds = math.nan
    if not math.isfinite(seconds) or not 0 < seconds <= ceiling:
        raise ConfigError(f"webhook {what} must be a number of seconds in (0, {ceiling:g}]")
    return seconds


def _header_summary(response: httpx.Response) -> dict[str, str]:
    """The few response headers a receipt keeps, each value cut short."""
    return {
        name: peer_text(response.headers[name], _HEADER_VALUE_LIMIT)
        for name in _RECEIPT_HEADERS
        if name in response.headers
    }


def _drain(response: httpx.Response, deadline: float) -> None:
    """Read a little of the body and drop it: a fully read response lets its
    connection be reused; a longer or slower one is cut off (and its connection
    closed). The answer is the status, whatever happens here."""
    read = 0
    try:
        for chunk in response.iter_raw():
            read += len(chunk)
            if read > _DRAIN_LIMIT or time.monotonic() > deadline:
                break
    except httpx.HTTPError:
        pass
