"""Run now: ``POST /definitions/{name}/runs`` queues a manual run of the latest
version (:func:`nbcast.scheduler.control.run_now`) or, with ``test: true``, test runs
and dry runs of a slot (:mod:`nbcast.scheduler.trial`): the command layer decides,
checks and audits; this face checks the body's shape and sizes.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller
from nbcast.clock import parse_instant
from nbcast.errors import ConfigError, ParameterValueError
from nbcast.scheduler.control import run_now
from nbcast.scheduler.trial import MAX_TEST_ADDRESSES, TestRun, queue_test_run
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_definition_actions import closed
from nbcast.server_extension.handlers.api_definitions import DEFINITION_NAME, require_tenant
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import STRING, schema
from nbcast.server_extension.routes import API, Operation, route

__all__ = ["RunNowHandler"]

RUN_REQUEST = schema(
    "DefinitionRunRequest",
    {
        "type": "object",
        "properties": {
            "parameters": {
                "type": "object",
                "description": "Values overriding the version's (each may be a slot binding)",
            },
            "at": {
                "type": "string",
                "format": "date-time",
                "description": "The instant whose period the run reports (default: now); "
                "with test: dry-run the slot firing then, or the first after it",
            },
            "test": {
                "type": "boolean",
                "description": "A test run: rendered, sent to no subscriber, marked TEST",
            },
            "to": {
                "type": "array",
                "maxItems": MAX_TEST_ADDRESSES,
                "items": {"type": "string", "maxLength": 320},
                "description": "With test: the addresses to send it to (default: the "
                "caller's own, when known; [] for no one)",
            },
            "slot": {
                "type": "string",
                "maxLength": 32,
                "description": "With test: dry-run this slot (its key, 2026-12-07T07:00)",
            },
            "as": {
                "type": "string",
                "maxLength": 320,
                "description": "With test: only the audience of this recipient",
            },
            "version": {
                "type": "integer",
                "minimum": 1,
                "description": "With test: try this version instead of the latest",
            },
        },
        "additionalProperties": False,
    },
)
RUN_CREATED = schema(
    "DefinitionRunCreated",
    {
        "type": "object",
        "required": ["definition", "run_ids"],
        "properties": {
            "definition": STRING,
            "run_ids": {"type": "array", "items": {"type": "integer", "minimum": 1}},
            "test": {"type": "boolean", "description": "True: test runs"},
            "to": {
                "type": "array",
                "items": STRING,
                "description": "Test runs: where they go ([]: no one)",
            },
            "slot_key": {
                "type": ["string", "null"],
                "description": "A dry run: the slot it runs",
            },
            "version": {"type": "integer", "description": "Test runs: the version tried"},
        },
    },
)


@route(
    f"{API}/definitions/{{name}}/runs",
    Operation(
        "post",
        "Run the latest version now (kind manual) with these parameter values; with test: a "
        "test run that no subscriber receives, or a dry run of one slot",
        tag="definitions",
        params=(DEFINITION_NAME,),
        body=RUN_REQUEST,
        response=RUN_CREATED,
        status=201,
    ),
)
class RunNowHandler(ApiHandler):
    """Run now."""

    @authorized
    async def post(self, name: str) -> None:
        """Queue a manual run of ``name``."""
        caller = self.caller
        body = await self.json_object()
        closed(body, {"parameters", "at", "test", "to", "slot", "as", "version"})
        parameters = body.get("parameters", {})
        if not isinstance(parameters, dict):
            raise ApiError(400, "parameters must be an object", field="parameters")
        at = None
        if body.get("at") is not None:
            raw = body["at"]
            if not isinstance(raw, str) or len(raw) > 64:
                raise ApiError(400, "at must be an ISO 8601 instant", field="at")
            try:
                at = parse_instant(raw)
            except ConfigError as exc:
                raise ApiError(400, f"at: {exc}", field="at") from None
        test = body.get("test", False)
        if not isinstance(test, bool):
            raise ApiError(400, "test must be true or false", field="test")
        if test:
            options = _test_options(body)
            tried = await self.call(self._test, caller, name, parameters, at, options)
            first = tried[0]
            self.write_json(
                {
                    "definition": name,
                    "run_ids": [t.id for t in tried],
                    "test": True,
                    "to": list(first.to),
                    "slot_key": first.slot_key,
                    "version": first.version,
                },
                status=201,
            )
            return
        for key in ("to", "slot", "as", "version"):
            if key in body:
                raise ApiError(400, f"{key} goes with test: true", field=key)
        run_id = await self.call(self._run, caller, name, parameters, at)
        self.write_json({"definition": name, "run_ids": [run_id]}, status=201)

    def _test(
        self,
        caller: Caller,
        name: str,
        parameters: dict[str, Any],
        at: datetime | None,
        options: dict[str, Any],
    ) -> list[TestRun]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
        try:
            return queue_test_run(
                self.state.db, self.state.clock, caller, name, parameters, at=at, **options
            )
        except ParameterValueError as exc:
            raise ApiError(400, str(exc), field=exc.field) from None

    def _run(
        self, caller: Caller, name: str, parameters: dict[str, Any], at: datetime | None
    ) -> int:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
        try:
            return run_now(self.state.db, self.state.clock, caller, name, parameters, at=at)
        except ParameterValueError as exc:
            raise ApiError(400, str(exc), field=exc.field) from None


def _test_options(body: dict[str, Any]) -> dict[str, Any]:
    """A test run's options from a request body, checked for type and size."""
    options: dict[str, Any] = {}
    to = body.get("to")
    if to is not None:
        if (
            not isinstance(to, list)
            or len(to) > MAX_TEST_ADDRESSES
            or not all(isinstance(a, str) and len(a) <= 320 for a in to)
        ):
            raise ApiError(
                400, f"to must be a list of at most {MAX_TEST_ADDRESSES} addresses", field="to"
            )
        options["to"] = to
    for key, option, limit in (("slot", "slot", 32), ("as", "recipient", 320)):
        value = body.get(key)
        if value is not None:
            if not isinstance(value, str) or not 0 < len(value) <= limit:
                raise ApiError(400, f"{key} must be a string of 1 to {limit} characters", field=key)
            options[option] = value
    version = body.get("version")
    if version is not None:
        if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version < 2**31:
            raise ApiError(400, "version must be a version number", field="version")
        options["version"] = version
    return options
