"""``/nbcast/api/v1/definitions/{name}/…``: what the scheduler does for one definition,
and the diff of two of its versions.

Thin faces over :mod:`nbcast.scheduler.control` (pause, resume, backfill; run now is
:mod:`~nbcast.server_extension.handlers.api_run_now`'s),
:func:`nbcast.scheduler.preview.preview_definition`,
:func:`nbcast.definitions.diff.diff_versions` (JSON) and
:func:`nbcast.definitions.diff_html.diff_html` (``format=html``: a page without
script, served under ``default-src 'none'``), each scoped to the caller's
tenant (another tenant's definition is "not found", 404).

Range ends (a backfill's ``from``/``until``, a preview's) are what the CLI takes: an
ISO 8601 instant with an offset, or a bare date ``YYYY-MM-DD`` meaning the start of
that day in the schedule's own zone (:func:`nbcast.definitions.transitions.range_bound`).
A backfill covers at most :data:`~nbcast.limits.MAX_BACKFILL_SLOTS` slots, as the
CLI's; a preview at most ``limit`` (1 to :data:`MAX_PREVIEW`, default
:data:`DEFAULT_PREVIEW`), more is a 400 that says to narrow the range.
"""

from __future__ import annotations

import re
from datetime import date, datetime
from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller
from nbcast.clock import parse_instant
from nbcast.definitions.parameters import schema_to_json
from nbcast.definitions.queries import get_version
from nbcast.errors import ConfigError
from nbcast.limits import MAX_BACKFILL_SLOTS, WALL_TIME_MAX, WALL_TIME_MIN
from nbcast.scheduler.control import backfill, pause, resume
from nbcast.scheduler.preview import preview_definition
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_definitions import (
    DEFINITION_NAME,
    DIFF,
    VERSION_PARAM,
    require_tenant,
)
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import STRING, schema
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = [
    "DEFAULT_PREVIEW",
    "MAX_PREVIEW",
    "PREVIEW_LIMIT",
    "BackfillHandler",
    "DefinitionDiffHandler",
    "DefinitionPreviewHandler",
    "PauseHandler",
    "ResumeHandler",
    "closed",
    "day_or_instant",
]

MAX_PREVIEW = 10_000
"""The most slots one preview answers."""
DEFAULT_PREVIEW = 1_000
PREVIEW_LIMIT = Param(
    "limit",
    schema={"type": "integer", "minimum": 1, "maximum": MAX_PREVIEW, "default": DEFAULT_PREVIEW},
    description=f"The most slots (1 to {MAX_PREVIEW:,}); more is a 400",
)
"""The ``limit`` query parameter of both previews."""

_INT = {"type": "integer", "minimum": 0}
DAY_OR_INSTANT = {
    "type": "string",
    "maxLength": 64,
    "description": "An ISO 8601 instant with an offset, or a date YYYY-MM-DD: the start "
    "of that day in the schedule's zone",
}

PAUSED = schema(
    "DefinitionPaused",
    {
        "type": "object",
        "required": ["definition", "paused", "changed"],
        "properties": {
            "definition": STRING,
            "paused": {"type": "boolean"},
            "changed": {"type": "boolean", "description": "False: it was already so"},
            "caught_up": {**_INT, "description": "Resume: slots due before the pause, decided"},
            "skipped_paused": {**_INT, "description": "Resume: slots recorded SKIPPED paused"},
        },
    },
)
BACKFILL_REQUEST = schema(
    "DefinitionBackfillRequest",
    {
        "type": "object",
        "required": ["from", "until"],
        "properties": {"from": DAY_OR_INSTANT, "until": DAY_OR_INSTANT},
        "additionalProperties": False,
    },
)
BACKFILLED = schema(
    "DefinitionBackfill",
    {
        "type": "object",
        "required": ["definition", "slots", "inserted", "already_recorded"],
        "properties": {
            "definition": STRING,
            "slots": _INT,
            "inserted": {**_INT, "description": "New backfill rows"},
            "already_recorded": {**_INT, "description": "Slots that had a row already"},
        },
    },
)
PREVIEW_SLOT = schema(
    "PreviewSlot",
    {
        "type": "object",
        "description": "A slot as `nbcast schedule preview --json` lists it.",
        "required": ["slot_key", "local", "fire_at", "status", "reason"],
        "properties": {
            "slot_key": STRING,
            "local": {"type": "string", "format": "date-time"},
            "fire_at": {"type": "string", "format": "date-time"},
            "status": {"type": "string", "enum": ["scheduled", "skipped"]},
            "reason": {"type": ["string", "null"]},
        },
    },
)
DEFINITION_PREVIEW_SLOT = schema(
    "DefinitionPreviewSlot",
    {
        "type": "object",
        "description": "A slot of a published definition as `nbcast schedule preview "
        "--definition … --json` lists it: its data interval and parameter values.",
        "required": [
            "slot_key",
            "local",
            "fire_at",
            "status",
            "reason",
            "interval_start",
            "interval_end",
            "parameters",
        ],
        "properties": {
            "slot_key": STRING,
            "local": {"type": "string", "format": "date-time"},
            "fire_at": {"type": "string", "format": "date-time"},
            "status": {"type": "string", "enum": ["scheduled", "skipped"]},
            "reason": {"type": ["string", "null"]},
            "interval_start": {"type": "string", "format": "date-time"},
            "interval_end": {"type": "string", "format": "date-time"},
            "parameters": {"type": "object"},
        },
    },
)

