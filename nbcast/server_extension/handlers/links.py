"""``/nbcast/links/<token>``: the signed links the ``link`` channel sends, served.

Recipients have no account on the server: the signed token *is* the authority, so
this handler (and the one-click unsubscribe, which shares :class:`PublicHandler`)
is marked ``@allow_unauthenticated`` — jupyter-server neither redirects it to a
login page nor asks for its token, even with
``ServerApp.allow_unauthenticated_access = False`` — and is not ``@authorized``.
What protects it instead:

- the token is checked by the delivery plane
  (:func:`nbcast.delivery.link_opens.open_link`: signature with a configured key
  in constant time, then the link row — revoked, expired): **403** for a tampered
  or malformed token or one signed by an unknown or retired key, **404** for a
  well-signed token whose link no longer exists, **410** for an expired or revoked
  link or a file no longer stored; a small HTML page, never a stack trace;
- every address is rate limited (``NbcastApp.link_rate_per_minute``,
  :mod:`nbcast.server_extension.ratelimit`): **429** with ``Retry-After``. The address
  is the connection's own unless it comes from one of ``NbcastApp.trusted_proxies``
  with ``ServerApp.trust_xheaders`` on (:mod:`nbcast.server_extension.forwarded`): a
  client's own ``X-Forwarded-For`` or ``X-Real-Ip`` neither escapes the limit nor
  changes the network an opening records;
- the served file cannot act: HTML is served with ``Content-Security-Policy:
  sandbox`` (no ``allow-scripts``: a script in a notebook's output never runs, and
  the page gets a unique origin) and ``default-src 'none'`` (it loads nothing from
  anywhere: no tracking pixel, no CDN); every answer has ``X-Content-Type-Options:
  nosniff``, ``Referrer-Policy: no-referrer`` (the token never leaks to another
  site) and ``Cache-Control: private, no-store`` (a revoked link is not served
  from a cache). PDFs open inline, XLSX, CSV and other files download as
  attachments.

Every opening is recorded (``link_opens``; what is kept is in
:mod:`nbcast.delivery.link_opens`). Files are streamed in chunks from the artifact
store, so a 100 MB PDF never sits in the server's memory.
"""

from __future__ import annotations

import html
import logging
import socket
from typing import IO, Any
from urllib.parse import quote

from jupyter_server.auth.decorator import allow_unauthenticated
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado.iostream import StreamClosedError
from tornado.web import HTTPError

from nbcast.delivery.link_opens import LinkRefused, OpenedLink, open_link
from nbcast.errors import NbcastError
from nbcast.server_extension.handlers.base import NbcastMixin
from nbcast.server_extension.ratelimit import RateLimiter
from nbcast.server_extension.routes import Operation, route

__all__ = ["CHUNK_BYTES", "LinkHandler", "PublicHandler", "TooManyRequests"]

CHUNK_BYTES = 256 * 1024
"""How much of a file is read and sent at a time."""

LIMITER_KEY = "nbcast_public_rate_limiter"
"""The tornado settings key of the public endpoints' shared :class:`RateLimiter`."""

STRICT_POLICY = "sandbox; default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"
"""The Content-Security-Policy of the public endpoints' own pages (errors)."""

HTML_POLICY = (
    "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "font-src data:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
)
"""A served HTML rendition's policy: no script, nothing fetched, not framed."""

FILE_POLICY = "default-src 'none'; frame-ancestors 'none'"
"""Other files' policy (browsers will not show a PDF in a sandboxed document)."""

_HTML_TYPES = ("text/html", "application/xhtml+xml", "image/svg+xml", "text/xml")
_INLINE_TYPES = ("application/pdf",)
_PUBLIC_REFUSALS = {"forbidden": 403, "not_found": 404, "gone": 410}
_TITLES = {
    400: "Bad request",
    403: "This link is not valid",
    404: "This link does not exist",
    405: "Not allowed",
    410: "This link has expired or was withdrawn",
    429: "Too many requests",
}

log = logging.getLogger(__name__)


