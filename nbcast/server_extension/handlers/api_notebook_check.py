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
- ``bound``: for the next three slots that fire, what each bound parameter resolves
  to (:func:`nbcast.scheduler.preview.preview_definition`, the scheduler's own
  resolution), so the dialog shows "report_date: 2026-12-04, 2026-12-07, …" before
  anything is published;
- ``published``: the definition of that name in the caller's tenant, if any — its
  latest version, the file it is bound to (and whether that is the file ``path``
  names), whether it is paused, and whether this notebook equals its latest version
  (so the dialog can say "version 3, unchanged");
- ``channels`` and ``formats``: the names the registries know (built-ins and plug-ins),
  the choices of the subscription and output inputs; ``unconfigured``: the channels this
  server's environment does not configure, with what would (the dialog marks them);
- ``zones``: the time zones a schedule may name (canonical IANA location zones,
  ``UTC``, ``Etc/``), and ``timezone``: the request's ``timezone`` (the browser's) as
  one of them — itself, or the canonical zone with the same offsets for an alias such
  as ``Asia/Calcutta`` (what browsers report for India), or null — the dialog's default.

**Bounded** (:mod:`nbcast.server_extension.check_limits`): the body is streamed and
refused past its size cap before it is kept (413); the caller needs the ``author``
role in a tenant that exists before any of it is parsed (403); heavy checks are
limited per user and per server (429 with ``Retry-After``); what the JSON would build
is counted in the raw bytes before ``json.loads`` builds it (413); and heavy checks
run one at a time, each in a child process (:mod:`nbcast.server_extension.check_work`,
which holds the work itself: this module holds the route, the gates and the look-up
of the published definition). ``published.source_path`` is shown relative to the server's
root, and the file ``path`` names is looked at only for a caller who may read it
through the contents API (:mod:`nbcast.server_extension.contents_paths`).

