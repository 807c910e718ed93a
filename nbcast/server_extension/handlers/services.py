"""``/nbcast/api/v1/services/embedded``: the embedded services' supervisor, as it sees
its children (:mod:`nbcast.server_extension.services`).

Who may read it: as for ``/health``, an operator or a person with a role (any) in an
existing tenant (:func:`~nbcast.tenancy.roles.require_role_or_operator`); an
authenticated user without one gets 403. The snapshot holds the same kind of facts as
the heartbeat rows ``/health`` shows (service kinds, process ids, states) and nothing
of any tenant's reports, and the overview page shows the services' state; keeping it
admin-only would hide from a report's author why its run waits (the worker is backing
off) while telling an attacker nothing new.

The heartbeat rows say what each service *did* (its last beat, its iterations); this
says what the server *does* about them: whether the child runs or backs off, how
often it was restarted, how it last exited and when it starts next. A server that
runs no embedded services answers ``{"enabled": false, "children": []}``.
"""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized

from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import NULLABLE_INSTANT, schema
from nbcast.server_extension.routes import API, Operation, route
from nbcast.server_extension.services import SERVICES_KEY, ServiceSupervisor, disabled_snapshot

__all__ = ["EmbeddedServicesHandler"]

_COUNT = {"type": "integer", "minimum": 0}

schema(
    "EmbeddedService",
    {
        "type": "object",
        "required": [
            "kind",
            "command",
            "pid",
            "state",
            "restarts",
            "consecutive_failures",
            "started_at",
            "last_exit_code",
            "last_exit_at",
            "next_start_at",
        ],
        "properties": {
            "kind": {
                "type": "string",
                "enum": ["scheduler", "worker", "delivery-worker", "oversight"],
            },
            "command": {"type": "string", "description": "The nbcast command the child runs"},
            "pid": {
                "type": ["integer", "null"],
                "description": "The process id of the child (its last one while it backs "
                "off; null before its first start)",
            },
            "state": {
                "type": "string",
                "enum": ["running", "backing-off", "stopped"],
                "description": "backing-off: it exited and starts again at next_start_at",
            },
            "restarts": {**_COUNT, "description": "Starts after the first"},
            "consecutive_failures": {
                **_COUNT,
                "description": "Exits in a row without a stable period; sets the backoff",
            },
            "started_at": NULLABLE_INSTANT,
            "last_exit_code": {
                "type": ["integer", "null"],
                "description": "Its last exit status; negative: killed by that signal; "
                "null: it has not exited (or could not be started)",
            },
            "last_exit_at": NULLABLE_INSTANT,
            "next_start_at": NULLABLE_INSTANT,
        },
    },
)
EMBEDDED_SERVICES = schema(
    "EmbeddedServices",
    {
        "type": "object",
        "required": ["enabled", "stopping", "children"],
        "properties": {
            "enabled": {
                "type": "boolean",
                "description": "Whether this server runs the services as its children",
            },
            "stopping": {"type": "boolean", "description": "The server is stopping them"},
            "children": {
                "type": "array",
                "maxItems": 16,
                "items": {"$ref": "#/components/schemas/EmbeddedService"},
            },
        },
    },
)


@route(
    f"{API}/services/embedded",
    Operation(
        "get",
        "The embedded services this server supervises: each child's pid, state "
        "(running, backing-off, stopped), restarts, last exit and next start",
        tag="service",
        response=EMBEDDED_SERVICES,
        errors=(403,),
    ),
)
class EmbeddedServicesHandler(ApiHandler):
    """The supervisor's snapshot (module docstring)."""

    @authorized
    async def get(self) -> None:
        """The snapshot, or ``enabled: false``."""
        await self.installation_caller("reading the embedded services")
        supervisor: ServiceSupervisor | None = self.settings.get(SERVICES_KEY)
        self.write_json(disabled_snapshot() if supervisor is None else supervisor.snapshot())
