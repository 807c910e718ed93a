"""``/nbcast/audit``: the tenant's audit trail for its admins (the command layer checks
the role: anyone else gets the 403 page), newest entry first, with whether the chain
still verifies."""

from __future__ import annotations

from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado import web

from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.page_handler import PageHandler, page_route

__all__ = ["AuditPage"]

PAGE_SIZE = 100
"""Entries one page of the trail shows."""


@page_route("/nbcast/audit", "The caller's tenant's audit trail (its admins)")
class AuditPage(PageHandler):
    """The trail (:func:`nbcast.tenancy.audit.trail`) and its check."""

    @web.authenticated
    @authorized
    async def get(self) -> None:
        """One page of entries (``?after=`` pages on)."""
        from nbcast.tenancy.audit_trail import trail, verify_log

        caller = self.caller
        after = self.get_query_argument("after", None)
        if after is not None and len(after) > 512:
            raise ApiError(400, "after is longer than 512 characters", field="after")

        def read() -> dict[str, Any]:
            now = self.state.clock.now()
            with self.state.db.session() as session:
                page = trail(session, caller, now, limit=PAGE_SIZE, after=after)
                _tenants, checked, broken = verify_log(session, caller, now)
            return {"page": page, "checked": checked, "broken": broken}

        found = await self.call(read)
        self.render_page(
            "audit.html",
            title="Audit trail",
            active=False,
            entries=found["page"].items,
            next_after=found["page"].next_after,
            checked=found["checked"],
            broken=found["broken"],
        )
