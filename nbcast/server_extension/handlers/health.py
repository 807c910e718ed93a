"""``/nbcast/api/v1/health``: the services' heartbeats and the scheduler's lag.

The services belong to the installation, not to a tenant, so who may read them is
:func:`~nbcast.tenancy.roles.require_role_or_operator`'s decision: an operator, or
a person with a role in an existing tenant; an authenticated user without one (no
role, or mapped to a tenant nobody created) gets 403 and learns nothing about the
installation (its hosts, process ids, versions)."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller
from nbcast.daemon import ServiceState
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, ref, route
from nbcast.tenancy.roles import require_role_or_operator
from nbcast.views.health import Health, ServiceRecord, health

__all__ = ["HealthHandler"]

SERVICE = record_schema(
    "Service",
    ServiceRecord,
    description="One service process from its heartbeat row.",
    overrides={
        "state": {"type": "string", "enum": [s.value for s in ServiceState]},
        "lag_s": {"type": "number", "minimum": 0},
    },
)
record_schema(
    "Health",
    Health,
    refs={ServiceRecord: SERVICE},
    overrides={"scheduler_lag_s": {"type": "number", "minimum": 0}},
)


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
    """The service health (:mod:`nbcast.views.health`)."""

    @authorized
    async def get(self) -> None:
        """The health document."""
        report = await self.call(self._health, self.caller)
        self.write_json(report)

    def _health(self, caller: Caller) -> dict[str, object]:
        now = self.state.clock.now()
        with self.state.db.session() as session:
            require_role_or_operator(session, caller, "reading the services' health", now)
            return health(session, now).to_json()
