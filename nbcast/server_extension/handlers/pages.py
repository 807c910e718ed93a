"""The status UI: server-rendered pages under ``/nbcast/``.

==============================  ==================================================
page                            shows
==============================  ==================================================
``/nbcast/``                    services, the tenant's queue and quota, the last
                                24 h, definitions, newest runs, failed deliveries
``/nbcast/definitions``         every definition: schedule, next fire, last state
``/nbcast/definitions/{name}``  versions, the next fire times with DST notes, the
                                runs of that definition (SKIPPED/MISSED reasons)
``/nbcast/runs/{run_id}``       context, parameters, attempts (failing cell, line
                                and traceback), the executed notebook rendered,
                                artifacts, deliveries per recipient, links
``/nbcast/runs/{run_id}/``      the executed notebook as HTML, for the run page's
``notebook.html``               sandboxed ``<iframe>`` (:class:`RunNotebookView`)
==============================  ==================================================

The pages are thin: each calls the command layer's tenant-scoped queries (another
tenant's object is a 404 page) and renders a Jinja2 template shipped with the
package (autoescaped; no script, no CDN). A page refreshes itself (``<meta
refresh>``) while something on it is queued or running. Buttons are HTML forms with
jupyter-server's XSRF token that post to :mod:`.pages_actions`, which answers with a
redirect (Post/Redirect/Get) and leaves a one-time flash message in a signed cookie.

A browser without a login is sent to the server's login page; every method carries
``@web.authenticated`` and jupyter-server's ``@authorized``. Errors are pages with a
status and one line of text, never a traceback.
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
from jupyter_server.auth.decorator import authorized
from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado import web

from nbcast.errors import NbcastError, NotFoundError
from nbcast.server_extension.errors import ApiError, status_of
from nbcast.server_extension.handlers.base import NbcastMixin
from nbcast.server_extension.routes import API, Operation, route

__all__ = [
    "DefinitionPage",
    "DefinitionsPage",
    "OverviewPage",
    "OverviewRedirect",
    "PageHandler",
    "RunNotebookView",
    "RunPage",
    "environment",
]

TEMPLATES = Path(__file__).resolve().parent.parent / "templates"
REFRESH_ACTIVE_S = 5
"""Seconds between refreshes while something on the page is queued or running."""
REFRESH_OVERVIEW_S = 30
"""Seconds between refreshes of the overview otherwise (the services' heartbeats)."""
RUNS_PER_PAGE = 50
UPCOMING = 5
"""Next fire times a definition's page lists."""
FLASH_COOKIE = "nbcast-flash"
MAX_FLASH = 600
"""Characters of a flash message kept (one line)."""
_ACTIVE_RUN = frozenset({"QUEUED", "LEASED", "RUNNING"})
_ACTIVE_DELIVERY = frozenset({"PENDING", "SENDING"})
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


def _web_url(url: str | None) -> str | None:
    """``url`` if it is an http(s) URL (nothing else becomes a link, whatever is set)."""
    if url and url.lower().startswith(("http://", "https://")):
        return url
    return None


def _instant_of(value: Any) -> datetime | None:
    """An ISO instant from a snapshot as a datetime (None if it is not one)."""
    if not isinstance(value, str):
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


def _page_route(path: str, summary: str) -> Any:
    return route(path, Operation("get", summary, tag="pages"), documented=False)


# -- the pages ----------------------------------------------------------------------


@_page_route("/nbcast/", "The overview of the caller's tenant")
class OverviewPage(PageHandler):
    """``/nbcast/``: the overview (:func:`nbcast.governance.overview.overview`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The overview page."""
        from nbcast.governance.overview import overview

        caller = self.caller

        def read() -> Any:
            with self.state.db.session() as session:
                return overview(session, caller, self.state.clock.now())

        data = await self.call(read)
        self.render_page(
            "overview.html",
            title="Overview",
            refresh=REFRESH_ACTIVE_S if data.active else REFRESH_OVERVIEW_S,
            o=data,
            ray_dashboard_url=_web_url(self.state.options.ray_dashboard_url),
            embedded=self._embedded(),
        )

    def _embedded(self) -> list[dict[str, Any]] | None:
        """The embedded services' supervisor's children (:mod:`..services`), their
        instants as datetimes; None when this server runs none."""
        from nbcast.server_extension.services import SERVICES_KEY

        supervisor = self.settings.get(SERVICES_KEY)
        if supervisor is None:
            return None
        children = []
        for child in supervisor.snapshot().get("children", []):
            row = dict(child)
            for key in ("started_at", "last_exit_at", "next_start_at"):
                row[key] = _instant_of(row.get(key))
            children.append(row)
        return children


@_page_route("/nbcast", "The overview, at its address with the slash")
class OverviewRedirect(PageHandler):
    """``/nbcast`` → ``/nbcast/`` (the query kept, so ``?token=`` logs in too)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Redirect to the overview."""
        query = self.request.query
        self.redirect(self.nbcast_url("") + (f"?{query}" if query else ""))


@_page_route("/nbcast/definitions", "The caller's definitions")
class DefinitionsPage(PageHandler):
    """``/nbcast/definitions``: every definition, a page of 100 at a time."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The definitions page (``?after=`` pages on)."""
        from nbcast.access import Page
        from nbcast.definitions.queries import list_definitions
        from nbcast.governance.overview import tenant_known

        caller = self.caller
        after = self.get_query_argument("after", None)
        if after is not None and len(after) > 512:
            raise ApiError(400, "after is longer than 512 characters", field="after")

        def read() -> Any:
            with self.state.db.session() as session:
                if not tenant_known(session, caller):
                    return Page([], None)
                return list_definitions(session, caller, limit=100, after=after)

        page = await self.call(read)
        self.render_page(
            "definitions.html",
            title="Definitions",
            active=any(d.last_run_state in _ACTIVE_RUN for d in page.items),
            definitions=page.items,
            next_after=page.next_after,
        )


@_page_route("/nbcast/definitions/{name}", "One definition of the caller's tenant")
class DefinitionPage(PageHandler):
    """``/nbcast/definitions/{name}``: versions, next fire times, runs."""

    @web.authenticated
    @authorized
    async def get(self, name: str) -> None:
        """The definition's page (``?after=`` pages through its runs)."""
        caller = self.caller
        after = self.get_query_argument("after", None)
        if after is not None and len(after) > 512:
            raise ApiError(400, "after is longer than 512 characters", field="after")
        data = await self.call(self._read, caller, name, after)
        self.render_page(
            "definition.html",
            title=name,
            active=any(r.state in _ACTIVE_RUN for r in data["runs"]),
            **data,
        )

    def _read(self, caller: Any, name: str, after: str | None) -> dict[str, Any]:
        from nbcast.definitions.queries import get_definition, list_versions
        from nbcast.errors import UnknownDefinitionError
        from nbcast.executor.queries import list_runs
        from nbcast.governance.overview import tenant_known
        from nbcast.scheduler.upcoming import upcoming

        now = self.state.clock.now()
        with self.state.db.session() as session:
            if not tenant_known(session, caller):
                raise UnknownDefinitionError(f"no definition named {name[:128]!r}")
            definition = get_definition(session, caller, name)
            versions = list_versions(session, caller, name)
            runs = list_runs(
                session, caller, definition=name, order="desc", limit=RUNS_PER_PAGE, after=after
            )
        fires: list[Any] = []
        upcoming_error = None
        schedule = versions[-1].spec.schedule if versions else None
        if schedule is not None and not definition.paused:
            try:
                fires = upcoming(schedule, now, UPCOMING)
            except NbcastError as exc:
                upcoming_error = str(exc)
        return {
            "d": definition,
            "versions": list(reversed(versions)),
            "fires": fires,
            "upcoming_error": upcoming_error,
            "has_schedule": schedule is not None,
            "runs": runs.items,
            "next_after": runs.next_after,
            "after": after,
        }


@_page_route("/nbcast/runs/{run_id}", "One run of the caller's tenant")
class RunPage(PageHandler):
    """``/nbcast/runs/{run_id}``: everything about one run."""

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        """The run's page."""
        caller = self.caller
        number = self.run_id(run_id)
        data = await self.call(self._read, caller, number)
        run = data["run"]
        self.render_page(
            "run.html",
            title=f"Run {run.id}",
            active=run.state in _ACTIVE_RUN
            or any(d.state.value in _ACTIVE_DELIVERY for d in run.deliveries)
            or any(r.state.value == "PENDING" for r in run.renditions),
            **data,
        )

    def _read(self, caller: Any, run_id: int) -> dict[str, Any]:
        from nbcast.delivery.queries import list_links
        from nbcast.errors import UnknownRunError
        from nbcast.executor.artifacts_of_run import attempt_tracebacks
        from nbcast.executor.queries import get_run
        from nbcast.governance.overview import tenant_known

        with self.state.db.session() as session:
            if not tenant_known(session, caller):
                raise UnknownRunError(f"no run {run_id}")
            run = get_run(session, caller, run_id, artifacts=self.state.store)
            links = list_links(session, caller, run_id=run_id, limit=100).items
        return {
            "run": run,
            "links": links,
            "tracebacks": attempt_tracebacks(self.state.store, run),
            "failed_deliveries": sum(1 for d in run.deliveries if d.state.value == "FAILED"),
            "finished": run.state not in _ACTIVE_RUN,
        }


NOTEBOOK_VIEW_CSP = (
    "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "font-src data:; frame-ancestors 'self'"
)
"""The rendered notebook's policy: a notebook's HTML is its author's (hostile, as far
as this origin is concerned), so it is a sandbox without scripts, fetching nothing
but its own inline styles and data: images, framed only by nbcast's own pages."""


@_page_route("/nbcast/runs/{run_id}/notebook.html", "A run's executed notebook as HTML")
class RunNotebookView(PageHandler):
    """The run's executed notebook (the run's, or a failed run's latest attempt's:
    :func:`~nbcast.executor.artifacts_of_run.run_notebook`) rendered by the ``html``
    renderer with its code and stderr shown — script-free and sanitised — and served
    under :data:`NOTEBOOK_VIEW_CSP`. Notebooks over
    :data:`~nbcast.executor.artifacts_of_run.MAX_VIEW_BYTES` are refused (422) with a
    line saying so; errors are one line of plain text (the page is shown in an
    ``<iframe>`` whose policy loads no stylesheet)."""

    @property
    def content_security_policy(self) -> str:
        """:data:`NOTEBOOK_VIEW_CSP`, on every answer of this route (errors too)."""
        return NOTEBOOK_VIEW_CSP

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        """The rendered notebook."""
        caller = self.caller
        number = self.run_id(run_id)
        html = await self.call(self._render, caller, number)
        self.set_header("Content-Type", "text/html; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(html)

    def _render(self, caller: Any, run_id: int) -> bytes:
        from nbcast.delivery.renderers.html import HtmlRenderer
        from nbcast.delivery.report import ReportInfo
        from nbcast.errors import RenderError, UnknownRunError
        from nbcast.executor.artifacts_of_run import NotebookUnavailable, run_notebook
        from nbcast.governance.overview import tenant_known

        with self.state.db.session() as session:
            if not tenant_known(session, caller):
                raise UnknownRunError(f"no run {run_id}")
            try:
                detail, data = run_notebook(session, caller, run_id, self.state.store)
            except NotebookUnavailable as exc:
                status = 422 if exc.status == 413 else 404
                suffix = ": download the .ipynb instead" if status == 422 else ""
                raise ApiError(status, f"{exc}{suffix}") from None
        import nbformat

        try:  # as the delivery worker reads it (multi-line strings joined)
            notebook = nbformat.reads(data.decode("utf-8"), as_version=4)
        except Exception:  # nbformat raises whatever its JSON and validation raise
            raise ApiError(
                422, f"the executed notebook of run {run_id} is not a notebook (not JSON)"
            ) from None
        report = ReportInfo(
            tenant=detail.tenant,
            definition=detail.definition,
            version=detail.version,
            run_id=detail.id,
            slot_key=detail.slot_key,
            fire_at=detail.fire_at,
            finished_at=detail.finished_at or self.state.clock.now(),
        )
        try:
            return HtmlRenderer(include_input=True, include_stderr=True).render(notebook, report)
        except RenderError as exc:
            raise ApiError(422, str(exc)) from None

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """One line of plain text (the module's error pages need a stylesheet that
        this route's policy does not load)."""
        exc_info = kwargs.get("exc_info")
        if exc_info and exc_info[1] is not None:
            status, _code, message, _field = status_of(exc_info[1])
        else:
            status, message = status_code, self._reason
        text = " ".join(str(message).split())[:MAX_FLASH]
        self.set_status(status)
        self.set_header("Content-Type", "text/plain; charset=UTF-8")
        self.set_header("Cache-Control", "no-store")
        self.finish(f"{status}: {text}\n")
