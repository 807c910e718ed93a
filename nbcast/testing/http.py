"""A small HTTP/1.1 server on 127.0.0.1 that answers with a function: :class:`LocalHTTPServer`.

The fake Slack Web API (:mod:`nbcast.testing.slack_api`) and the webhook receiver
(:mod:`nbcast.testing.webhook`) are built on it; it is public so a test can play any
other HTTP peer the same way::

    from nbcast.testing.http import HTTPReply, HTTPRequest, LocalHTTPServer

    def app(request: HTTPRequest) -> HTTPReply:
        if request.path == "/health":
            return HTTPReply(200, b"ok")
        return HTTPReply(503, headers={"Retry-After": "2"}, delay=0.5)

    with LocalHTTPServer(app) as server:
        httpx.get(f"{server.root}/health")        # 200 ok

Design decisions
----------------
* A ``ThreadingHTTPServer`` on a random port in a daemon thread hands each request to
  ``app`` and writes back the :class:`HTTPReply` it returns — after ``delay`` seconds,
  if the reply asks for one, which is how "accepted, then the answer was lost" is
  played. Stopping the server cuts every pending delay short (the connection is closed
  without an answer).
* GET, POST and PUT are served; the request body is read by ``Content-Length``.
* ``tls=`` (a server-side :class:`ssl.SSLContext`) makes it an HTTPS server: every
  accepted connection does the TLS handshake first.
* Only the standard library.
"""

from __future__ import annotations

import contextlib
import socket
import ssl
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

__all__ = ["HTTPReply", "HTTPRequest", "LocalHTTPServer", "free_port"]


@dataclass(frozen=True)
class HTTPRequest:
    """One request as the server received it."""

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
    """An HTTP/1.1 server on 127.0.0.1 answering with ``app(request)`` (module docstring).

    ``port`` and ``root`` (``http://127.0.0.1:<port>``) are known once constructed.
    """

    def __init__(
        self, app: Callable[[HTTPRequest], HTTPReply], *, tls: ssl.SSLContext | None = None
    ) -> None:
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
        if tls is not None:
            self._server.socket = tls.wrap_socket(self._server.socket, server_side=True)
        self.port: int = self._server.server_address[1]
        self.root = f"{'https' if tls else 'http'}://127.0.0.1:{self.port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"nbcast-testing-http-{self.port}",
            daemon=True,
        )

    def start(self) -> LocalHTTPServer:
        """Serve in a daemon thread."""
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop serving; delayed replies are dropped."""
        self._stopping.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)

    def __enter__(self) -> LocalHTTPServer:
        return self.start()

    def __exit__(self, *_: object) -> None:
        self.stop()


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on (right now)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port
