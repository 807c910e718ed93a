"""The status UI's base: :class:`PageHandler` and the pages' Jinja2 environment.

Every page of :mod:`.pages` and :mod:`.pages_run`, and every form action of
:mod:`.pages_actions`, is a :class:`PageHandler`: it renders a template shipped with
the package (autoescaped; :func:`environment` adds the filters that format instants,
durations, sizes and states), leaves and pops the one-time flash message of
Post/Redirect/Get in a signed cookie, and answers an error with a page of its status
and one line of text, never a traceback. Routes are registered with
:func:`page_route` (in the URL table, not in the OpenAPI document).

Every page shows the installation's frame (the services, the queue) around a
tenant's objects, so every page's read starts with
:func:`~nbcast.tenancy.roles.require_role_or_operator` (:data:`READING`) in its own
transaction: an operator, or a person with a role in an existing tenant; anyone else
(no role, or mapped to a tenant nobody created) gets a 403 page and nothing is
created or claimed for a tenant that does not exist.
"""

from __future__ import annotations

import functools
import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import quote

from jinja2 import Environment, FileSystemLoader, select_autoescape
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin

from nbcast.delivery.models import DeliveryState
from nbcast.errors import NbcastError, NotFoundError
from nbcast.scheduler.models import ACTIVE_STATES
from nbcast.server_extension.errors import ApiError, status_of
from nbcast.server_extension.handlers.base import NbcastMixin
from nbcast.server_extension.routes import API, Operation, route

__all__ = [
    "ACTIVE_DELIVERY",
    "ACTIVE_RUN",
    "MAX_FLASH",
    "READING",
    "REFRESH_ACTIVE_S",
    "REFRESH_OVERVIEW_S",
    "PageHandler",
    "environment",
    "instant_of",
    "page_route",
    "web_url",
]

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
REFRESH_ACTIVE_S = 5
"""Seconds between refreshes while something on the page is queued or running."""
REFRESH_OVERVIEW_S = 30
"""Seconds between refreshes of the overview otherwise (the services' heartbeats)."""
FLASH_COOKIE = "nbcast-flash"
MAX_FLASH = 600
"""Characters of a flash message kept (one line)."""
READING = "reading the status pages"
"""What a page's role check says the caller was doing (module docstring)."""
ACTIVE_RUN = frozenset(ACTIVE_STATES)
"""Run states that make a page refresh itself."""
ACTIVE_DELIVERY = frozenset({DeliveryState.PENDING, DeliveryState.SENDING})
"""Delivery states that make a page refresh itself."""
log = logging.getLogger(__name__)


# -- formatting (template filters) ------------------------------------------------


def _when(value: datetime | None) -> str:
    """An instant in UTC, to the second."""
    if value is None:
        return "—"
    return value.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def _local(value: datetime | None) -> str:
    """A zone-aware time in its own zone, with the zone's abbreviation."""
    if value is None:
        return "—"
    return value.strftime("%Y-%m-%d %H:%M %Z (%a)")


def _iso(value: datetime | None) -> str:
    return "" if value is None else value.astimezone(UTC).isoformat()


def _relative(value: datetime | None, now: datetime) -> str:
    """ "3 min ago" / "in 2 h" relative to ``now``."""
    if value is None:
        return ""
    seconds = (value - now).total_seconds()
    span = abs(seconds)
    if span < 60:
        text = f"{span:.0f} s"
    elif span < 3600:
        text = f"{span / 60:.0f} min"
    elif span < 172_800:
        text = f"{span / 3600:.1f} h"
    else:
        text = f"{span / 86_400:.0f} d"
    return f"in {text}" if seconds > 0 else f"{text} ago"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.1f} s"
    if seconds < 3600:
        return f"{int(seconds // 60)} min {int(seconds % 60)} s"
    return f"{seconds / 3600:.1f} h"


def _size(value: int | None) -> str:
    if value is None:
        return "—"
    size = float(value)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{value} B"


def _compact(value: Any) -> str:
    """JSON on one line, for parameters, receipts and errors."""
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _state_class(state: Any) -> str:
    """The CSS class of a state badge (the text says the state; colour only helps)."""
    text = str(getattr(state, "value", state) or "none").lower()
    return "state state-" + "".join(c for c in text if c.isalnum() or c == "_")


