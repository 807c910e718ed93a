"""``/nbcast/api/v1/definitions``: report definitions listed, shown, diffed and published.

Thin faces over the definitions plane — :mod:`nbcast.definitions.queries`
(``list_definitions``, ``get_definition``, ``get_version``, ``list_versions``) and
:func:`~nbcast.definitions.versions.publish` — each scoped to the caller's tenant, so
another tenant's definition is "not found" (404). The scheduler's actions on one
definition (pause, resume, run now, backfill, preview) and the diff of two versions
are in
:mod:`~nbcast.server_extension.handlers.api_definition_actions`.

Every definition shown carries its next three fire times in its own zone with what
DST does to each (:func:`nbcast.scheduler.upcoming.upcoming`).

Publishing takes either ``{"path": …}`` — a notebook read through the server's
contents manager, under its root folder (a path with ``..`` is refused; a side
``.nbcast.toml`` is not read: the block must be in the notebook's metadata) — or
``{"notebook": {…}}``, the notebook's JSON itself. A notebook published by path is
bound to that file (the same definition ``nbcast publish`` of that file updates); one
published as a body is bound to ``api:<name>``. Everything is validated before the
database is touched, so a refused publish writes nothing.

Publishing by path is allowed only where the caller may read that path through
jupyter-server's contents API (its authorizer, its contents manager's hidden files:
:func:`~nbcast.server_extension.contents_paths.readable_path`); otherwise 403, the
same answer whether the file exists or not. No answer shows an absolute path of the
server: ``source_path`` is relative to the server's root folder
(:func:`~nbcast.server_extension.contents_paths.shown_source`), and the contents
manager's own messages, which name absolute paths, are not passed on.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jupyter_server.auth.decorator import authorized
from sqlalchemy.orm import Session

from nbcast.access import Caller
from nbcast.definitions.allowed import Allowed
from nbcast.definitions.effective import EffectiveParameter
from nbcast.definitions.notebook import LoadedNotebook, loaded_document
from nbcast.definitions.parameters import Parameter
from nbcast.definitions.queries import VersionInfo, get_version, list_versions
from nbcast.definitions.review import ReviewItem, ReviewSummary
from nbcast.definitions.versions import PreparedVersion, prepare_loaded, publish
from nbcast.errors import (
    ConfigError,
    DuplicateDefinitionError,
    UnknownDefinitionError,
)
from nbcast.limits import clip, storable_text
from nbcast.scheduler.upcoming import UpcomingFire
from nbcast.server_extension.contents_paths import (
    MAX_PATH_CHARS,
    read_notebook,
    shown_record,
    shown_source,
)
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import (
    STRING,
    schema,
)
from nbcast.server_extension.record_schemas import record_schema
from nbcast.server_extension.routes import API, Operation, Param, route
from nbcast.tenancy.tenants import get_tenant
from nbcast.views.definitions import (
    NEXT_FIRES,
    DefinitionDetail,
    DefinitionRecord,
    LastRun,
    get_definition,
    get_definition_detail,
    list_definitions,
)

__all__ = [
    "DEFINITION_NAME",
    "DIFF",
    "MAX_DEFINITIONS_PAGE",
    "NEXT_FIRES",
    "PARAMETER",
    "SOURCE_PATH_HELP",
    "VERSION_PARAM",
    "DefinitionHandler",
    "DefinitionVersionsHandler",
    "DefinitionsHandler",
    "require_tenant",
]

MAX_DEFINITIONS_PAGE = 500
"""The most definitions one page lists."""
DEFAULT_DEFINITIONS_PAGE = 100
"""Fire times shown with each definition."""

DEFINITION_NAME = Param(
    "name",
    "path",
    {"type": "string", "minLength": 1, "maxLength": 200},
    description="The definition's name",
)

SOURCE_PATH_HELP = (
    "The file the definition is bound to, relative to the server's root folder "
    "('outside-root:<file name>' for one outside it), or 'api:<name>' for a notebook "
    "published as JSON; never an absolute path of the server"
)

UPCOMING = record_schema(
    "UpcomingFire",
    UpcomingFire,
    description="A coming slot in the definition's zone, with what DST does to it "
    "(`note`: e.g. '01:30 happens twice on 2026-11-01: runs both (EDT, then EST)').",
    overrides={"status": {"type": "string", "enum": ["scheduled", "skipped"]}},
)
LAST_RUN = record_schema("LastRun", LastRun)
DEFINITION = record_schema(
    "Definition",
    DefinitionRecord,
    refs={LastRun: LAST_RUN, UpcomingFire: UPCOMING},
    overrides={
        "latest_version": {"type": "integer", "minimum": 1},
        "failures": {"type": "integer", "minimum": 0},
        "next_fires": {"type": "array", "maxItems": NEXT_FIRES, "items": UPCOMING},
    },
)
DEFINITION_PAGE = schema(
    "DefinitionPage",
    {
        "type": "object",
        "required": ["items", "next"],
        "properties": {
            "items": {"type": "array", "items": DEFINITION},
            "next": {
                "type": ["string", "null"],
                "description": "The next page's `after` (null: this is the last page)",
            },
        },
    },
)
PARAMETER = record_schema(
    "Parameter",
    Parameter,
    description="A parameter as the version's `parameters` cell declares it, with the "
    "values it accepts (the block's `allowed`, or a `Literal[...]` annotation).",
    refs={
        Allowed: record_schema(
            "AllowedValues",
            Allowed,
            description="Choices, bounds or a pattern a parameter's values must meet.",
        )
    },
    overrides={"default": {"description": "The default as written in the cell (a JSON value)"}},
)
EFFECTIVE = record_schema(
    "EffectiveParameter",
    EffectiveParameter,
    description="A parameter as the version's runs get it: the metadata block's value or "
    "binding over the cell's default.",
    overrides={
        "value": {"description": "What a run gets (a binding as written: resolved per slot)"},
        "source": {"type": "string", "enum": ["metadata", "binding", "default"]},
        "default": {"description": "The cell's default, for comparison"},
    },
)
_VERSION_OVERRIDES: dict[str, Any] = {
    "version": {"type": "integer", "minimum": 1},
    "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
}
VERSION = record_schema(
    "DefinitionVersion",
    VersionInfo,
    description="One published version of a definition.",
    refs={Parameter: PARAMETER, EffectiveParameter: EFFECTIVE},
    overrides=_VERSION_OVERRIDES,
)
VERSION_LIST = schema(
    "DefinitionVersionList",
    {
        "type": "object",
        "required": ["items"],
        "properties": {"items": {"type": "array", "items": VERSION}},
    },
)
DETAIL = record_schema(
    "DefinitionDetail",
    DefinitionDetail,
    refs={
        Parameter: PARAMETER,
        EffectiveParameter: EFFECTIVE,
        LastRun: LAST_RUN,
        UpcomingFire: UPCOMING,
    },
    overrides={
        **_VERSION_OVERRIDES,
        "latest_version": {"type": "integer", "minimum": 1},
        "failures": {"type": "integer", "minimum": 0},
        "next_fires": {"type": "array", "maxItems": NEXT_FIRES, "items": UPCOMING},
    },
)
REVIEW_SUMMARY = record_schema(
    "ReviewSummary",
    ReviewSummary,
    refs={ReviewItem: record_schema("ReviewItem", ReviewItem)},
)
DIFF = schema(
    "DefinitionDiff",
    {
        "type": "object",
        "description": "nbdime's structured diff from version a to version b (bounded).",
        "required": ["definition", "a", "b", "diff"],
        "properties": {
            "definition": STRING,
            "a": {"type": "integer"},
            "b": {"type": "integer"},
            "summary": REVIEW_SUMMARY,
            "diff": {"type": "array", "items": {"type": "object", "required": ["op", "key"]}},
            "base": {
                "type": "object",
                "description": "With format=nbdime: version a's stored notebook, the base "
                "the diff applies to (nbdime's NotebookDiffModel takes both)",
            },
        },
    },
)
PUBLISH = schema(
    "DefinitionPublish",
    {
        "type": "object",
        "description": "A notebook to publish: `path` (under the server's root folder, "
        "read through its contents manager) or `notebook` (its JSON), not both.",
        "properties": {
            "path": {"type": "string", "minLength": 1, "maxLength": MAX_PATH_CHARS},
            "notebook": {"type": "object"},
            "name": {
                "type": "string",
                "description": "Definition name (default: metadata "
                "'name', else the file's stem, else 'report')",
            },
            "message": {"type": "string", "description": "What changed in this version"},
        },
        "additionalProperties": False,
    },
)
PUBLISHED = schema(
    "DefinitionPublished",
    {
        "type": "object",
        "required": ["created", "warnings", "definition", "version"],
        "properties": {
            "created": {
                "type": "boolean",
                "description": "False: the notebook equals the latest version; nothing new",
            },
            "warnings": {"type": "array", "items": STRING},
            "definition": DEFINITION,
            "version": VERSION,
        },
    },
)

_NAME_ONLY = (DEFINITION_NAME,)
VERSION_PARAM = {"type": "integer", "minimum": 1, "maximum": 2**31 - 1}


# -- the JSON forms ------------------------------------------------------------------------


def tenant_exists(session: Session, caller: Caller) -> bool:
    """Whether the caller's tenant has a row yet (until it does, it owns nothing)."""
    try:
        get_tenant(session, caller.tenant)
    except ConfigError:
        return False
    return True


