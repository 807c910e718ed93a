"""``/nbcast/api/v1/notebooks/check``: what publishing a notebook would do, writing nothing.

The JupyterLab dialog ("Schedule as report…") asks this before anything is saved: the
notebook's JSON as the editor holds it, with the ``nbcast`` block the form would write.
The answer has everything the form shows beside its fields:

- ``parameters``: the schema of the parameters cell (name, type, default, help text
  from the comments), from which the form draws its parameter inputs;
- ``problem``: the first thing publishing would refuse, with the dotted field it names
  (``schedule.cron``, ``subscriptions[0].to``), or null — a 200 either way, since a
  half-filled form is not an error of the request;
- ``next_fires``: the schedule's next fire times in its zone with their DST notes
  (:func:`nbcast.scheduler.upcoming.upcoming`), from the block as given;
- ``published``: the definition of that name in the caller's tenant, if any — its
  latest version, the file it is bound to (and whether that is the file ``path``
  names), whether it is paused, and whether this notebook equals its latest version
  (so the dialog can say "version 3, unchanged");
- ``channels`` and ``formats``: the names the registries know (built-ins and plug-ins),
  the choices of the subscription and output inputs;
- ``zones``: the time zones a schedule may name (canonical IANA location zones,
  ``UTC``, ``Etc/``), and ``timezone``: the request's ``timezone`` (the browser's) as
  one of them — itself, or the canonical zone with the same offsets for an alias such
  as ``Asia/Calcutta`` (what browsers report for India), or null — the dialog's default.

It runs the same validation as publishing (:func:`nbcast.definitions.versions.prepare_loaded`
and the deployment's rules, :func:`~nbcast.definitions.versions.check_here`), so a
notebook that checks clean publishes clean, save for a race with another publish. The
notebook may come without its outputs (the dialog strips them: they are not part of a
version, and a large plot would only cost bandwidth).
"""

from __future__ import annotations

import functools
from typing import Any
from zoneinfo import available_timezones

from jupyter_server.auth.decorator import authorized

from nbcast.access import Caller
from nbcast.definitions.notebook import loaded_document, parameters_cell
from nbcast.definitions.parameters import parse_parameters_cell, schema_to_json
from nbcast.definitions.queries import get_definition, get_version
from nbcast.definitions.spec import check_name
from nbcast.definitions.versions import check_here, prepare_loaded
from nbcast.definitions.zones import canonical_twin, canonical_zones, zone_problem
from nbcast.errors import MetadataError, NbcastError, UnknownDefinitionError
from nbcast.limits import clip
from nbcast.scheduler.upcoming import upcoming
from nbcast.server_extension.contents_paths import bound_source, contents_path
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_definitions import UPCOMING, tenant_exists
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import schema
from nbcast.server_extension.routes import API, Operation, route

__all__ = ["CHECK_FIRES", "NotebookCheckHandler"]

CHECK_FIRES = 5
"""Fire times a check shows."""

_STRING = {"type": "string"}
_NULLABLE_STRING = {"type": ["string", "null"]}

CHECK_BODY = schema(
    "NotebookCheckRequest",
    {
        "type": "object",
        "required": ["notebook"],
        "properties": {
            "notebook": {"type": "object", "description": "The notebook's JSON"},
            "path": {
                "type": "string",
                "maxLength": 1024,
                "description": "Its contents path: names the definition by default",
            },
            "name": {"type": "string", "description": "The definition name to publish as"},
            "timezone": {
                "type": "string",
                "maxLength": 64,
                "description": "A zone (the browser's) to answer as a schedule may name it",
            },
        },
        "additionalProperties": False,
    },
)
CHECK = schema(
    "NotebookCheck",
    {
        "type": "object",
        "required": [
            "name",
            "parameters",
            "problem",
            "next_fires",
            "published",
            "channels",
            "formats",
            "zones",
            "timezone",
        ],
        "properties": {
            "name": _NULLABLE_STRING,
            "parameters": {
                "type": "array",
                "items": {
                    "type": "object",
                    "required": ["name", "type", "default", "help"],
                    "properties": {
                        "name": _STRING,
                        "type": _STRING,
                        "default": {},
                        "help": _STRING,
                    },
                },
            },
            "problem": {
                "type": ["object", "null"],
                "required": ["field", "message"],
                "properties": {"field": _NULLABLE_STRING, "message": _STRING},
            },
            "next_fires": {"type": "array", "maxItems": CHECK_FIRES, "items": UPCOMING},
            "published": {
                "type": ["object", "null"],
                "required": [
                    "name",
                    "latest_version",
                    "source_path",
                    "this_file",
                    "paused",
                    "same",
                ],
                "properties": {
                    "name": _STRING,
                    "latest_version": {"type": "integer", "minimum": 1},
                    "source_path": _STRING,
                    "this_file": {
                        "type": "boolean",
                        "description": "The definition is bound to the file `path` names",
                    },
                    "paused": {"type": "boolean"},
                    "same": {
                        "type": "boolean",
                        "description": "The notebook equals the latest version",
                    },
                },
            },
            "channels": {"type": "array", "items": _STRING},
            "formats": {"type": "array", "items": _STRING},
            "zones": {"type": "array", "items": _STRING},
            "timezone": _NULLABLE_STRING,
        },
    },
)


