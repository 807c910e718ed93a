"""``/nbcast/api/v1/sla``: the tenant's SLA misses, newest slot first.

A thin face over :func:`~nbcast.oversight.sla_queries.list_misses` (the rows ``nbcast
sla list --json`` prints), scoped to the caller's tenant: any member may read them, and
another tenant's definition is "not found" (404).
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller, Page
from nbcast.errors import ConfigError, NotFoundError
from nbcast.oversight.sla import AlertState
from nbcast.oversight.sla_queries import SlaAlertRecord, SlaMissRecord, list_misses
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_runs import LIMIT, MAX_LIST, known_tenant
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import INSTANT, schema
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, Param, route

__all__ = ["SLA_MISS", "SlaHandler"]

SLA_ALERT = record_schema(
    "SlaAlert",
    SlaAlertRecord,
    overrides={
        "state": {"type": "string", "enum": [s.value for s in AlertState]},
        "attempts": {"type": "integer", "minimum": 0},
    },
)
SLA_MISS = record_schema(
    "SlaMiss",
    SlaMissRecord,
    description="A slot not delivered within its definition's sla.delivered_within, "
    "and the alert sent to the definition's owner (the keys of `nbcast sla list --json`).",
    refs={SlaAlertRecord: SLA_ALERT},
    json_names={"slot_key": "slot", "run_id": "run"},
)
SLA_MISS_PAGE = schema(
    "SlaMissPage",
    {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": SLA_MISS},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's `after` (null: this is the last page)",
            },
        },
    },
)


@route(
    f"{API}/sla",
    Operation(
        "get",
        "The tenant's SLA misses, newest slot first, a page at a time",
        tag="sla",
        params=(
            Param("definition", description="Only this definition's misses (its name)"),
            Param("from", schema=INSTANT, description="Only slots firing at or after this"),
            Param("to", schema=INSTANT, description="Only slots firing before this"),
            LIMIT,
            Param("after", description="The previous page's `next` cursor"),
        ),
        response=SLA_MISS_PAGE,
    ),
)
class SlaHandler(ApiHandler):
    """The misses (:func:`~nbcast.oversight.sla_queries.list_misses`)."""

    @authorized
    async def get(self) -> None:
        """One page of misses."""
        caller = self.caller
        filters: dict[str, Any] = {
            "definition": self.query("definition", max_length=255),
            "since": self.query_instant("from"),
            "until": self.query_instant("to"),
            "limit": self.query_int("limit", low=1, high=MAX_LIST) or 50,
            "after": self.query("after", max_length=512),
        }
        page = await self.call(self._list, caller, filters)
        self.write_json({"items": [m.to_json() for m in page.items], "next": page.next_after})

    def _list(self, caller: Caller, filters: dict[str, Any]) -> Page[SlaMissRecord]:
        with self.state.db.session() as session:
            if not known_tenant(session, caller):
                if filters["definition"] is not None:
                    raise NotFoundError(f"no definition named {filters['definition']!r}")
                return Page([], None)
            try:
                return list_misses(session, caller, **filters)
            except ConfigError as exc:
                text = str(exc)
                field = next(
                    (
                        f
                        for key, f in (("after", "after"), ("since", "from"), ("until", "to"))
                        if text.startswith(key)
                    ),
                    None,
                )
                raise ApiError(400, text, field=field) from None