def require_tenant(session: Session, caller: Caller, name: str) -> None:
    """Definition ``name`` is not found (404) when the caller's tenant does not exist
    yet, rather than the command layer's "no tenant" (400), or when no definition
    could have that name (too long, or text nbcast cannot store: a NUL would reach
    PostgreSQL as an error of its own)."""
    if len(name) > 200 or not storable_text(name) or not tenant_exists(session, caller):
        raise UnknownDefinitionError(
            f"no definition named {clip(name)} in tenant {caller.tenant!r}"
        )


# -- handlers ------------------------------------------------------------------------------


@route(
    f"{API}/definitions",
    Operation(
        "get",
        "The caller's tenant's definitions by name, a page at a time, each with its "
        "schedule, next three fire times (with DST notes), pause and last run",
        tag="definitions",
        params=(
            Param(
                "limit",
                schema={
                    "type": "integer",
                    "minimum": 1,
                    "maximum": MAX_DEFINITIONS_PAGE,
                    "default": DEFAULT_DEFINITIONS_PAGE,
                },
                description=f"Definitions per page (1 to {MAX_DEFINITIONS_PAGE})",
            ),
            Param(
                "after",
                schema={"type": "string", "maxLength": 512},
                description="The `next` of the previous page",
            ),
        ),
        response=DEFINITION_PAGE,
        errors=(400, 403),
    ),
    Operation(
        "post",
        "Publish a notebook (from the contents manager by path, or its JSON) as a new "
        "version; `created` is false when it equals the latest version",
        tag="definitions",
        body=PUBLISH,
        response=PUBLISHED,
        status=201,
        errors=(400, 403, 409, 413),
    ),
)
class DefinitionsHandler(ApiHandler):
    """The list, and publish."""

    @authorized
    async def get(self) -> None:
        """One page of definitions."""
        caller = self.caller
        limit = self.query_int("limit", low=1, high=MAX_DEFINITIONS_PAGE)
        after = self.query("after", max_length=512)
        body = await self.call(self._list, caller, limit or DEFAULT_DEFINITIONS_PAGE, after)
        self.write_json(body)

    def _list(self, caller: Caller, limit: int, after: str | None) -> dict[str, Any]:
        now = self.state.clock.now()
        with self.state.db.session() as session:
            if not tenant_exists(session, caller):
                return {"items": [], "next": None}
            try:
                page = list_definitions(session, caller, limit=limit, after=after, now=now)
            except ConfigError as exc:
                raise ApiError(400, str(exc), field="after") from None
        root = self.contents_root
        return {
            "items": [shown_record(r, root).to_json() for r in page.items],
            "next": page.next_after,
        }

    @property
    def contents_root(self) -> str | None:
        """The contents manager's local root folder (None: it has none)."""
        root = getattr(self.contents_manager, "root_dir", None)
        return root if isinstance(root, str) else None

    @authorized
    async def post(self) -> None:
        """Publish (module docstring)."""
        caller = self.caller
        body = await self.json_object()
        unknown = sorted(set(body) - {"path", "notebook", "name", "message"})
        if unknown:
            raise ApiError(400, f"unknown field {clip(unknown[0])}", field=unknown[0][:100])
        name = _optional_text(body, "name", 200)
        message = _optional_text(body, "message", 100_000) or ""
        if ("path" in body) == ("notebook" in body):
            raise ApiError(400, "give either path or notebook", field="path")
        if "path" in body:
            loaded, source = await read_notebook(self, body["path"])
        else:
            origin = f"{name or 'report'}.ipynb"
            loaded, source = await self.call(loaded_document, body["notebook"], origin), None
        result = await self.call(self._publish, caller, loaded, source, name, message)
        self.write_json(result, status=201)

    def _publish(
        self,
        caller: Caller,
        loaded: LoadedNotebook,
        source: str | None,
        name: str | None,
        message: str,
    ) -> dict[str, Any]:
        prepared: PreparedVersion = prepare_loaded(loaded, name, source_path=source or "api:")
        if source is None:
            prepared = dataclasses.replace(prepared, source_path=f"api:{prepared.name}")
        now = self.state.clock.now()
        try:
            result = publish(
                self.state.db,
                prepared,
                caller=caller,
                name=name,
                message=message,
                now=now,
                environ=self.state.environ,
            )
        except DuplicateDefinitionError as exc:
            raise ApiError(400, self._duplicate(exc), field="name") from None
        with self.state.db.session() as session:
            record = get_definition(session, caller, result.definition, now=now)
            info = get_version(session, caller, result.definition, result.version)
        from nbcast.delivery.channels import unconfigured_subscriptions

        unconfigured = unconfigured_subscriptions(
            [(s.channel, s.to) for s in prepared.spec.subscriptions], self.state.environ
        )
        return {
            "created": result.created,
            "warnings": [*result.warnings, *unconfigured],
            "definition": shown_record(record, self.contents_root).to_json(),
            "version": info.to_json(),
        }

    def _duplicate(self, exc: DuplicateDefinitionError) -> str:
        """The refusal of a name bound to another file, with the files as shown."""
        root = self.contents_root
        if exc.bound_to is None or exc.given is None:
            return "a definition of that name is bound to another file; choose another name"
        return (
            f"definition {clip(exc.name)} is bound to {shown_source(exc.bound_to, root)}; "
            f"choose another name for {shown_source(exc.given, root)}"
        )