@route(
    f"{API}/notebooks/check",
    Operation(
        "post",
        "Validate a notebook and its nbcast block as publishing would, writing nothing: "
        "its parameter schema, the first problem (with its field), the next fire times "
        "with DST notes, and the published definition of that name",
        tag="definitions",
        body=CHECK_BODY,
        response=CHECK,
        errors=(400, 403, 413),
    ),
)
class NotebookCheckHandler(ApiHandler):
    """The check (module docstring)."""

    @authorized
    async def post(self) -> None:
        """Check the notebook of the body."""
        caller = self.caller
        body = await self.json_object()
        unknown = sorted(set(body) - {"notebook", "path", "name", "timezone"})
        if unknown:
            raise ApiError(400, f"unknown field {clip(unknown[0])}", field=unknown[0][:100])
        notebook = body.get("notebook")
        if not isinstance(notebook, dict):
            raise ApiError(400, "notebook must be the notebook's JSON object", field="notebook")
        path = body.get("path")
        if path is not None and (not isinstance(path, str) or len(path) > 1024):
            raise ApiError(400, "path must be text of at most 1,024 characters", field="path")
        name = body.get("name")
        if name is not None and (not isinstance(name, str) or len(name) > 200):
            raise ApiError(400, "name must be text of at most 200 characters", field="name")
        zone = body.get("timezone")
        if zone is not None and (not isinstance(zone, str) or len(zone) > 64):
            raise ApiError(400, "timezone must be text of at most 64 characters", field="timezone")
        origin = (path or f"{name or 'report'}.ipynb").rsplit("/", 1)[-1]
        bound = self._file_of(path)
        result = await self.call(self._check, caller, notebook, origin, name or None, bound)
        result["zones"] = sorted(canonical_zones())
        result["timezone"] = None if zone is None else await self.call(schedule_zone, zone)
        self.write_json(result)

    def _file_of(self, path: str | None) -> str | None:
        """The file a publish of contents path ``path`` would bind the definition to
        (as ``POST /definitions {path}`` names it), or None."""
        if not path:
            return None
        try:
            return bound_source(self.contents_manager, contents_path(path))
        except (ApiError, OSError, ValueError):
            return None

    def _check(
        self,
        caller: Caller,
        notebook: dict[str, Any],
        origin: str,
        name: str | None,
        bound: str | None,
    ) -> dict[str, Any]:
        from nbcast.delivery.channels import channels
        from nbcast.delivery.renderers import renderers

        result: dict[str, Any] = {
            "name": None,
            "parameters": [],
            "problem": None,
            "next_fires": [],
            "published": None,
            "channels": channels.names(),
            "formats": renderers.names(),
        }
        try:
            loaded = loaded_document(notebook, origin)
        except NbcastError as exc:
            result["problem"] = {"field": "notebook", "message": str(exc)}
            return result
        try:
            cell = parameters_cell(loaded.notebook)
            schema = parse_parameters_cell(cell[1]) if cell else ()
        except NbcastError as exc:
            result["problem"] = {"field": "parameters", "message": str(exc)}
            result["name"] = _name_or_none(name, loaded.block)
            return self._with_published(result, caller, bound)
        result["parameters"] = schema_to_json(schema)
        try:
            prepared = prepare_loaded(loaded, name, source_path="api:", schema=schema)
            # What depends on this deployment (a webhook URL its policy forbids), as
            # publishing checks it: a notebook that checks clean publishes clean.
            check_here(prepared, self.state.environ)
        except MetadataError as exc:
            result["problem"] = {"field": exc.field, "message": exc.message}
            result["name"] = _name_or_none(name, loaded.block)
        except NbcastError as exc:
            result["problem"] = {"field": "notebook", "message": str(exc)}
            result["name"] = _name_or_none(name, loaded.block)
        else:
            result["name"] = prepared.name
            schedule = prepared.spec.schedule
            if schedule is not None:
                now = self.state.clock.now()
                result["next_fires"] = [f.to_json() for f in upcoming(schedule, now, CHECK_FIRES)]
            result["published"] = self._published(caller, prepared.name, prepared.sha256, bound)
        return self._with_published(result, caller, bound)

    def _with_published(
        self, result: dict[str, Any], caller: Caller, bound: str | None
    ) -> dict[str, Any]:
        if result["published"] is None and result["name"] is not None:
            result["published"] = self._published(caller, result["name"], None, bound)
        return result

    def _published(
        self, caller: Caller, name: str, sha256: str | None, bound: str | None
    ) -> dict[str, Any] | None:
        with self.state.db.session() as session:
            if not tenant_exists(session, caller):
                return None
            try:
                record = get_definition(session, caller, name)
                latest = get_version(session, caller, name, None)
            except UnknownDefinitionError:
                return None
        return {
            "name": record.name,
            "latest_version": record.latest_version,
            "source_path": record.source_path,
            "this_file": bound is not None and record.source_path == bound,
            "paused": record.paused,
            "same": sha256 is not None and latest.sha256 == sha256,
        }


@functools.lru_cache(maxsize=1024)
def schedule_zone(name: str) -> str | None:
    """``name`` as a schedule may name it: itself when accepted, else the canonical zone
    that keeps its offsets (an alias: ``Asia/Calcutta`` is ``Asia/Kolkata``), else None."""
    if zone_problem(name) is None:
        return name
    if name != "localtime" and name in available_timezones():
        return canonical_twin(name)
    return None


def _name_or_none(name: str | None, block: Any) -> str | None:
    """The name a notebook whose block is refused would publish as, if it is valid."""
    candidate = name or (block.get("name") if isinstance(block, dict) else None)
    if not isinstance(candidate, str):
        return None
    try:
        return check_name(candidate)
    except MetadataError:
        return None
