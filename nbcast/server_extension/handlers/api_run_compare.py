"""``GET /nbcast/api/v1/runs/{a}/diff/{b}``: two runs' reports compared as a reader
would (:func:`nbcast.views.run_compare.compare_runs`) — JSON, or with ``format=html``
the self-contained page (:mod:`nbcast.views.output_diff_html`) the status page links
to and the Lab frames, served without script under ``default-src 'none'`` (images
as ``data:`` URIs only).

Both runs must be the caller's tenant's; a run without an executed notebook, or one
missing from the store, is a 404 saying which; one over the size shown is a 422.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_runs import RUN_ID, RunBase, require_run_tenant
from nbcast.server_extension.openapi import schema
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = ["RunCompareHandler"]

OTHER_RUN = dataclasses.replace(
    RUN_ID, name="other_id", description="The run compared with it (the 'after' side)"
)
COMPARISON = schema(
    "RunComparison",
    {
        "type": "object",
        "description": "Two runs' reports compared: recorded tables by name and key (each "
        "changed value with its delta), text by cell (unified lines), images by digest.",
        "required": ["a", "b", "same", "tables", "texts", "images", "more_images"],
        "properties": {
            "a": {"type": "object", "description": "The first run: id, definition, version, "
                  "kind, slot_key, parameters"},
            "b": {"type": "object", "description": "The second run, the same keys"},
            "same": {"type": "boolean", "description": "A reader would see no difference"},
            "tables": {"type": "array", "items": {"type": "object"}},
            "texts": {"type": "array", "items": {"type": "object"}},
            "images": {"type": "array", "items": {"type": "object"}},
            "more_images": {"type": "integer", "minimum": 0},
        },
    },
)  # fmt: skip

_HTML_POLICY = (
    "frame-ancestors 'self'; default-src 'none'; style-src 'unsafe-inline'; img-src data:"
)


@route(
    f"{API}/runs/{{run_id}}/diff/{{other_id}}",
    Operation(
        "get",
        "Compare two runs' reports as a reader would: tables cell by cell with numeric "
        "deltas, text, images; volatile metadata ignored",
        tag="runs",
        params=(
            RUN_ID,
            OTHER_RUN,
            Param(
                "format",
                schema={"type": "string", "enum": ["json", "html"], "default": "json"},
                description="json (default) or html (a page without script)",
            ),
        ),
        response=COMPARISON,
        also=(("text/html", {"type": "string"}),),
    ),
)
class RunCompareHandler(RunBase):
    """Two runs' reports compared."""

    @authorized
    async def get(self, run_id: str, other_id: str) -> None:
        """The comparison, as JSON or HTML."""
        self.caller  # noqa: B018 - a user without a tenant is refused before any work
        a, b = self.run_id(run_id), self.run_id(other_id)
        form = self.query("format", max_length=8) or "json"
        if form not in ("json", "html"):
            raise ApiError(400, "format must be json or html", field="format")
        answer = await self.call(self._compare, a, b, form)
        if form == "json":
            self.write_json(answer)
            return
        self.set_status(200)
        self.set_header("Content-Security-Policy", _HTML_POLICY)
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(answer, set_content_type="text/html; charset=UTF-8")

    def _compare(self, a: int, b: int, form: str) -> Any:
        from nbcast.views.output_diff_html import comparison_html
        from nbcast.views.run_compare import compare_runs
        from nbcast.views.run_files import NotebookUnavailable

        with self.state.db.session() as session:
            require_run_tenant(session, self.caller, a)
            require_run_tenant(session, self.caller, b)
            try:
                comparison = compare_runs(session, self.caller, a, b, self.state.store)
            except NotebookUnavailable as exc:
                raise ApiError(422 if exc.status == 413 else 404, str(exc)) from None
        return comparison_html(comparison) if form == "html" else comparison.to_json()