def _optional_text(body: dict[str, Any], key: str, limit: int) -> str | None:
    value = body.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or len(value) > limit:
        raise ApiError(400, f"{key} must be text of at most {limit:,} characters", field=key)
    return value


@route(
    f"{API}/definitions/{{name}}",
    Operation(
        "get",
        "One definition: a version (default the latest) as `nbcast definitions show "
        "--json` shows it, with the next fire times",
        tag="definitions",
        params=(
            DEFINITION_NAME,
            Param("version", schema=VERSION_PARAM, description="Version (default: latest)"),
        ),
        response=DETAIL,
    ),
)
class DefinitionHandler(ApiHandler):
    """One definition."""

    @authorized
    async def get(self, name: str) -> None:
        """The definition's detail."""
        caller = self.caller
        version = self.query_int("version", low=1, high=2**31 - 1)
        self.write_json(await self.call(self._show, caller, name, version))

    def _show(self, caller: Caller, name: str, version: int | None) -> dict[str, Any]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
            detail = get_definition_detail(
                session, caller, name, version, now=self.state.clock.now()
            )
        return detail.to_json()


@route(
    f"{API}/definitions/{{name}}/versions",
    Operation(
        "get",
        "Every version of the definition, oldest first",
        tag="definitions",
        params=_NAME_ONLY,
        response=VERSION_LIST,
    ),
)
class DefinitionVersionsHandler(ApiHandler):
    """The versions of one definition."""

    @authorized
    async def get(self, name: str) -> None:
        """The versions."""
        caller = self.caller
        self.write_json(await self.call(self._versions, caller, name))

    def _versions(self, caller: Caller, name: str) -> dict[str, Any]:
        with self.state.db.session() as session:
            require_tenant(session, caller, name)
            return {"items": [v.to_json() for v in list_versions(session, caller, name)]}
