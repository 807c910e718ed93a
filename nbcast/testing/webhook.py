"""An HTTP receiver on 127.0.0.1 that records every request and answers as told.

Only the standard library::

    from nbcast.testing.webhook import webhook_receiver

    with webhook_receiver() as hook:
        hook.respond(503, headers={"Retry-After": "7"})   # the next request
        channel.send(Message(..., recipient=hook.url, ...))
        hook.requests[0].header("X-Nbcast-Signature")

By default it answers ``200`` with ``{"ok": true}``. :meth:`WebhookReceiver.respond`
queues answers for the next requests, in order (a ``delay`` longer than the client's
timeout plays "received, then the answer was lost"); ``default=`` replaces the
answer given when the queue is empty. Records are appended under a lock.

``tls=`` (a server-side :class:`ssl.SSLContext`) makes it an HTTPS receiver, and
``host=`` the host name its :attr:`~WebhookReceiver.url` uses (it still listens on
127.0.0.1; the name must resolve there, or be pinned there by the channel's
resolver).

Webhook URLs on 127.0.0.1 are refused by nbcast's default webhook policy; a test
allows them as a user's test would::

    WebhookChannel(secret, policy=WebhookPolicy(allow_http=True, allowed=("127.0.0.1",)))

:func:`garbage_receiver` is a TCP listener that answers every request with bytes
that are not HTTP at all.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
from collections.abc import Iterator, Mapping

from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer

__all__ = ["OK", "GarbageReceiver", "WebhookReceiver", "garbage_receiver", "webhook_receiver"]

OK = HTTPReply(200, b'{"ok": true}', {"Content-Type": "application/json"})
"""The receiver's default answer."""


class WebhookReceiver:
    """A running webhook receiver; see the module docstring."""

    def __init__(
        self,
        *,
        default: HTTPReply = OK,
        tls: ssl.SSLContext | None = None,
        host: str = "127.0.0.1",
    ) -> None:
        self.default = default
        self._lock = threading.Lock()
        self._requests: list[HTTPRequest] = []
        self._queued: list[HTTPReply] = []
        self._http = LocalHTTPServer(self._handle, tls=tls)
        self.port = self._http.port
        self.url = f"{'https' if tls else 'http'}://{host}:{self.port}/hooks/nbcast"

    def start(self) -> WebhookReceiver:
        """Serve in a daemon thread."""
        self._http.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed answers are dropped."""
        self._http.stop()

    def __enter__(self) -> WebhookReceiver:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()

    @property
    def requests(self) -> list[HTTPRequest]:
        """Requests received so far (a snapshot)."""
        with self._lock:
            return list(self._requests)

    def respond(
        self,
        status: int,
        *,
        body: bytes = b"",
        headers: Mapping[str, str] | None = None,
        delay: float = 0.0,
        times: int = 1,
    ) -> None:
        """Answer the next ``times`` requests so (after any answers queued before)."""
        reply = HTTPReply(status, body, dict(headers or {}), delay=delay)
        with self._lock:
            self._queued.extend([reply] * times)

    def _handle(self, request: HTTPRequest) -> HTTPReply:
        with self._lock:
            self._requests.append(request)
            return self._queued.pop(0) if self._queued else self.default


@contextlib.contextmanager
def webhook_receiver(
    *, default: HTTPReply = OK, tls: ssl.SSLContext | None = None, host: str = "127.0.0.1"
) -> Iterator[WebhookReceiver]:
    """A started :class:`WebhookReceiver`, stopped on exit."""
    with WebhookReceiver(default=default, tls=tls, host=host) as receiver:
        yield receiver


class GarbageReceiver:
    """A TCP listener on 127.0.0.1 that reads each request and answers ``answer`` —
    bytes that are not an HTTP response — then closes the connection."""

    def __init__(self, answer: bytes = b"\x00\x01garbage, not HTTP\xff\r\n\r\n") -> None:
        self.answer = answer
        self.connections = 0
        self._lock = threading.Lock()
        self._socket = socket.create_server(("127.0.0.1", 0))
        self._socket.settimeout(0.1)
        self._stopping = threading.Event()
        self.port: int = self._socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/nbcast"
        self._thread = threading.Thread(
            target=self._serve, name="nbcast-testing-garbage", daemon=True
        )

    def _serve(self) -> None:
        while not self._stopping.is_set():
            try:
                conn, _ = self._socket.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            with self._lock:
                self.connections += 1
            with conn, contextlib.suppress(OSError):
                conn.settimeout(2.0)
                received = b""
                while b"\r\n\r\n" not in received and len(received) < 65536:
                    chunk = conn.recv(65536)
                    if not chunk:
                        break
                    received += chunk
                conn.sendall(self.answer)

    def __enter__(self) -> GarbageReceiver:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stopping.set()
        self._thread.join(timeout=5)
        self._socket.close()


@contextlib.contextmanager
def garbage_receiver(answer: bytes | None = None) -> Iterator[GarbageReceiver]:
    """A started :class:`GarbageReceiver`, stopped on exit."""
    receiver = GarbageReceiver() if answer is None else GarbageReceiver(answer)
    with receiver:
        yield receiver
