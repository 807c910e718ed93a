"""``/nbcast/api/v1/audit``: the tenant's audit trail (its admins; operators).

A thin face over :func:`~nbcast.tenancy.audit.trail` (newest entry first, keyset
pages) and :func:`~nbcast.tenancy.audit.verify_log`: the command layer checks the
role, so anyone else gets 403.
"""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller
from nbcast.errors import ConfigError
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_runs import LIMIT, MAX_LIST
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import schema
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, Param, route
from nbcast.tenancy.audit import Action, AuditRecord
from nbcast.tenancy.audit_trail import trail, verify_log

__all__ = ["AuditHandler", "AuditVerifyHandler"]

_HASH = {"type": "string", "pattern": "^[0-9a-f]{64}$"}

AUDIT_ENTRY = record_schema(
    "AuditEntry",
    AuditRecord,
    description="One entry of the tenant's hash-chained audit log (one line of "
    "`nbcast audit export`).",
    overrides={
        "seq": {"type": "integer", "minimum": 1},
        "action": {"type": "string", "enum": [a.value for a in Action]},
        "prev_hash": _HASH,
        "hash": _HASH,
    },
)
AUDIT_PAGE = schema(
    "AuditPage",
    {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": AUDIT_ENTRY},
            "next": {"type": ["string", "null"]},
        },
    },
)
AUDIT_CHECK = schema(
    "AuditCheck",
    {
        "type": "object",
        "required": ["intact", "entries", "broken"],
        "properties": {
            "intact": {"type": "boolean"},
            "entries": {"type": "integer", "minimum": 0},
            "broken": {
                "oneOf": [
                    {"type": "null"},
                    {
                        "type": "object",
                        "required": ["seq", "problem"],
                        "properties": {
                            "seq": {"type": "integer"},
                            "problem": {"type": "string"},
                        },
                    },
                ]
            },
        },
    },
)


@route(
    f"{API}/audit",
    Operation(
        "get",
        "The tenant's audit trail, newest entry first, a page at a time (admins)",
        tag="audit",
        params=(LIMIT, Param("after", description="The previous page's `next` cursor")),
        response=AUDIT_PAGE,
        errors=(400, 403),
    ),
)
class AuditHandler(ApiHandler):
    """The trail (:func:`~nbcast.tenancy.audit.trail`)."""

    @authorized
    async def get(self) -> None:
        """One page of entries."""
        caller = self.caller
        limit = self.query_int("limit", low=1, high=MAX_LIST) or 50
        after = self.query("after", max_length=512)
        self.write_json(await self.call(self._page, caller, limit, after))

    def _page(self, caller: Caller, limit: int, after: str | None) -> dict[str, Any]:
        with self.state.db.session() as session:
            try:
                page = trail(session, caller, self.state.clock.now(), limit=limit, after=after)
            except ConfigError as exc:
                raise ApiError(400, str(exc), field="after") from None
        return {"items": [e.to_json() for e in page.items], "next": page.next_after}


@route(
    f"{API}/audit/verify",
    Operation(
        "get",
        "Check the tenant's chain: no entry edited, deleted, inserted or reordered (admins)",
        tag="audit",
        response=AUDIT_CHECK,
        errors=(403,),
    ),
)
class AuditVerifyHandler(ApiHandler):
    """The check (:func:`~nbcast.tenancy.audit.verify_log`)."""

    @authorized
    async def get(self) -> None:
        """Verify, and say where the chain breaks."""
        self.write_json(await self.call(self._verify, self.caller))

    def _verify(self, caller: Caller) -> dict[str, Any]:
        with self.state.db.session() as session:
            _tenants, checked, broken = verify_log(session, caller, self.state.clock.now())
        return {
            "intact": broken is None,
            "entries": checked,
            "broken": None if broken is None else {"seq": broken.seq, "problem": broken.problem},
        }
