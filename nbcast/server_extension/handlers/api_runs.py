"""``/nbcast/api/v1/runs``: runs listed and shown, cancelled and rerun, and their files.

Thin faces over the execution plane's command layer — :func:`~nbcast.executor.queries.list_runs`
and :func:`~nbcast.views.runs.get_run` (the records ``nbcast runs list|show --json``
print), :func:`~nbcast.executor.control.cancel_run` and
:func:`~nbcast.scheduler.control.rerun_run` — each scoped to the caller's tenant, so
another tenant's run is "not found" (404) on every route here.

One run's answer is its :class:`~nbcast.views.runs.RunDetail`, whose fields — the
newest :data:`~nbcast.views.runs.LINK_OPENS_SHOWN` openings of its signed links
included — the ``RunDetail`` component is derived from.

The downloads (the executed notebook, each rendition) are in
:mod:`~nbcast.server_extension.handlers.api_run_files`.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from sqlalchemy.orm import Session

from nbcast.access import Caller, Page, encode_cursor
from nbcast.delivery.link_opens import MAX_USER_AGENT_CHARS, OpenRecord
from nbcast.delivery.queries import DeliveryRecord, RenditionRecord
from nbcast.errors import ConfigError, NotFoundError
from nbcast.executor.control import cancel_run
from nbcast.executor.failures import ErrorInfo
from nbcast.executor.queries import list_runs
from nbcast.executor.records import AttemptRecord, RunRecord
from nbcast.scheduler.control import rerun_run
from nbcast.scheduler.models import RunKind, RunState
from nbcast.scheduler.runs import MAX_RUN_ID, own_run, run_not_found
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import (
    INSTANT,
    STRING,
    schema,
)
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, Param, ref, route
from nbcast.tenancy.tenants import get_tenant
from nbcast.views.runs import LINK_OPENS_SHOWN, RunDetail, get_run

__all__ = [
    "MAX_LIST",
    "NOTEBOOK_MEDIA",
    "RUN_ID",
    "RunBase",
    "RunCancelHandler",
    "RunHandler",
    "RunRerunHandler",
    "RunsHandler",
    "known_tenant",
    "require_run_tenant",
]

MAX_LIST = 500
"""The most items one page of an API list holds."""

NOTEBOOK_MEDIA = "application/x-ipynb+json"

RUN_ID = Param(
    "run_id",
    "path",
    {"type": "integer", "minimum": 1, "maximum": MAX_RUN_ID},
    description="The run's id",
)
LIMIT = Param(
    "limit",
    schema={"type": "integer", "minimum": 1, "maximum": MAX_LIST, "default": 50},
    description=f"Items per page (1 to {MAX_LIST})",
)


ERROR_INFO = record_schema(
    "RunError",
    ErrorInfo,
    description="Why an attempt or a run failed: the exception, the failing cell "
    "(papermill's index) and the source line that raised.",
)
_NULLABLE_ERROR = {"oneOf": [ERROR_INFO, {"type": "null"}]}

RUN = record_schema(
    "Run",
    RunRecord,
    description="A run as listed (the keys of `nbcast runs list --json`).",
    overrides={
        "kind": {"type": "string", "enum": [k.value for k in RunKind]},
        "state": {"type": "string", "enum": [s.value for s in RunState]},
        "attempt": {"type": "integer", "minimum": 0},
        "context": {"type": "object"},
    },
)
RUN_PAGE = schema(
    "RunPage",
    {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": RUN},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's `after` (null: this is the last page)",
            },
        },
    },
)
ATTEMPT = record_schema("Attempt", AttemptRecord, refs={ErrorInfo: ERROR_INFO})
LINK_OPEN = record_schema(
    "LinkOpen",
    OpenRecord,
    description="One opening of a signed link: when, from which network (IPv4 /24, "
    "IPv6 /48, or `unknown`: never the whole address) and with which user agent.",
    overrides={"user_agent": {"type": "string", "maxLength": MAX_USER_AGENT_CHARS}},
    json_names={"link_id": "link", "run_id": "run", "delivery_id": "delivery", "filename": "file"},
)
RUN_DETAIL = record_schema(
    "RunDetail",
    RunDetail,
    description="Everything about one run (the keys of `nbcast runs show --json`, "
    f"with the newest {LINK_OPENS_SHOWN} openings of its signed links).",
    refs={
        ErrorInfo: ERROR_INFO,
        AttemptRecord: ATTEMPT,
        RenditionRecord: ref("Rendition"),
        DeliveryRecord: ref("Delivery"),
        OpenRecord: LINK_OPEN,
    },
    overrides={
        "kind": {"type": "string", "enum": [k.value for k in RunKind]},
        "state": {"type": "string", "enum": [s.value for s in RunState]},
        "link_opens": {"type": "array", "maxItems": LINK_OPENS_SHOWN, "items": LINK_OPEN},
    },
)
CANCEL = schema(
    "CancelResult",
    {
        "type": "object",
        "required": ["run_id", "state", "cancel", "requested_at", "requested_by"],
        "properties": {
            "run_id": {"type": "integer"},
            "state": {"type": "string", "enum": [s.value for s in RunState]},
            "cancel": {"type": "string", "enum": ["requested"]},
            "requested_at": INSTANT,
            "requested_by": STRING,
            "already_requested": {"type": "boolean"},
            "next": STRING,
        },
    },
)
RERUN = schema(
    "Rerun",
    {
        "type": "object",
        "required": ["id", "rerun_of", "kind", "state"],
        "properties": {
            "id": {"type": "integer"},
            "rerun_of": {"type": "integer"},
            "kind": {"type": "string", "enum": ["rerun"]},
            "state": {"type": "string", "enum": [RunState.QUEUED.value]},
        },
    },
)


# -- shared with the other handler modules of runs and deliveries ------------------


def known_tenant(session: Session, caller: Caller) -> bool:
    """Whether the caller's tenant has been created yet (a user whose tenant has no
    row yet has nothing to list, and every id names nothing of theirs)."""
    try:
        get_tenant(session, caller.tenant)
    except ConfigError:
        return False
    return True


def require_run_tenant(session: Session, caller: Caller, run_id: int) -> None:
    """:class:`~nbcast.errors.UnknownRunError` (404) when the caller's tenant does not
    exist yet: nothing of theirs can be found, and "no tenant" is no business of a 400."""
    if not known_tenant(session, caller):
        raise run_not_found(run_id, caller.tenant)


class RunBase(ApiHandler):
    """What the run handlers share: the run id of the path, the caller's run."""

    def run_id(self, raw: str) -> int:
        run_id = self.path_int("run_id", raw)
        if not 1 <= run_id <= MAX_RUN_ID:
            raise ApiError(404, f"no run {run_id}", code="not_found", field="run_id")
        return run_id

    def detail(self, run_id: int) -> RunDetail:
        with self.state.db.session() as session:
            require_run_tenant(session, self.caller, run_id)
            return get_run(session, self.caller, run_id, artifacts=self.state.store)

    def no_body(self) -> None:
        """Refuse a body where the operation takes none (it would be ignored otherwise,
        and a client that sends one expects it to mean something)."""
        raw = (self.request.body or b"").strip()
        if raw and raw != b"{}":
            raise ApiError(400, "this operation takes no body", field="body")


