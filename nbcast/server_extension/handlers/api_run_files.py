"""``/nbcast/api/v1/runs/{run_id}/notebook`` and ``…/renditions/{rendition_id}``: a run's
files from the artifact store.

Downloads are served as attachments with ``X-Content-Type-Options: nosniff`` and
``Content-Security-Policy: sandbox``: a notebook's HTML is the notebook author's, and
must never run as this origin's page. A rendition asked for with
``disposition=inline`` (the JupyterLab panel's links) is shown instead when it is HTML
or PDF, under the signed links' policies (:func:`~.links.shown_policy`: HTML sandboxed,
no script, nothing fetched); other files download either way.

The executed notebook carries its version's ``nbcast`` block: its webhook URLs are
masked for everyone but the tenant's admins, as everywhere
(:mod:`nbcast.definitions.recipients`).
"""

from __future__ import annotations

import re

from jupyter_server.auth.decorator import authorized

from nbcast.definitions.recipients import disclosure
from nbcast.delivery.models import RenditionState
from nbcast.errors import ConfigError
from nbcast.scheduler.runs import MAX_RUN_ID
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_runs import NOTEBOOK_MEDIA, RUN_ID, RunBase
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.handlers.links import shown_policy
from nbcast.server_extension.routes import API, Operation, Param, route
from nbcast.views.runs import RunDetail

__all__ = ["RunNotebookHandler", "RunRenditionHandler", "send_attachment"]

_FILENAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def send_attachment(
    handler: ApiHandler, data: bytes, media_type: str, filename: str, *, inline: bool = False
) -> None:
    """Answer ``data`` as a download: an attachment the browser saves, never renders
    as this origin's page (module docstring). With ``inline``, HTML and PDF are shown
    in the browser instead, under the signed links' policies (HTML sandboxed: no
    script runs, nothing is fetched); other files still download."""
    safe = _FILENAME_UNSAFE.sub("_", filename).strip("._")[:120] or "download"
    policy, shown = shown_policy(media_type) if inline else ("sandbox", False)
    handler.set_status(200)
    disposition = "inline" if shown else "attachment"
    handler.set_header("Content-Disposition", f'{disposition}; filename="{safe}"')
    handler.set_header("X-Content-Type-Options", "nosniff")
    handler.set_header("Content-Security-Policy", policy)
    handler.set_header("Cache-Control", "private, no-store")
    # jupyter-server's APIHandler.finish sets the type (application/json unless told).
    handler.finish(data, set_content_type=media_type)


# -- handlers ---------------------------------------------------------------------


@route(
    f"{API}/runs/{{run_id}}/notebook",
    Operation(
        "get",
        "Download the run's executed notebook (its latest attempt's, for a failed run)",
        tag="runs",
        params=(RUN_ID,),
        media=NOTEBOOK_MEDIA,
    ),
)
class RunNotebookHandler(RunBase):
    """The executed notebook from the artifact store, as an attachment."""

    @authorized
    async def get(self, run_id: str) -> None:
        """The notebook's bytes; 404 while the run has none."""
        self.caller  # noqa: B018
        detail, data = await self.call(self._notebook, self.run_id(run_id))
        send_attachment(self, data, NOTEBOOK_MEDIA, f"{detail.definition}-run{detail.id}.ipynb")

    def _notebook(self, run_id: int) -> tuple[RunDetail, bytes]:
        detail = self.detail(run_id)
        data = self._artifact(detail.notebook_sha256, f"run {run_id} has no notebook")
        with self.state.db.session() as session:
            shown = disclosure(session, self.caller)
        return detail, shown.notebook_bytes(data)

    def _artifact(self, sha256: str | None, missing: str) -> bytes:
        if sha256 is None:
            raise ApiError(404, missing, code="not_found")
        try:
            return self.state.store.get(sha256)
        except (KeyError, FileNotFoundError, ConfigError):
            raise ApiError(
                404, f"{missing} (not in the artifact store)", code="not_found"
            ) from None


@route(
    f"{API}/runs/{{run_id}}/renditions/{{rendition_id}}",
    Operation(
        "get",
        "Download one rendition of the run (HTML, PDF, XLSX, CSV) with its content type, "
        "as an attachment (HTML also sandboxed)",
        tag="runs",
        params=(
            RUN_ID,
            Param(
                "rendition_id",
                "path",
                {"type": "integer", "minimum": 1, "maximum": MAX_RUN_ID},
                description="A rendition id from the run's `renditions`",
            ),
            Param(
                "disposition",
                schema={
                    "type": "string",
                    "enum": ["attachment", "inline"],
                    "default": "attachment",
                },
                description="inline: show HTML (sandboxed) and PDF in the browser; other "
                "files download either way",
            ),
        ),
        media="application/octet-stream",
    ),
)
class RunRenditionHandler(RunNotebookHandler):
    """One rendition's bytes (:func:`~nbcast.delivery.queries.renditions_of_run`)."""

    @authorized
    async def get(self, run_id: str, rendition_id: str) -> None:  # type: ignore[override]
        """The rendition; 404 for one not rendered (yet, or ever)."""
        self.caller  # noqa: B018
        number = self.run_id(run_id)
        rendition = self.path_int("rendition_id", rendition_id)
        disposition = self.query("disposition", max_length=16) or "attachment"
        if disposition not in ("attachment", "inline"):
            raise ApiError(400, "disposition must be attachment or inline", field="disposition")
        media, filename, data = await self.call(self._rendition, number, rendition)
        send_attachment(self, data, media, filename, inline=disposition == "inline")

    def _rendition(self, run_id: int, rendition_id: int) -> tuple[str, str, bytes]:
        detail = self.detail(run_id)
        found = [r for r in detail.renditions if r.id == rendition_id]
        if not found:
            raise ApiError(404, f"run {run_id} has no rendition {rendition_id}", code="not_found")
        [rendition] = found
        missing = f"rendition {rendition_id} of run {run_id} is {rendition.state.value}"
        sha256 = rendition.sha256 if rendition.state == RenditionState.DONE else None
        data = self._artifact(sha256, missing)
        media = rendition.media_type or "application/octet-stream"
        filename = rendition.filename or f"{detail.definition}-run{run_id}.{rendition.format}"
        return media, filename, data