_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")


def day_or_instant(value: Any, field: str) -> date | datetime:
    """A range end as the CLI takes it (module docstring); ApiError 400 otherwise."""
    if not isinstance(value, str) or len(value) > 64:
        raise ApiError(400, f"{field} must be a date or an instant (text)", field=field)
    text = value.strip()
    if _DATE.fullmatch(text):
        try:
            day = date.fromisoformat(text)
        except ValueError:
            raise ApiError(400, f"{field}: {text} is not a calendar date", field=field) from None
        if not WALL_TIME_MIN.date() < day < WALL_TIME_MAX.date():
            raise ApiError(
                400,
                f"{field}: {text} is outside {WALL_TIME_MIN:%Y-%m-%d} .. {WALL_TIME_MAX:%Y-%m-%d}",
                field=field,
            )
        return day
    try:
        return parse_instant(text)
    except ConfigError as exc:
        raise ApiError(400, f"{field}: {exc}", field=field) from None


def closed(body: dict[str, Any], allowed: set[str]) -> None:
    unknown = sorted(set(body) - allowed)
    if unknown:
        raise ApiError(400, f"unknown field {unknown[0][:100]!r}", field=unknown[0][:100])


@route(
    f"{API}/definitions/{{name}}/pause",
    Operation(
        "post",
        "Pause the definition: nothing new is recorded until resume",
        tag="definitions",
        params=(DEFINITION_NAME,),
        response=PAUSED,
    ),
)
class PauseHandler(ApiHandler):
    """Pause."""

    @authorized
    async def post(self, name: str) -> None:
        """Pause ``name``."""
        caller = self.caller
        changed = await self.call(self._pause, caller, name)
        self.write_json({"definition": name, "paused": True, "changed": changed})

    def _pause(self, caller: Caller, name: str) -> bool:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
        return pause(self.state.db, self.state.clock, caller, name)


@route(
    f"{API}/definitions/{{name}}/resume",
    Operation(
        "post",
        "Resume the definition: slots that fell during the pause are recorded SKIPPED "
        "(paused), those due before it are decided normally",
        tag="definitions",
        params=(DEFINITION_NAME,),
        response=PAUSED,
    ),
)
class ResumeHandler(ApiHandler):
    """Resume."""

    @authorized
    async def post(self, name: str) -> None:
        """Resume ``name``."""
        caller = self.caller
        self.write_json(await self.call(self._resume, caller, name))

    def _resume(self, caller: Caller, name: str) -> dict[str, Any]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
        result = resume(self.state.db, self.state.clock, caller, name)
        body: dict[str, Any] = {"definition": name, "paused": False, "changed": result is not None}
        if result is not None:
            body.update(caught_up=result.caught_up, skipped_paused=result.skipped_paused)
        return body


@route(
    f"{API}/definitions/{{name}}/backfill",
    Operation(
        "post",
        f"Materialize the slots in [from, until) as backfill runs (at most "
        f"{MAX_BACKFILL_SLOTS:,} slots; until at or before the scheduler's watermark)",
        tag="definitions",
        params=(DEFINITION_NAME,),
        body=BACKFILL_REQUEST,
        response=BACKFILLED,
    ),
)
class BackfillHandler(ApiHandler):
    """Backfill."""

    @authorized
    async def post(self, name: str) -> None:
        """Backfill ``name`` over the body's range."""
        caller = self.caller
        body = await self.json_object()
        closed(body, {"from", "until"})
        for key in ("from", "until"):
            if key not in body:
                raise ApiError(400, f"{key} is required", field=key)
        start = day_or_instant(body["from"], "from")
        end = day_or_instant(body["until"], "until")
        self.write_json(await self.call(self._backfill, caller, name, start, end))

    def _backfill(
        self, caller: Caller, name: str, start: date | datetime, end: date | datetime
    ) -> dict[str, Any]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
        result = backfill(self.state.db, self.state.clock, caller, name, start, end)
        return {
            "definition": name,
            "slots": result.slots,
            "inserted": result.inserted,
            "already_recorded": result.slots - result.inserted,
        }


