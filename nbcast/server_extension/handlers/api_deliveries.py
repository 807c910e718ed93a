"""``/nbcast/api/v1/deliveries``: the delivery ledger, and retrying a run's failures.

Thin faces over :func:`~nbcast.delivery.queries.list_deliveries` (the rows
``nbcast deliveries list --json`` prints) and
:func:`~nbcast.delivery.commands.retry_failed_deliveries` (``nbcast deliver
--retry-failed``), scoped to the caller's tenant: another tenant's run or definition
is "not found" (404).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller, Page
from nbcast.delivery.commands import retry_failed_deliveries
from nbcast.delivery.models import DeliveryReason, DeliveryState, RenditionState
from nbcast.delivery.queries import MAX_ID, DeliveryRecord, list_deliveries
from nbcast.errors import ConfigError, NotFoundError
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_runs import (
    LIMIT,
    MAX_LIST,
    RUN_ID,
    known_tenant,
    require_run_tenant,
)
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import (
    NULLABLE_INSTANT,
    NULLABLE_OBJECT,
    NULLABLE_STRING,
    schema,
)
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = ["DELIVERY", "DeliveriesHandler", "RetryDeliveriesHandler"]


DELIVERY = schema(
    "Delivery",
    {
        "type": "object",
        "description": "One ledger row: a run's report to one recipient over one channel "
        "(the keys of `nbcast deliveries list --json`).",
        "required": ["id", "run", "report", "channel", "recipient", "state", "reason"],
        "properties": {
            "id": {"type": "integer"},
            "run": {"type": "integer"},
            "report": {"type": "string"},
            "channel": {"type": "string"},
            "recipient": {"type": "string"},
            "formats": {"type": "array", "items": {"type": "string"}},
            "state": {"type": "string", "enum": [s.value for s in DeliveryState]},
            "reason": {
                "type": ["string", "null"],
                "enum": [*(r.value for r in DeliveryReason), None],
            },
            "attempts": {"type": "integer", "minimum": 0},
            "possible_duplicate": {"type": "boolean"},
            "sent_at": NULLABLE_INSTANT,
            "receipt": NULLABLE_OBJECT,
            "error": NULLABLE_OBJECT,
            "outcome_unknown": {"type": "boolean"},
            "not_before": NULLABLE_INSTANT,
            "created_at": NULLABLE_INSTANT,
            "updated_at": NULLABLE_INSTANT,
        },
    },
)
schema(
    "Rendition",
    {
        "type": "object",
        "description": "One format of one run; download it from "
        "/runs/{run_id}/renditions/{id} once its state is DONE.",
        "required": ["id", "run", "format", "variant", "state", "sha256", "media_type"],
        "properties": {
            "id": {"type": "integer"},
            "run": {"type": "integer"},
            "format": {"type": "string"},
            "variant": {"type": "string"},
            "state": {"type": "string", "enum": [s.value for s in RenditionState]},
            "attempts": {"type": "integer", "minimum": 0},
            "sha256": NULLABLE_STRING,
            "size": {"type": ["integer", "null"]},
            "filename": NULLABLE_STRING,
            "media_type": NULLABLE_STRING,
            "seconds": {"type": ["number", "null"]},
            "error": NULLABLE_OBJECT,
            "rendered_at": NULLABLE_INSTANT,
        },
    },
)
DELIVERY_PAGE = schema(
    "DeliveryPage",
    {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": DELIVERY},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's `after` (null: this is the last page)",
            },
        },
    },
)
RETRIED = schema(
    "DeliveriesRetried",
    {
        "type": "object",
        "required": ["run", "retried"],
        "properties": {
            "run": {"type": "integer"},
            "retried": {
                "type": "integer",
                "minimum": 0,
                "description": "FAILED deliveries put back to PENDING",
            },
        },
    },
)


@route(
    f"{API}/deliveries",
    Operation(
        "get",
        "The tenant's delivery ledger, newest first, a page at a time",
        tag="deliveries",
        params=(
            Param(
                "run",
                schema={"type": "integer", "minimum": 1, "maximum": MAX_ID},
                description="Only this run's deliveries",
            ),
            Param("state", description="Only this state (" + "|".join(DeliveryState) + ")"),
            Param("channel", description="Only this channel (email, slack, link, webhook, …)"),
            Param("definition", description="Only this definition's deliveries (its name)"),
            LIMIT,
            Param("after", description="The previous page's `next` cursor"),
        ),
        response=DELIVERY_PAGE,
    ),
)
class DeliveriesHandler(ApiHandler):
    """The ledger (:func:`~nbcast.delivery.queries.list_deliveries`)."""

    @authorized
    async def get(self) -> None:
        """One page of deliveries."""
        caller = self.caller
        filters: dict[str, Any] = {
            "run_id": self.query_int("run", low=1, high=MAX_ID),
            "state": self.query("state", max_length=32),
            "channel": self.query("channel", max_length=64),
            "definition": self.query("definition", max_length=255),
            "limit": self.query_int("limit", low=1, high=MAX_LIST) or 50,
            "after": self.query("after", max_length=512),
        }
        page = await self.call(self._list, caller, filters)
        self.write_json({"items": [d.to_json() for d in page.items], "next": page.next_after})

    def _list(self, caller: Caller, filters: dict[str, Any]) -> Page[DeliveryRecord]:
        with self.state.db.session() as session:
            if not known_tenant(session, caller):
                if filters["run_id"] is not None:
                    require_run_tenant(session, caller, filters["run_id"])
                if filters["definition"] is not None:
                    raise NotFoundError(f"no definition named {filters['definition']!r}")
                return Page([], None)
            try:
                return list_deliveries(session, caller, **filters)
            except ConfigError as exc:
                text = str(exc)
                field = "after" if text.startswith("after") else "state"
                raise ApiError(400, text, field=field) from None


@route(
    f"{API}/runs/{{run_id}}/deliveries/retry",
    Operation(
        "post",
        "Put the run's FAILED deliveries back to PENDING (and render its failed "
        "renditions again); SENT ones are never touched",
        tag="deliveries",
        params=(RUN_ID,),
        response=RETRIED,
    ),
)
class RetryDeliveriesHandler(ApiHandler):
    """Retry (:func:`~nbcast.delivery.commands.retry_failed_deliveries`)."""

    @authorized
    async def post(self, run_id: str) -> None:
        """Retry the failed deliveries; answer how many."""
        caller = self.caller
        number = self.path_int("run_id", run_id)
        raw = (self.request.body or b"").strip()
        if raw and raw != b"{}":
            raise ApiError(400, "this operation takes no body", field="body")
        count = await self.call(self._retry, caller, number)
        self.write_json({"run": number, "retried": count})

    def _retry(self, caller: Caller, run_id: int) -> int:
        if run_id > MAX_ID:
            raise ApiError(404, f"no run {run_id}", code="not_found", field="run_id")
        with self.state.db.session() as session:
            require_run_tenant(session, caller, run_id)
        return retry_failed_deliveries(self.state.db, self.state.clock, caller, run_id)
