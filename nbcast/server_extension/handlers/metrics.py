"""``/nbcast/metrics``: Prometheus text exposition of nbcast's state and the server
process (:mod:`nbcast.server_extension.metrics`).

Scraping needs jupyter-server's authentication and authorization (``@authorized``,
resource ``nbcast``: send ``Authorization: token …``) unless the operator sets
``NbcastApp.metrics_open = True`` — then anyone who reaches the server may scrape,
so open it only where the network is the protection (a scrape port behind the
proxy). Behind authentication the numbers are the installation's, so they are for
the server's own token (the owner's credential, which a Prometheus scrape job
normally carries), operators and people with a role in an existing tenant
(:func:`~nbcast.tenancy.roles.require_role_or_operator`); an authenticated user
without one gets 403. The per-tenant queue depth, which names tenants, is served to
operators (the server's own token, and anyone granted the operator role,
``NbcastApp.admin_users`` included) and on an open endpoint; a tenant's user who
scrapes sees the totals only.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import allow_unauthenticated, authorized
from prometheus_client.exposition import choose_encoder

from nbcast.access import Caller
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.identity import is_anonymous
from nbcast.server_extension.metrics import metrics_registry
from nbcast.server_extension.routes import Operation, route

__all__ = ["MetricsHandler"]


@route(
    "/nbcast/metrics",
    Operation("get", "Prometheus metrics (the token unless metrics_open)", tag="service"),
    documented=False,
)
class MetricsHandler(ApiHandler):
    """The exposition (module docstring)."""

    @allow_unauthenticated
    async def get(self) -> None:
        """Open, or behind the server's authorization."""
        if self.state.options.metrics_open:
            await self._expose(per_tenant=True)
        else:
            await self._authorized()

    @authorized
    async def _authorized(self) -> None:
        """For an authenticated, authorized user; tenants named for administrators."""
        caller = self.caller  # a user without a tenant is refused here too
        owner = is_anonymous(self.current_user)
        operator = owner or await self.call(self._operates, caller)
        await self._expose(per_tenant=operator)

    def _operates(self, caller: Caller) -> bool:
        """Whether ``caller`` operates the installation; AccessDeniedError when they
        neither operate it nor hold a role in an existing tenant."""
        from nbcast.tenancy.roles import is_operator, require_role_or_operator

        with self.state.db.session() as session:
            require_role_or_operator(session, caller, "reading the metrics", self.state.clock.now())
            return is_operator(session, caller.user)

    async def _expose(self, *, per_tenant: bool) -> None:
        registry = metrics_registry(self.state.db, self.state.clock, per_tenant=per_tenant)
        encoder, content_type = choose_encoder(self.request.headers.get("Accept", "")[:1000])
        body = await self.call(encoder, registry)
        self.set_header("Cache-Control", "no-store")
        self.set_header("Vary", "Accept")
        self.finish(body, set_content_type=content_type)  # not APIHandler's JSON