class TooManyRequests(HTTPError):
    """429, with the seconds until a request may be tried again."""

    def __init__(self, retry_after: float) -> None:
        super().__init__(429, reason="Too Many Requests")
        self.retry_after = int(retry_after)


class PublicHandler(NbcastMixin, ExtensionHandlerMixin, JupyterHandler):
    """A handler anyone may call (module docstring): rate limited, small HTML error
    pages, the strict headers, nothing logged with a traceback unless it was a bug."""

    @property
    def content_security_policy(self) -> str:
        """The strict policy (jupyter-server's default is for its own pages)."""
        return STRICT_POLICY

    async def prepare(self, *args: Any, **kwargs: Any) -> None:
        """Keep the token out of the access log: a link or unsubscribe token is a
        capability, and the log is read by people who should not hold it (the route
        has already taken the token from the path)."""
        self.request.uri = redact_token(self.request.uri or "")
        await super().prepare(*args, **kwargs)

    def set_default_headers(self) -> None:
        """jupyter-server's defaults, then no referrer and no caching."""
        super().set_default_headers()
        self.set_header("Referrer-Policy", "no-referrer")
        self.set_header("Cache-Control", "private, no-store")
        self.set_header("X-Content-Type-Options", "nosniff")

    @property
    def limiter(self) -> RateLimiter:
        """The server's one limiter of the public endpoints (made on first use)."""
        limiter: RateLimiter | None = self.settings.get(LIMITER_KEY)
        if limiter is None:
            limiter = RateLimiter(self.state.options.link_rate_per_minute)
            self.settings[LIMITER_KEY] = limiter
        return limiter

    def rate_limit(self) -> None:
        """Take one request from the client address's bucket; 429 when it is empty."""
        retry_after = self.limiter.take(self.client_address or "unknown")
        if retry_after is not None:
            raise TooManyRequests(retry_after)

    @property
    def client_address(self) -> str:
        """The client's address: the connection's peer, or the address a trusted proxy
        forwarded (:meth:`~nbcast.server_extension.forwarded.TrustedProxies.client_address`)."""
        return self.state.options.proxies.client_address(self.peer_address, self.request.headers)

    @property
    def peer_address(self) -> str:
        """The address of the connection itself, whatever the request's headers say
        (tornado has already replaced ``request.remote_ip`` by a forwarded one when
        ``trust_xheaders`` is on); ``""`` for a UNIX socket."""
        context = getattr(self.request.connection, "context", None)
        address = getattr(context, "address", None)
        family = getattr(context, "address_family", None)
        if family in (socket.AF_INET, socket.AF_INET6) and isinstance(address, tuple):
            return str(address[0])
        return "" if context is not None else (self.request.remote_ip or "")

    def refusal(self, exc: NbcastError) -> HTTPError:
        """The HTTP answer to a refused token."""
        status = _PUBLIC_REFUSALS.get(getattr(exc, "kind", ""), 403)
        return HTTPError(status, reason=_TITLES[status])

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """A small HTML page: what happened, in a sentence, never a traceback."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, TooManyRequests):
            self.set_header("Retry-After", str(exc.retry_after))
        title = _TITLES.get(status_code, "Something went wrong")
        if status_code >= 500:
            detail = "The server could not answer this request. Try again later."
        elif status_code == 429:
            detail = "Too many requests from your address; try again in a minute."
        elif status_code in (403, 404, 410):
            detail = "Ask the sender of the report for a new link."
        else:
            detail = ""
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Content-Security-Policy", STRICT_POLICY)
        self.finish(page(title, detail))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Refusals are the caller's business: logged in a line, not as tracebacks."""
        if isinstance(value, (NbcastError, HTTPError)):
            log.info("%s %s: %s", self.request.method, type(self).__name__, value)
            return
        super().log_exception(typ, value, tb)


def redact_token(uri: str) -> str:
    """``/nbcast/links/k1.eyJsIjo…`` for ``/nbcast/links/<token>`` (the first
    :data:`TOKEN_SHOWN` characters of the token kept, to tell links apart)."""
    path, _, _query = uri.partition("?")
    head, _, token = path.rpartition("/")
    return f"{head}/{token[:TOKEN_SHOWN]}…" if len(token) > TOKEN_SHOWN else path