@route(
    f"{API}/runs",
    Operation(
        "get",
        "The tenant's runs by fire time (oldest first; order=desc for newest first), "
        "a page at a time",
        tag="runs",
        params=(
            Param("definition", description="Only this definition's runs (its name)"),
            Param("state", description="Only runs in this state (" + "|".join(RunState) + ")"),
            Param("kind", description="Only runs of this kind (" + "|".join(RunKind) + ")"),
            Param("from", schema=INSTANT, description="Only runs firing at or after this"),
            Param("until", schema=INSTANT, description="Only runs firing before this"),
            Param("order", schema={"type": "string", "enum": ["asc", "desc"]}),
            LIMIT,
            Param(
                "after",
                description="The previous page's `next` cursor, or the id of the last run "
                "seen (the page continues after it)",
            ),
        ),
        response=RUN_PAGE,
        errors=(400, 403, 404),
    ),
)
class RunsHandler(RunBase):
    """The run list (:func:`~nbcast.executor.queries.list_runs`)."""

    @authorized
    async def get(self) -> None:
        """One page of runs."""
        caller = self.caller
        order = self.query("order", max_length=8) or "asc"
        if order not in ("asc", "desc"):
            raise ApiError(400, "order must be asc or desc", field="order")
        filters: dict[str, Any] = {
            "definition": self.query("definition", max_length=255),
            "state": self.query("state", max_length=32),
            "kind": self.query("kind", max_length=32),
            "since": self.query_instant("from"),
            "until": self.query_instant("until"),
            "order": order,
            "limit": self.query_int("limit", low=1, high=MAX_LIST) or 50,
        }
        after = self.query("after", max_length=512)
        page = await self.call(self._list, caller, after, filters)
        self.write_json({"items": [r.to_json() for r in page.items], "next": page.next_after})

    def _list(self, caller: Caller, after: str | None, filters: dict[str, Any]) -> Page[RunRecord]:
        with self.state.db.session() as session:
            if not known_tenant(session, caller):
                if filters["definition"] is not None:
                    raise NotFoundError(f"no definition named {filters['definition']!r}")
                return Page([], None)
            if after is not None and after.isascii() and after.isdigit():
                after = self._cursor_of(session, caller, after)
            try:
                return list_runs(session, caller, after=after, **filters)
            except ConfigError as exc:
                raise ApiError(400, str(exc), field=_field_of(str(exc))) from None

    @staticmethod
    def _cursor_of(session: Session, caller: Caller, after: str) -> str:
        """The cursor that continues after run ``after`` (a run id) of the caller's."""
        run_id = int(after) if len(after) <= 19 else 0
        try:
            run = own_run(session, caller, run_id)
        except NotFoundError:
            raise ApiError(400, f"after: no run {after[:20]} of yours", field="after") from None
        return encode_cursor(run.fire_at, run.id)


