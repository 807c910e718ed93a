"""Real protocol peers for tests: they listen on 127.0.0.1 and speak the protocol.

- :mod:`tests.fakes.smtp` — an aiosmtpd server (``smtp_server(...)``)
- :mod:`tests.fakes.slack_api` — the slice of Slack's Web API that slack_sdk uses
  (``slack_server(...)``)
- :mod:`tests.fakes.webhook` — an HTTP receiver (``webhook_receiver(...)``)

This module holds the plumbing the two HTTP peers share: :class:`LocalHTTPServer`, a
``ThreadingHTTPServer`` on a random port in a daemon thread that hands each request
to a function and writes back the :class:`HTTPReply` it returns — after a delay, if
the reply asks for one, which is how "accepted, then the answer was lost" is played.
Stopping the server cuts every pending delay short.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["HTTPReply", "HTTPRequest", "LocalHTTPServer"]


@dataclass(frozen=True)
class HTTPRequest:
    """One request as the peer received it."""

    method: str
    path: str
    """The path without the query string."""
    query: dict[str, list[str]]
    headers: dict[str, str]
    """Header names lower-cased."""
    body: bytes
    received_at: float
    peer: tuple[str, int]
    """The client's address: the same port means the same (kept-alive) connection."""

    def header(self, name: str, default: str | None = None) -> str | None:
        """A header's value by case-insensitive name."""
        return self.headers.get(name.lower(), default)


@dataclass(frozen=True)
class HTTPReply:
    """What to answer: status, headers, body, and how long to wait first."""

    status: int = 200
    body: bytes = b""
    headers: Mapping[str, str] = field(default_factory=dict)
    delay: float = 0.0


class LocalHTTPServer:
    """An HTTP/1.1 server on 127.0.0.1 answering with ``app(request)``."""

    def __init__(self, app: Callable[[HTTPRequest], HTTPReply]) -> None:
        self._app = app
        self._stopping = threading.Event()
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                url = urlsplit(self.path)
                request = HTTPRequest(
                    method=self.command,
                    path=url.path,
                    query=parse_qs(url.query),
                    headers={k.lower(): v for k, v in self.headers.items()},
                    body=body,
                    received_at=time.time(),
                    peer=(str(self.client_address[0]), int(self.client_address[1])),
                )
                reply = outer._app(request)
                if reply.delay and outer._stopping.wait(reply.delay):
                    self.close_connection = True
                    return
                with contextlib.suppress(OSError):
                    self.send_response(reply.status)
                    for name, value in reply.headers.items():
                        self.send_header(name, value)
                    self.send_header("Content-Length", str(len(reply.body)))
                    self.end_headers()
                    self.wfile.write(reply.body)

            do_GET = _serve
            do_POST = _serve
            do_PUT = _serve

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.root = f"http://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"fake-http-{self.port}",
            daemon=True,
        )

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread.start()

    def stop(self) -> None:
        """Stop serving; delayed replies are dropped."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