TOKEN_SHOWN = 12
"""How much of a token the access log keeps."""


def page(title: str, detail: str, body: str = "") -> str:
    """A minimal self-contained HTML page."""
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta name=viewport content="width=device-width, initial-scale=1">'
        f"<title>{html.escape(title)}</title>"
        "<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:3em auto;"
        "padding:0 1em;color:#222}button{font-size:1em;padding:.5em 1.2em}</style>"
        f"</head><body><h1>{html.escape(title)}</h1>"
        + (f"<p>{html.escape(detail)}</p>" if detail else "")
        + body
        + "</body></html>"
    )


def shown_policy(media_type: str) -> tuple[str, bool]:
    """The Content-Security-Policy of a rendition shown in the browser, and whether it
    is shown inline: HTML (sandboxed, no script) and PDF are; other files download."""
    kind = media_type.split(";", 1)[0].strip().lower()
    if kind in _HTML_TYPES:
        return HTML_POLICY, True
    return FILE_POLICY, kind in _INLINE_TYPES


def content_disposition(filename: str, *, inline: bool) -> str:
    """``inline``/``attachment`` with the file name, ASCII and RFC 5987 forms."""
    fallback = "".join(
        c if c.isascii() and c.isprintable() and c not in '"\\' else "_" for c in filename
    )
    kind = "inline" if inline else "attachment"
    return f"{kind}; filename=\"{fallback}\"; filename*=UTF-8''{quote(filename, safe='')}"


def _with_charset(media_type: str) -> str:
    """Text types with their charset (renditions are written in UTF-8)."""
    if media_type.startswith("text/") and "charset" not in media_type:
        return f"{media_type}; charset=utf-8"
    return media_type


def _size(handle: IO[bytes]) -> int:
    """A seekable file's size, read position left at the start."""
    size = handle.seek(0, 2)
    handle.seek(0)
    return size


@route(
    "/nbcast/links/{token}",
    Operation("get", "A signed link's file (public: the token is the authority)", tag="links"),
    documented=False,
)
class LinkHandler(PublicHandler):
    """Serves the file a signed link names (module docstring)."""

    def compute_etag(self) -> str | None:
        """No ETag: the answer is never cached (``no-store``), so hashing the body
        would only cost time."""
        return None

    @allow_unauthenticated
    async def get(self, token: str) -> None:
        """Check the token, record the opening, stream the file."""
        self.rate_limit()
        try:
            opened, handle, size, chunk = await self.call(
                self._open,
                token,
                address=self.client_address,
                user_agent=self.request.headers.get("User-Agent"),
            )
        except LinkRefused as exc:
            raise self.refusal(exc) from None
        try:
            policy, inline = shown_policy(opened.media_type)
            self.set_header("Content-Security-Policy", policy)
            self.set_header("Content-Type", _with_charset(opened.media_type))
            self.set_header("Content-Length", str(size))
            self.set_header(
                "Content-Disposition", content_disposition(opened.filename, inline=inline)
            )
            sent = 0
            while chunk:
                self.write(chunk)
                sent += len(chunk)
                if sent >= size:
                    break
                await self.flush()
                chunk = await self.call(handle.read, CHUNK_BYTES)
        except StreamClosedError:  # the reader went away: nothing more to send
            return
        finally:
            handle.close()
        self.finish()

    def _open(
        self, token: str, *, address: str, user_agent: str | None
    ) -> tuple[OpenedLink, IO[bytes], int, bytes]:
        """In one trip to the thread pool (most renditions are one chunk): check the
        token and record the opening, open the file, its size and first chunk."""
        state = self.state
        opened = open_link(
            state.db,
            state.clock,
            state.signer,
            state.store,
            token,
            address=address,
            user_agent=user_agent,
        )
        try:
            handle = state.store.open(opened.sha256)
        except KeyError:
            raise LinkRefused("gone", "the report's file is no longer stored") from None
        try:
            return opened, handle, _size(handle), handle.read(CHUNK_BYTES)
        except BaseException:
            handle.close()
            raise