@functools.cache
def environment() -> Environment:
    """The pages' Jinja2 environment: the package's templates, autoescaped."""
    env = Environment(
        loader=FileSystemLoader(str(TEMPLATES)),
        autoescape=select_autoescape(default=True, default_for_string=True),
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(
        when=_when,
        local=_local,
        iso=_iso,
        duration=_duration,
        size=_size,
        compact=_compact,
        state_class=_state_class,
        segment=lambda value: quote(str(value), safe=""),
    )
    return env


# -- the page handler base ----------------------------------------------------------


class PageHandler(NbcastMixin, ExtensionHandlerMixin, JupyterHandler):
    """An HTML page of the status UI (module docstring)."""

    def nbcast_url(self, *parts: object) -> str:
        """The URL of an nbcast page under the server's base URL, each part quoted."""
        tail = "/".join(quote(str(p), safe="") for p in parts)
        return f"{self.base_url.rstrip('/')}/nbcast/{tail}"

    def api_url(self, *parts: object) -> str:
        """The URL of an API route (downloads, the diff)."""
        tail = "/".join(quote(str(p), safe="") for p in parts)
        return f"{self.base_url.rstrip('/')}{API}/{tail}"

    def render_page(
        self, template: str, *, title: str, active: bool = False, status: int = 200, **ns: Any
    ) -> None:
        """Render ``template`` inside the layout and finish the request."""
        refresh = ns.pop("refresh", None)
        if refresh is None and active:
            refresh = REFRESH_ACTIVE_S
        try:
            caller = self.caller
        except Exception:  # no caller (an error before login, a broken request): a page still
            caller = None
        values = {
            "title": title,
            "refresh": refresh,
            "caller": caller,
            "now": self.state.clock.now() if status < 500 else datetime.now(UTC),
            "flash": self.pop_flash(),
            "css_url": self.static_url("nbcast.css"),
            "xsrf_form_html": self.xsrf_form_html,
            "url": self.nbcast_url,
            "api": self.api_url,
            "relative": _relative,
            **ns,
        }
        html = environment().get_template(template).render(**values)
        self.set_status(status)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(html)

    # -- flash messages (Post/Redirect/Get) -----------------------------------------

    def flash(self, kind: str, text: str) -> None:
        """Leave a one-line message for the next page this browser loads."""
        line = " ".join(str(text).split())[:MAX_FLASH]
        value = json.dumps({"kind": "error" if kind == "error" else "ok", "text": line})
        self.set_signed_cookie(
            FLASH_COOKIE, value, expires_days=None, path=self._cookie_path(), httponly=True
        )

    def pop_flash(self) -> dict[str, str] | None:
        """The message left for this page, once."""
        try:
            raw = self.get_signed_cookie(FLASH_COOKIE, max_age_days=1)
        except Exception:
            raw = None
        if FLASH_COOKIE in self.request.cookies:
            self.clear_cookie(FLASH_COOKIE, path=self._cookie_path())
        if not raw:
            return None
        try:
            data = json.loads(raw)
            return {"kind": str(data["kind"]), "text": str(data["text"])[:MAX_FLASH]}
        except (ValueError, KeyError, TypeError):
            return None

    def _cookie_path(self) -> str:
        return f"{self.base_url.rstrip('/')}/nbcast/"

    # -- errors -----------------------------------------------------------------------

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """An error page: its status and one line (never a traceback)."""
        exc_info = kwargs.get("exc_info")
        if exc_info and exc_info[1] is not None:
            status, _code, message, _field = status_of(exc_info[1])
        else:
            status, message = status_code, self._reason
        if status == 403 and "xsrf" in str(message).lower():
            message = "the form had expired or came from elsewhere: reload the page and try again"
        text = " ".join(str(message).split())[:MAX_FLASH]
        try:
            self.render_page(
                "error.html", title=f"{status}", status=status, message=text, status_code=status
            )
        except Exception:
            log.exception("nbcast: the error page could not be rendered")
            self.set_status(status)
            self.set_header("Content-Type", "text/plain; charset=UTF-8")
            self.finish(f"{status}: {text}\n")

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Log a traceback for bugs only: nbcast's refusals are the caller's problem."""
        if isinstance(value, (NbcastError, ApiError)):
            log.info("%s %s: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)

    def run_id(self, value: str) -> int:
        """A run id from the path (anything else names no run)."""
        if not (value.isascii() and value.isdigit()) or len(value) > 18:
            raise NotFoundError(f"no run {value[:40]!r}")
        return int(value)


def web_url(url: str | None) -> str | None:
    """``url`` if it is an http(s) URL (nothing else becomes a link, whatever is set)."""
    if url and url.lower().startswith(("http://", "https://")):
        return url
    return None


def instant_of(value: Any) -> datetime | None:
    """An ISO instant from a snapshot as a datetime (None if it is not one)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def page_route(path: str, summary: str) -> Any:
    """Register a page (a GET in the URL table, not in the OpenAPI document)."""
    return route(path, Operation("get", summary, tag="pages"), documented=False)
