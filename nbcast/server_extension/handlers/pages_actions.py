"""The status UI's buttons: HTML form posts that change state, then redirect.

==========================================  ==========================================
form posts to                               calls (the same function as the CLI)
==========================================  ==========================================
``/nbcast/definitions/{name}/pause``        :func:`nbcast.scheduler.control.pause`
``/nbcast/definitions/{name}/resume``       :func:`nbcast.scheduler.control.resume`
``/nbcast/definitions/{name}/run``          :func:`nbcast.scheduler.control.run_now`
``/nbcast/runs/{run_id}/cancel``            :func:`nbcast.executor.control.cancel_run`
``/nbcast/runs/{run_id}/rerun``             :func:`nbcast.scheduler.control.rerun_run`
``/nbcast/runs/{run_id}/retry-deliveries``  :func:`nbcast.delivery.commands.retry_failed_deliveries`
==========================================  ==========================================

Every form carries jupyter-server's XSRF token (a post without it is refused with 403
before anything runs). The answer is a 302 redirect (Post/Redirect/Get) to the
object's page — a new run's page after run-now and rerun, or the list the button sat
on (form field ``back``: ``overview`` or ``definitions``) — with a one-line flash
message saying what happened or why nothing did. Another tenant's object is a 404
page; a refused command (a finished run, bad parameters) is a flash message.
"""

from __future__ import annotations

from collections.abc import Callable

from jupyter_server.auth.decorator import authorized
from tornado import web

from nbcast.access import Caller
from nbcast.errors import NbcastError, NotFoundError
from nbcast.server_extension.handlers.page_handler import PageHandler
from nbcast.server_extension.routes import Operation, route

__all__ = ["DefinitionAction", "RunAction"]

MAX_PARAMETERS_TEXT = 8192
"""Characters of the run-now form's parameters (``key=value`` lines) accepted."""
MAX_PARAMETER_LINES = 100

_BACK = ("overview", "definitions")


class _ActionHandler(PageHandler):
    """A form post (module docstring)."""

    def back_to(self, default: str) -> str:
        """Where to go after the action: the list named by ``back``, else ``default``."""
        back = self.get_body_argument("back", "")
        if back == "overview":
            return self.nbcast_url("")
        if back == "definitions":
            return self.nbcast_url("definitions")
        return default

    async def act(self, function: Callable[[Caller], str | tuple[str, str]], page: str) -> None:
        """Run ``function(caller)`` in the thread pool; flash its message (or the
        refusal) and redirect to ``page`` (or the page it returns)."""
        caller = self.caller
        try:
            outcome = await self.call(function, caller)
        except NotFoundError:
            raise
        except (NbcastError, _Refused) as exc:
            self.flash("error", str(exc))
            self.redirect(self.back_to(page))
            return
        if isinstance(outcome, tuple):
            message, page = outcome
            self.flash("ok", message)
            self.redirect(page)
            return
        self.flash("ok", outcome)
        self.redirect(self.back_to(page))


class _Refused(Exception):
    """Form input refused before any command ran."""


@route(
    "/nbcast/definitions/{name}/{action}",
    Operation("post", "Pause, resume or run a definition now (a form)", tag="pages"),
    documented=False,
)
class DefinitionAction(_ActionHandler):
    """Pause, resume, run now."""

    @web.authenticated
    @authorized
    async def post(self, name: str, action: str) -> None:
        """Do ``action`` to definition ``name``."""
        state = self.state
        page = self.nbcast_url("definitions", name)
        if action == "pause":

            def pause(caller: Caller) -> str:
                from nbcast.scheduler.control import pause

                done = pause(state.db, state.clock, caller, name)
                return f"{name} paused" if done else f"{name} was paused already"

            await self.act(pause, page)
        elif action == "resume":

            def resume(caller: Caller) -> str:
                from nbcast.scheduler.control import resume

                result = resume(state.db, state.clock, caller, name)
                if result is None:
                    return f"{name} was not paused"
                return (
                    f"{name} resumed: {result.caught_up} slot(s) from before the pause decided, "
                    f"{result.skipped_paused} recorded SKIPPED (paused)"
                )

            await self.act(resume, page)
        elif action == "run":
            text = self.get_body_argument("parameters", "")
            await self.act(lambda caller: self._run_now(caller, name, text), page)
        else:
            raise NotFoundError(f"no action {action[:40]!r}")

    def _run_now(self, caller: Caller, name: str, text: str) -> tuple[str, str]:
        from nbcast.definitions.parameters import parse_assignments
        from nbcast.scheduler.control import run_now

        if len(text) > MAX_PARAMETERS_TEXT:
            raise _Refused(f"parameters are longer than {MAX_PARAMETERS_TEXT:,} characters")
        lines = [line.strip() for line in text.splitlines() if line.strip()]
        if len(lines) > MAX_PARAMETER_LINES:
            raise _Refused(f"more than {MAX_PARAMETER_LINES} parameter lines")
        values = parse_assignments(lines)
        run_id = run_now(self.state.db, self.state.clock, caller, name, values)
        return f"queued manual run {run_id} of {name}", self.nbcast_url("runs", run_id)


@route(
    "/nbcast/runs/{run_id}/{action}",
    Operation("post", "Cancel, rerun or retry the deliveries of a run (a form)", tag="pages"),
    documented=False,
)
class RunAction(_ActionHandler):
    """Cancel, rerun, retry failed deliveries."""

    @web.authenticated
    @authorized
    async def post(self, run_id: str, action: str) -> None:
        """Do ``action`` to run ``run_id``."""
        number = self.run_id(run_id)
        state = self.state
        page = self.nbcast_url("runs", number)
        if action == "cancel":

            def cancel(caller: Caller) -> str:
                from nbcast.executor.control import cancel_run

                result = cancel_run(state.db, state.clock, caller, number)
                if result.already_requested:
                    return f"run {number}: a cancel was asked for already"
                return f"run {number}: cancel requested; {result.next_step}"

            await self.act(cancel, page)
        elif action == "rerun":

            def rerun(caller: Caller) -> tuple[str, str]:
                from nbcast.scheduler.control import rerun_run

                new_id = rerun_run(state.db, state.clock, caller, number)
                return f"queued run {new_id}: a rerun of run {number}", self.nbcast_url(
                    "runs", new_id
                )

            await self.act(rerun, page)
        elif action == "retry-deliveries":

            def retry(caller: Caller) -> str:
                from nbcast.delivery.commands import retry_failed_deliveries

                count = retry_failed_deliveries(state.db, state.clock, caller, number)
                noun = "delivery" if count == 1 else "deliveries"
                return f"run {number}: {count} failed {noun} queued again"

            await self.act(retry, page)
        else:
            raise NotFoundError(f"no action {action[:40]!r}")