It runs the same validation as publishing (:func:`nbcast.definitions.versions.prepare_loaded`
and the deployment's rules, :func:`~nbcast.definitions.versions.check_here`), so a
notebook that checks clean publishes clean, save for a race with another publish. The
notebook may come without its outputs (the dialog strips them: they are not part of a
version, and a large plot would only cost bandwidth).
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable
from typing import Any

from jupyter_server.auth.decorator import authorized
from tornado.web import stream_request_body

from nbcast.access import Caller
from nbcast.definitions.queries import get_version
from nbcast.definitions.zones import canonical_zones
from nbcast.errors import NbcastError, UnknownDefinitionError
from nbcast.server_extension.check_limits import (
    DRAIN_BYTES_PER_SECOND,
    DRAIN_STEP_BYTES,
    HEAVY_CHECK_BYTES,
    Admission,
    CheckLimits,
    body_cap,
    raw_problem,
)
from nbcast.server_extension.check_work import (
    BOUND_SLOTS,
    CHECK_FIRES,
    check_body,
    check_in_child,
)
from nbcast.server_extension.contents_paths import (
    bound_source,
    contents_path,
    readable_path,
    shown_source,
)
from nbcast.server_extension.errors import ApiError
from nbcast.server_extension.handlers.api_definitions import (
    PARAMETER,
    SOURCE_PATH_HELP,
    UPCOMING,
    tenant_exists,
)
from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import NULLABLE_STRING, STRING, schema
from nbcast.server_extension.routes import API, Operation, route
from nbcast.tenancy.roles import Role, require
from nbcast.views.definitions import get_definition

__all__ = ["CHECK_FIRES", "LIMITS_KEY", "NotebookCheckHandler", "TooManyChecks"]

LIMITS_KEY = "nbcast_check_limits"
"""The tornado settings key of the server's :class:`CheckLimits`."""


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
            "name": NULLABLE_STRING,
            "parameters": {"type": "array", "items": PARAMETER},
            "bound": {
                "type": "array",
                "maxItems": BOUND_SLOTS,
                "description": "The next slots that fire, each with the values its bound "
                "parameters resolve to (none: no parameter is bound)",
                "items": {
                    "type": "object",
                    "required": ["slot_key", "local", "parameters"],
                    "properties": {
                        "slot_key": STRING,
                        "local": STRING,
                        "parameters": {"type": "object"},
                    },
                },
            },
            "problem": {
                "type": ["object", "null"],
                "required": ["field", "message"],
                "properties": {"field": NULLABLE_STRING, "message": STRING},
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
                    "name": STRING,
                    "latest_version": {"type": "integer", "minimum": 1},
                    "source_path": {"type": "string", "description": SOURCE_PATH_HELP},
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
            "channels": {"type": "array", "items": STRING},
            "unconfigured": {
                "type": "object",
                "additionalProperties": STRING,
                "description": "The channels not configured where this server runs, each "
                "with what configures it (deliveries on them fail no_channel)",
            },
            "formats": {"type": "array", "items": STRING},
            "zones": {"type": "array", "items": STRING},
            "timezone": NULLABLE_STRING,
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
        errors=(400, 403, 413, 429),
    ),
)
@stream_request_body
class NotebookCheckHandler(ApiHandler):
    """The check (module docstring). The body is streamed in (:meth:`data_received`)
    so that its size and the heavy-check limits are settled before it is kept."""

    _body: bytearray
    _cap: int
    _draining: bool
    _dropped: int
    _refusal: ApiError | None
    _admission: Admission | None

    @property
    def limits(self) -> CheckLimits:
        """The server's one :class:`CheckLimits` (made on first use)."""
        limits: CheckLimits | None = self.settings.get(LIMITS_KEY)
        if limits is None:
            limits = CheckLimits(per_minute=self.state.options.heavy_checks_per_minute)
            self.settings[LIMITS_KEY] = limits
        return limits

    async def prepare(self) -> None:  # type: ignore[override]
        """Authenticate (jupyter-server), then settle the size cap and, for a heavy
        check, the per-user and per-server limits — before a byte of the body is
        kept. A refusal is answered once the body has been read and dropped, after
        ``@authorized`` and the role check (:meth:`post`)."""
        self._body, self._refusal, self._admission = bytearray(), None, None
        self._draining, self._dropped = False, 0
        self._cap = body_cap(self.state.environ)
        await super().prepare()
        if self._finished:
            return
        declared = _content_length(self.request.headers.get("Content-Length"))
        if declared is not None and declared > self._cap:
            self._refuse_unread(self._refuse_size())
            return
        heavy = declared is None or declared > HEAVY_CHECK_BYTES
        if not heavy or not self.current_user:
            return
        try:
            user = self.caller.user
        except NbcastError:
            return  # no tenant: post refuses it
        admitted = self.limits.admit(user)
        if isinstance(admitted, Admission):
            self._admission = admitted
        else:
            self._refuse_unread(TooManyChecks(admitted.reason, admitted.retry_after))

    def _refuse_unread(self, refusal: ApiError) -> None:
        """A refusal settled before the body is read: the body is read and dropped and
        the refusal answered after the role check (:meth:`post`) — unless the server
        already drains :data:`~nbcast.server_extension.check_limits.MAX_DRAINING`
        bodies, when it is answered now and the connection closed (a flood)."""
        self._refusal = refusal
        if not self.limits.start_drain():
            raise refusal
        self._draining = True

    def data_received(self, chunk: bytes) -> Awaitable[None] | None:
        """Keep the body while it stays under the cap and nothing refused it; a
        refused body is read and dropped, at most
        :data:`~nbcast.server_extension.check_limits.DRAIN_BYTES_PER_SECOND`."""
        if self._refusal is not None:
            self._dropped += len(chunk)
            if self._dropped < DRAIN_STEP_BYTES:
                return None
            self._dropped = 0
            return asyncio.sleep(DRAIN_STEP_BYTES / DRAIN_BYTES_PER_SECOND)
        self._body += chunk
        if len(self._body) > self._cap:
            self._refuse_size()
        return None

    def _refuse_size(self) -> ApiError:
        """The body is over the cap: drop it, give the place back, say so (413)."""
        self._body = bytearray()
        self.limits.release(self._admission)
        self._refusal = ApiError(
            413,
            f"the check body is larger than {self._cap:,} bytes (twice "
            "NBCAST_MAX_NOTEBOOK_BYTES): send the notebook without its outputs",
            code="too_large",
            field="notebook",
        )
        return self._refusal

    def on_finish(self) -> None:
        """Give the heavy check's place (and a drained body's) back."""
        self._give_back()
        super().on_finish()

    def on_connection_close(self) -> None:
        """The client went away (perhaps mid-body): give its places back."""
        self._give_back()
        super().on_connection_close()

    def _give_back(self) -> None:
        self.limits.release(getattr(self, "_admission", None))
        if getattr(self, "_draining", False):
            self._draining = False
            self.limits.end_drain()
        self._body = bytearray()

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """The JSON error, with ``Retry-After`` on a 429."""
        exc = kwargs.get("exc_info", (None, None, None))[1]
        if isinstance(exc, TooManyChecks):
            self.set_header("Retry-After", str(exc.retry_after))
        super().write_error(status_code, **kwargs)

    @authorized
    async def post(self) -> None:
        """Check the notebook of the body (the gates of
        :mod:`~nbcast.server_extension.check_limits`, in order)."""
        caller = self.caller
        await self.call(self._require_author, caller)
        if self._refusal is not None:
            raise self._refusal
        raw, self._body = self._body, bytearray()
        problem = raw_problem(raw)
        if problem is not None:
            raise ApiError(413, problem, code="too_large", field="notebook")
        environ, now = self.state.environ, self.state.clock.now()
        heavy = len(raw) > HEAVY_CHECK_BYTES
        async with self.limits.parsing(heavy):
            if heavy:  # seconds of pure Python: in a child, not under our lock
                work = await check_in_child(raw, environ, now)
            else:
                work = await self.call(check_body, raw, environ, now)
        del raw
        bound = await self._file_of(work.pop("path"))
        sha256 = work.pop("sha256")
        name = work["name"]
        work["published"] = (
            None if name is None else await self.call(self._published, caller, name, sha256, bound)
        )
        work["channels"], work["formats"] = _registered()
        work["unconfigured"] = await self.call(_unconfigured, self.state.environ)
        work["zones"] = sorted(canonical_zones())
        self.write_json(work)

    def _require_author(self, caller: Caller) -> None:
        """The ``author`` role in an existing tenant (AccessDeniedError: 403)."""
        with self.state.db.session() as session:
            require(session, caller, Role.author, "checking a notebook", self.state.clock.now())

    async def _file_of(self, path: str | None) -> str | None:
        """The file a publish of contents path ``path`` would bind the definition to
        (as ``POST /definitions {path}`` names it), or None — also when the caller
        may not read that path through the contents API, so a check tells nothing
        about files its caller could not publish."""
        if not path:
            return None
        try:
            clean = contents_path(path)
            if not await readable_path(self, clean):
                return None
            return bound_source(self.contents_manager, clean)
        except (ApiError, OSError, ValueError):
            return None

    @property
    def _root(self) -> str | None:
        root = getattr(self.contents_manager, "root_dir", None)
        return root if isinstance(root, str) else None

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
            "source_path": shown_source(record.source_path, self._root),
            "this_file": bound is not None and record.source_path == bound,
            "paused": record.paused,
            "same": sha256 is not None and latest.sha256 == sha256,
        }


class TooManyChecks(ApiError):
    """429: a heavy check refused for load, with the seconds until a retry."""

    def __init__(self, reason: str, retry_after: float) -> None:
        seconds = max(1, min(60, math.ceil(retry_after)))
        super().__init__(429, f"{reason}: try again in {seconds} s", code="too_many_requests")
        self.retry_after = seconds


def _content_length(text: str | None) -> int | None:
    """The declared body length (None: not declared, or not a number tornado kept)."""
    if text is None or not (text.isascii() and text.isdigit()) or len(text) > 18:
        return None
    return int(text)


def _unconfigured(environ: dict[str, str]) -> dict[str, str]:
    """The channels this server's environment does not configure, each with what would."""
    from nbcast.delivery.channels import unconfigured_channels

    return unconfigured_channels(environ)


def _registered() -> tuple[list[str], list[str]]:
    """The channel and format names the registries know (built-ins and plug-ins)."""
    from nbcast.delivery.channels import channels
    from nbcast.delivery.renderers import renderers

    return channels.names(), renderers.names()
