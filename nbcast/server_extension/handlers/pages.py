"""The status UI: server-rendered pages under ``/nbcast/``.

==============================  ==================================================
page                            shows
==============================  ==================================================
``/nbcast/``                    services, the tenant's queue and quota, the last
                                24 h (SLA misses too), definitions, newest runs,
                                failed deliveries
``/nbcast/definitions``         every definition: schedule, its next fire times in
                                its zone with DST notes, last state
``/nbcast/definitions/{name}``  versions, the next fire times with DST notes, the
                                runs of that definition (SKIPPED/MISSED reasons),
                                its SLA and its latest misses
``/nbcast/runs/{run_id}``       context, parameters, attempts (failing cell, line
                                and traceback), the executed notebook rendered,
                                artifacts, deliveries per recipient, links
                                (:mod:`.pages_run`)
``/nbcast/runs/{run_id}/``      the executed notebook as HTML, for the run page's
``notebook.html``               sandboxed ``<iframe>`` (:mod:`.pages_run`)
==============================  ==================================================

This module holds the overview and the definitions' pages; the run's pages are in
:mod:`.pages_run`, their base class and the templates' environment in
:mod:`.page_handler`. The pages are thin: each calls the command layer's
tenant-scoped queries (another tenant's object is a 404 page) and renders a Jinja2
template shipped with the package (autoescaped; no script, no CDN). A page refreshes
itself (``<meta refresh>``) while something on it is queued or running. Buttons are
HTML forms with jupyter-server's XSRF token that post to :mod:`.pages_actions`, which
answers with a redirect (Post/Redirect/Get) and leaves a one-time flash message in a
signed cookie.

A browser without a login is sent to the server's login page; every method carries
``@web.authenticated`` and jupyter-server's ``@authorized``. Errors are pages with a
status and one line of text, never a traceback.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from nbcast.errors import NbcastError
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.page_handler import (
    ACTIVE_RUN,
    READING,
    REFRESH_ACTIVE_S,
    REFRESH_OVERVIEW_S,
    PageHandler,
    instant_of,
    page_route,
    web_url,
)

__all__ = [
    "DefinitionPage",
    "DefinitionsPage",
    "OverviewPage",
    "OverviewRedirect",
]

RUNS_PER_PAGE = 50
SLA_MISSES_SHOWN = 20
"""SLA misses a definition's page lists (the newest; ``nbcast sla list`` has them all)."""
UPCOMING = 5
"""Next fire times a definition's page lists."""


