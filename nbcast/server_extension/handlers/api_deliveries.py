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
from nbcast.delivery.models import DeliveryState
from nbcast.delivery.queries import MAX_ID, DeliveryRecord, RenditionRecord, list_deliveries
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
    schema,
)
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = ["DELIVERY", "DeliveriesHandler", "RetryDeliveriesHandler"]


DELIVERY = record_schema(
    "Delivery",
    DeliveryRecord,
    description="One ledger row: a run's report to one recipient over one channel "
    "(the keys of `nbcast deliveries list --json`).",
    json_names={"run_id": "run"},
    overrides={"attempts": {"type": "integer", "minimum": 0}},
)
record_schema(
    "Rendition",
    RenditionRecord,
    description="One format of one run; download it from "
    "/runs/{run_id}/renditions/{id} once its state is DONE.",
    json_names={"run_id": "run"},
    overrides={"attempts": {"type": "integer", "minimum": 0}},
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