@route(
    f"{API}/definitions/{{name}}/preview",
    Operation(
        "get",
        "The latest version's slots in [from, until): its real schedule and DST "
        "policies, each slot with its data interval and parameter values (the rows of "
        "`nbcast schedule preview --definition NAME --json`)",
        tag="definitions",
        params=(
            DEFINITION_NAME,
            Param("from", schema=DAY_OR_INSTANT, required=True, description="Range start (incl.)"),
            Param("until", schema=DAY_OR_INSTANT, required=True, description="Range end (excl.)"),
            PREVIEW_LIMIT,
        ),
        response={"type": "array", "items": DEFINITION_PREVIEW_SLOT},
    ),
)
class DefinitionPreviewHandler(ApiHandler):
    """A published definition's schedule preview."""

    @authorized
    async def get(self, name: str) -> None:
        """The slots of ``name`` in the range."""
        caller = self.caller
        start, end = range_query(self)
        limit = self.query_int("limit", low=1, high=MAX_PREVIEW) or DEFAULT_PREVIEW
        self.write_json(await self.call(self._preview, caller, name, start, end, limit))

    def _preview(
        self, caller: Caller, name: str, start: date | datetime, end: date | datetime, limit: int
    ) -> list[dict[str, Any]]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
            info = get_version(session, caller, name)
        return preview_definition(
            info.block, schema_to_json(info.schema), range_from=start, range_to=end, limit=limit
        )


def range_query(handler: ApiHandler) -> tuple[date | datetime, date | datetime]:
    """The required ``from`` and ``until`` query parameters (dates or instants)."""
    values = []
    for key in ("from", "until"):
        raw = handler.query(key, max_length=64)
        if raw is None:
            raise ApiError(400, f"{key} is required", field=key)
        values.append(day_or_instant(raw, key))
    return values[0], values[1]


@route(
    f"{API}/definitions/{{name}}/diff",
    Operation(
        "get",
        "What changed from version a to version b: nbdime's structured diff (JSON); "
        "with format=nbdime also version a's notebook (`base`: what nbdime's web "
        "components render the diff on); with format=html a self-contained HTML page "
        "of it (no script)",
        tag="definitions",
        params=(
            DEFINITION_NAME,
            Param("a", schema=VERSION_PARAM, required=True, description="The older version"),
            Param("b", schema=VERSION_PARAM, required=True, description="The newer version"),
            Param(
                "format",
                schema={"type": "string", "enum": ["json", "nbdime", "html"], "default": "json"},
                description="json (default), nbdime (json with the base notebook) or html",
            ),
        ),
        response=DIFF,
        also=(("text/html", {"type": "string"}),),
    ),
)
class DefinitionDiffHandler(ApiHandler):
    """The diff of two versions."""

    @authorized
    async def get(self, name: str) -> None:
        """The diff, as JSON or HTML."""
        caller = self.caller
        a = self.query_int("a", low=1, high=2**31 - 1)
        b = self.query_int("b", low=1, high=2**31 - 1)
        for key, value in (("a", a), ("b", b)):
            if value is None:
                raise ApiError(400, f"{key} (a version number) is required", field=key)
        form = self.query("format", max_length=8) or "json"
        if form not in ("json", "nbdime", "html"):
            raise ApiError(400, "format must be json, nbdime or html", field="format")
        assert a is not None
        assert b is not None
        answer = await self.call(self._diff, caller, name, a, b, form)
        if form != "html":
            self.write_json(answer)
            return
        self.set_status(200)
        self.set_header(
            "Content-Security-Policy",
            "frame-ancestors 'self'; default-src 'none'; style-src 'unsafe-inline'",
        )
        self.set_header("X-Content-Type-Options", "nosniff")
        self.finish(answer, set_content_type="text/html; charset=UTF-8")

    def _diff(self, caller: Caller, name: str, a: int, b: int, form: str) -> Any:
        from nbcast.definitions.diff import diff_versions
        from nbcast.definitions.diff_html import diff_html
        from nbcast.definitions.review import review_summary

        with self.state.db.session() as session:
            require_tenant(session, caller, name)
            old = get_version(session, caller, name, a)
            new = get_version(session, caller, name, b)
        summary = review_summary(old, new, self.state.clock.now())
        if form == "html":
            return diff_html(old, new, summary)
        answer = {
            "definition": name,
            "a": a,
            "b": b,
            "summary": summary.to_json(),
            "diff": diff_versions(old, new),
        }
        if form == "nbdime":
            answer["base"] = old.notebook
        return answer