def _field_of(message: str) -> str | None:
    for name, field in (("since", "from"), ("until", "until"), ("after", "after")):
        if message.startswith(name) or f" {name} " in message:
            return field
    if "state" in message:
        return "state"
    if "kind" in message:
        return "kind"
    return None


@route(
    f"{API}/runs/{{run_id}}",
    Operation(
        "get",
        "One run: context, parameters, attempts (why each failed: exception, failing cell "
        "and line), renditions, deliveries and the openings of its signed links",
        tag="runs",
        params=(RUN_ID,),
        response=RUN_DETAIL,
    ),
)
class RunHandler(RunBase):
    """One run (:func:`~nbcast.views.runs.get_run`)."""

    @authorized
    async def get(self, run_id: str) -> None:
        """The run in full, with the openings of its links."""
        self.caller  # noqa: B018 - a user without a tenant is refused before any work
        self.write_json(await self.call(self._read, self.run_id(run_id)))

    def _read(self, run_id: int) -> dict[str, Any]:
        with self.state.db.session() as session:
            require_run_tenant(session, self.caller, run_id)
            detail = get_run(session, self.caller, run_id, artifacts=self.state.store)
        return detail.to_json()


@route(
    f"{API}/runs/{{run_id}}/cancel",
    Operation(
        "post",
        "Ask for a queued or running run to be cancelled (a worker ends it CANCELLED)",
        tag="runs",
        params=(RUN_ID,),
        response=CANCEL,
        status=202,
        errors=(400, 403, 404, 409),
    ),
)
class RunCancelHandler(RunBase):
    """Cancel (:func:`~nbcast.executor.control.cancel_run`); a finished run is 409."""

    @authorized
    async def post(self, run_id: str) -> None:
        """Write the cancel request (once)."""
        caller = self.caller
        number = self.run_id(run_id)
        self.no_body()
        result = await self.call(self._cancel, caller, number)
        self.write_json(result.to_json(), status=202)

    def _cancel(self, caller: Caller, run_id: int) -> Any:
        with self.state.db.session() as session:
            require_run_tenant(session, caller, run_id)
        return cancel_run(self.state.db, self.state.clock, caller, run_id)


@route(
    f"{API}/runs/{{run_id}}/rerun",
    Operation(
        "post",
        "Queue a finished run again: same version, parameters and context (kind rerun)",
        tag="runs",
        params=(RUN_ID,),
        response=RERUN,
        status=201,
        errors=(400, 403, 404, 409),
    ),
)
class RunRerunHandler(RunBase):
    """Rerun (:func:`~nbcast.scheduler.control.rerun_run`); a run still active is 409."""

    @authorized
    async def post(self, run_id: str) -> None:
        """Queue the rerun; answer its id."""
        caller = self.caller
        number = self.run_id(run_id)
        self.no_body()
        new_id = await self.call(self._rerun, caller, number)
        self.set_header("Location", f"{self.base_url.rstrip('/')}{API}/runs/{new_id}")
        self.write_json(
            {
                "id": new_id,
                "rerun_of": number,
                "kind": RunKind.rerun.value,
                "state": RunState.QUEUED.value,
            },
            status=201,
        )

    def _rerun(self, caller: Caller, run_id: int) -> int:
        with self.state.db.session() as session:
            require_run_tenant(session, caller, run_id)
        return rerun_run(self.state.db, self.state.clock, caller, run_id)