@page_route("/nbcast/", "The overview of the caller's tenant")
class OverviewPage(PageHandler):
    """``/nbcast/``: the overview (:func:`nbcast.views.overview.overview`)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The overview page."""
        from nbcast.oversight.sla_queries import miss_counts
        from nbcast.tenancy.roles import is_operator
        from nbcast.views.overview import WINDOW, overview, tenant_known

        caller = self.caller

        def read() -> tuple[Any, dict[str, int], bool]:
            now = self.state.clock.now()
            with self.state.db.session() as session:
                data = overview(session, caller, now)  # checks the caller's role
                known = tenant_known(session, caller)
                misses = miss_counts(session, caller, now - WINDOW, now) if known else {}
                return data, misses, is_operator(session, caller.user)

        data, sla_misses, operator = await self.call(read)
        # The dashboard configured, else the one a live Ray worker reported — linked for
        # the installation's operators only: it is the cluster's control plane.
        dashboard = web_url(self.state.options.ray_dashboard_url) or (
            web_url(data.health.ray_dashboard()) if operator else None
        )
        self.render_page(
            "overview.html",
            title="Overview",
            refresh=REFRESH_ACTIVE_S if data.active else REFRESH_OVERVIEW_S,
            o=data,
            sla_misses_24h=sla_misses,
            ray_dashboard_url=dashboard,
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
                row[key] = instant_of(row.get(key))
            children.append(row)
        return children


@page_route("/nbcast", "The overview, at its address with the slash")
class OverviewRedirect(PageHandler):
    """``/nbcast`` → ``/nbcast/`` (the query kept, so ``?token=`` logs in too)."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """Redirect to the overview."""
        query = self.request.query
        self.redirect(self.nbcast_url("") + (f"?{query}" if query else ""))


@page_route("/nbcast/definitions", "The caller's definitions")
class DefinitionsPage(PageHandler):
    """``/nbcast/definitions``: every definition, a page of 100 at a time, each with
    its next fire times in its own zone and what DST does to each — the records of
    :func:`~nbcast.views.definitions.list_definitions`, as the API and the CLI show
    them."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """The definitions page (``?after=`` pages on)."""
        from nbcast.access import Page
        from nbcast.tenancy.roles import require_role_or_operator
        from nbcast.views.definitions import list_definitions
        from nbcast.views.overview import tenant_known

        caller = self.caller
        after = self.get_query_argument("after", None)
        if after is not None and len(after) > 512:
            raise ApiError(400, "after is longer than 512 characters", field="after")

        def read() -> Any:
            now = self.state.clock.now()
            with self.state.db.session() as session:
                require_role_or_operator(session, caller, READING, now)
                if not tenant_known(session, caller):  # an operator mapped to no tenant
                    return Page([], None)
                return list_definitions(session, caller, limit=100, after=after, now=now)

        page = await self.call(read)
        self.render_page(
            "definitions.html",
            title="Definitions",
            active=any(d.last_run and d.last_run.state in ACTIVE_RUN for d in page.items),
            definitions=page.items,
            next_after=page.next_after,
        )


@page_route("/nbcast/definitions/{name}", "One definition of the caller's tenant")
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
            active=any(r.state in ACTIVE_RUN for r in data["runs"]),
            **data,
        )

    def _read(self, caller: Any, name: str, after: str | None) -> dict[str, Any]:
        from nbcast.definitions.queries import list_versions
        from nbcast.errors import UnknownDefinitionError
        from nbcast.executor.queries import list_runs
        from nbcast.oversight.sla_queries import list_misses
        from nbcast.oversight.sla_verdict import span
        from nbcast.scheduler.upcoming import upcoming
        from nbcast.tenancy.roles import require_role_or_operator
        from nbcast.views.definitions import get_definition
        from nbcast.views.overview import tenant_known

        now = self.state.clock.now()
        with self.state.db.session() as session:
            require_role_or_operator(session, caller, READING, now)
            if not tenant_known(session, caller):  # an operator mapped to no tenant
                raise UnknownDefinitionError(f"no definition named {name[:128]!r}")
            definition = get_definition(session, caller, name, now=now)
            versions = list_versions(session, caller, name)
            runs = list_runs(
                session, caller, definition=name, order="desc", limit=RUNS_PER_PAGE, after=after
            )
            misses = list_misses(session, caller, definition=name, limit=SLA_MISSES_SHOWN)
        sla = versions[-1].spec.sla if versions else None
        fires: list[Any] = []
        upcoming_error = None
        schedule = versions[-1].spec.schedule if versions else None
        if schedule is not None and not definition.paused:
            try:
                fires = upcoming(schedule, now, UPCOMING)
            except NbcastError as exc:
                upcoming_error = str(exc)
        from nbcast.server_extension.contents_paths import shown_record

        root = getattr(self.contents_manager, "root_dir", None)
        return {
            "d": shown_record(definition, root),  # its file relative to the root
            "versions": list(reversed(versions)),
            "fires": fires,
            "upcoming_error": upcoming_error,
            "has_schedule": schedule is not None,
            "runs": runs.items,
            "next_after": runs.next_after,
            "after": after,
            "sla_within": span(sla.delivered_within) if sla is not None else None,
            "sla_misses": misses.items,
            "more_sla_misses": misses.next_after is not None,
        }
