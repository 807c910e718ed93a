"""The status UI's run pages: ``/nbcast/runs/{run_id}`` and the executed notebook
it frames (``/nbcast/runs/{run_id}/notebook.html``).

The run page shows everything about one run of the caller's tenant: its context and
parameters, its attempts (failing cell, line and traceback), the executed notebook
rendered in a sandboxed ``<iframe>`` (:class:`RunNotebookView`), its renditions, the
per-recipient delivery ledger, its signed links and their openings (the newest
:data:`~nbcast.views.runs.LINK_OPENS_SHOWN`, as the API's run: when, the reader's network as
recorded, the user agent clipped to :data:`USER_AGENT_SHOWN` characters, all
escaped). Another tenant's run is a 404 page.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from nbcast.delivery.models import DeliveryState, RenditionState
from nbcast.scheduler.models import RunState
from nbcast.scheduler.runs import MAX_RUN_ID
from nbcast.server_extension.errors import ApiError, status_of
from nbcast.server_extension.handlers.page_handler import (
    ACTIVE_DELIVERY,
    ACTIVE_RUN,
    MAX_FLASH,
    READING,
    PageHandler,
    page_route,
)

__all__ = [
    "COMPARE_CHOICES",
    "NOTEBOOK_VIEW_CSP",
    "USER_AGENT_SHOWN",
    "RunComparePage",
    "RunNotebookView",
    "RunPage",
]

COMPARE_CHOICES = 30
"""The definition's newest succeeded runs offered to compare a run's report with."""

USER_AGENT_SHOWN = 120
"""Characters of an opening's user agent shown in its row (the whole, at most 256
characters as recorded, in the cell's tooltip)."""


@page_route("/nbcast/runs/{run_id}", "One run of the caller's tenant")
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
            active=run.state in ACTIVE_RUN
            or any(d.state.value in ACTIVE_DELIVERY for d in run.deliveries)
            or any(r.state == RenditionState.PENDING for r in run.renditions),
            **data,
        )

    def _read(self, caller: Any, run_id: int) -> dict[str, Any]:
        from nbcast.delivery.queries import list_links
        from nbcast.errors import UnknownRunError
        from nbcast.executor.queries import list_runs
        from nbcast.tenancy.roles import require_role_or_operator
        from nbcast.views.overview import tenant_known
        from nbcast.views.run_files import attempt_tracebacks
        from nbcast.views.runs import get_run

        with self.state.db.session() as session:
            require_role_or_operator(session, caller, READING, self.state.clock.now())
            if not tenant_known(session, caller):  # an operator mapped to no tenant
                raise UnknownRunError(f"no run {run_id}")
            run = get_run(session, caller, run_id, artifacts=self.state.store)
            links = list_links(session, caller, run_id=run_id, limit=100).items
            others = [
                r
                for r in list_runs(
                    session,
                    caller,
                    definition=run.definition,
                    state=RunState.SUCCEEDED.value,
                    order="desc",
                    limit=COMPARE_CHOICES + 1,
                ).items
                if r.id != run_id
            ][:COMPARE_CHOICES]
        return {
            "others": others,
            "run": run,
            "links": links,
            "opens": run.link_opens,
            "opens_more": run.link_opens_more,
            "opens_total": sum(link.opens for link in links),
            "tracebacks": attempt_tracebacks(self.state.store, run),
            "failed_deliveries": sum(1 for d in run.deliveries if d.state == DeliveryState.FAILED),
            "finished": run.state not in ACTIVE_RUN,
            "user_agent_shown": USER_AGENT_SHOWN,
        }


NOTEBOOK_VIEW_CSP = (
    "sandbox; default-src 'none'; img-src data:; style-src 'unsafe-inline'; "
    "font-src data:; frame-ancestors 'self'"
)
"""The rendered notebook's policy: a notebook's HTML is its author's (hostile, as far
as this origin is concerned), so it is a sandbox without scripts, fetching nothing
but its own inline styles and data: images, framed only by nbcast's own pages."""


@page_route("/nbcast/runs/{run_id}/notebook.html", "A run's executed notebook as HTML")
class RunNotebookView(PageHandler):
    """The run's executed notebook (the run's, or a failed run's latest attempt's:
    :func:`~nbcast.views.run_files.run_notebook`) rendered by the ``html``
    renderer with its code and stderr shown — script-free and sanitised — and served
    under :data:`NOTEBOOK_VIEW_CSP`. Notebooks over
    :data:`~nbcast.views.run_files.MAX_VIEW_BYTES` are refused (422) with a
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
        from nbcast.tenancy.roles import require_role_or_operator
        from nbcast.views.overview import tenant_known
        from nbcast.views.run_files import NotebookUnavailable, run_notebook

        with self.state.db.session() as session:
            require_role_or_operator(session, caller, READING, self.state.clock.now())
            if not tenant_known(session, caller):  # an operator mapped to no tenant
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


@page_route("/nbcast/runs/{run_id}/compare", "Compare a run's report with another run's")
class RunComparePage(PageHandler):
    """``/nbcast/runs/{run_id}/compare?with=N``: the run page's "Compare" form lands
    here and is sent on to the comparison page the API renders, run N's report before
    this one's (``/nbcast/api/v1/runs/{N}/diff/{run_id}?format=html``), which checks
    both runs."""

    @web.authenticated
    @authorized
    async def get(self, run_id: str) -> None:
        """Redirect to the comparison of the two runs' reports."""
        self.caller  # noqa: B018 - a user without a tenant is refused before any work
        number = self.run_id(run_id)
        other = self.query_int("with", low=1, high=MAX_RUN_ID)
        if other is None:
            raise ApiError(400, "with (the run to compare with) is required", field="with")
        self.redirect(self.api_url("runs", other, "diff", number) + "?format=html")
