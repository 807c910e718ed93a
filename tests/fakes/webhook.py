"""An HTTP receiver on 127.0.0.1 that records every request and answers as told.

::

    with webhook_receiver() as hook:
        hook.respond(503, headers={"Retry-After": "7"})   # the next request
        channel.send(Message(..., recipient=hook.url, ...))
        hook.requests[0].header("X-Nbcast-Signature")

By default it answers ``200`` with ``{"ok": true}``. :meth:`WebhookReceiver.respond`
queues answers for the next requests, in order (a ``delay`` longer than the client's
timeout plays "received, then the answer was lost"); ``default=`` replaces the
answer given when the queue is empty. Records are appended under a lock.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator, Mapping

from tests.fakes import HTTPReply, HTTPRequest, LocalHTTPServer

__all__ = ["WebhookReceiver", "webhook_receiver"]

OK = HTTPReply(200, b'{"ok": true}', {"Content-Type": "application/json"})


class WebhookReceiver:
    """A running webhook receiver; see the module docstring."""

    def __init__(self, *, default: HTTPReply = OK) -> None:
        self.default = default
        self._lock = threading.Lock()
        self._requests: list[HTTPRequest] = []
        self._queued: list[HTTPReply] = []
        self._http = LocalHTTPServer(self._handle)
        self.url = f"{self._http.root}/hooks/nbcast"

    def start(self) -> WebhookReceiver:
        self._http.start()
        return self

    def stop(self) -> None:
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
def webhook_receiver(*, default: HTTPReply = OK) -> Iterator[WebhookReceiver]:
    """A started :class:`WebhookReceiver`, stopped on exit."""
    with WebhookReceiver(default=default) as receiver:
        yield receiver
