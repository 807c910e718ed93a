"""``/nbcast/api/v1/health``: the services' heartbeats and the scheduler's lag."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized

from nbcast.governance.health import health
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.routes import API, Operation, ref, route

__all__ = ["HealthHandler"]


@route(
    f"{API}/health",
    Operation(
        "get",
        "The services (scheduler, workers, delivery workers) from their heartbeat rows, "
        "with their lag, and the scheduler's lag",
        tag="service",
        response=ref("Health"),
        errors=(403,),
    ),
)
class HealthHandler(ApiHandler):
    """The service health (:mod:`nbcast.governance.health`)."""

    @authorized
    async def get(self) -> None:
        """The health document."""
        self.caller  # noqa: B018 - a user without a tenant is refused here too
        report = await self.call(self._health)
        self.write_json(report)

    def _health(self) -> dict[str, object]:
        with self.state.db.session() as session:
            return health(session, self.state.clock.now()).to_json()
