"""The base of every nbcast handler: its state, its caller, its errors, its input.

- :attr:`NbcastMixin.state` — the extension's :class:`~nbcast.server_extension.state.ServerState`;
- :attr:`NbcastMixin.caller` — who the authenticated user acts as
  (:func:`~nbcast.server_extension.identity.caller_for`);
- :meth:`NbcastMixin.call` — runs a command-layer function in the extension's thread
  pool, so a query never blocks the server's event loop;
- :class:`ApiHandler` — JSON in and out; every error is the one JSON shape of
  :mod:`nbcast.server_extension.errors`, with a 4xx status for anything nbcast
  refused, and nothing is logged with a traceback unless it was a bug.

Handlers decorate every method with jupyter-server's ``@authorized`` (resource
``nbcast``): authentication and authorization stay the server's.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from datetime import datetime
from typing import Any, TypeVar

from jupyter_server.base.handlers import APIHandler
from jupyter_server.extension.handler import ExtensionHandlerMixin
from tornado.httputil import HTTPServerRequest

from nbcast.access import Caller
from nbcast.errors import ConfigError, NbcastError
from nbcast.limits import storable_text
from nbcast.server_extension.errors import ApiError, error_body, status_of
from nbcast.server_extension.identity import caller_for
from nbcast.server_extension.json_body import decode_json_body
from nbcast.server_extension.state import ServerState

__all__ = ["STATE_KEY", "ApiHandler", "NbcastMixin", "whole_number"]

STATE_KEY = "nbcast_state"
"""The tornado settings key of the :class:`ServerState`."""


T = TypeVar("T")
log = logging.getLogger(__name__)


class NbcastMixin:
    """State, caller and thread-pool calls for any nbcast handler."""

    settings: dict[str, Any]
    current_user: Any
    request: HTTPServerRequest
    auth_resource = "nbcast"

    def query(self, name: str, *, max_length: int = 200) -> str | None:
        """Query parameter ``name`` (None when absent), at most ``max_length`` chars."""
        values = self.request.query_arguments.get(name)
        if not values:
            return None
        if len(values) > 1:
            raise ApiError(400, f"{name} is given more than once", field=name)
        try:
            value = values[0].decode("utf-8")
        except UnicodeDecodeError:
            raise ApiError(400, f"{name} is not UTF-8", field=name) from None
        if len(value) > max_length:
            raise ApiError(400, f"{name} is longer than {max_length} characters", field=name)
        if not storable_text(value):
            raise ApiError(400, f"{name} holds characters nbcast cannot store", field=name)
        return value

    def query_int(self, name: str, *, low: int, high: int) -> int | None:
        """Integer query parameter ``name`` in ``[low, high]`` (None when absent): ASCII
        digits only (:func:`whole_number`)."""
        raw = self.query(name, max_length=24)
        if raw is None:
            return None
        value = whole_number(raw)
        if value is None:
            raise ApiError(400, f"{name} must be a whole number in ASCII digits (0-9)", field=name)
        if not low <= value <= high:
            raise ApiError(400, f"{name} must be from {low:,} to {high:,}", field=name)
        return value

    def query_instant(self, name: str) -> datetime | None:
        """ISO 8601 instant query parameter ``name`` (with an offset), None when absent."""
        from nbcast.clock import parse_instant

        raw = self.query(name, max_length=64)
        if raw is None:
            return None
        try:
            return parse_instant(raw)
        except ConfigError as exc:
            raise ApiError(400, f"{name}: {exc}", field=name) from None

    @property
    def state(self) -> ServerState:
        """The extension's shared state."""
        return self.settings[STATE_KEY]  # type: ignore[no-any-return]

    @property
    def caller(self) -> Caller:
        """Who the request acts for; AccessDeniedError if the user has no tenant."""
        options = self.state.options
        return caller_for(
            self.current_user, options.tenant_map, options.default_tenant, self.state.settings.user
        )

    async def call(self, function: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``function(*args, **kwargs)`` in the extension's thread pool."""
        return await self.state.run(function, *args, **kwargs)

    async def installation_caller(self, doing: str) -> Caller:
        """The caller, if they may see what belongs to the installation rather than a
        tenant (an operator, or a role in an existing tenant:
        :func:`~nbcast.tenancy.roles.require_role_or_operator`, in a transaction of
        its own); AccessDeniedError (403) otherwise. For handlers that read no table
        of their own; one that does makes the check in its own transaction."""
        caller = self.caller
        await self.call(self._require_role_or_operator, caller, doing)
        return caller

    def _require_role_or_operator(self, caller: Caller, doing: str) -> None:
        from nbcast.tenancy.roles import require_role_or_operator

        with self.state.db.session() as session:
            require_role_or_operator(session, caller, doing, self.state.clock.now())


class ApiHandler(NbcastMixin, ExtensionHandlerMixin, APIHandler):
    """A JSON API handler (module docstring)."""

    def write_error(self, status_code: int, **kwargs: Any) -> None:
        """Every error as ``{"error": {code, message, field}}``, with the status its
        exception deserves (:func:`~nbcast.server_extension.errors.status_of`)."""
        exc_info = kwargs.get("exc_info")
        if exc_info and exc_info[1] is not None:
            status, code, message, field = status_of(exc_info[1])
        else:
            status, code, message, field = status_code, f"http_{status_code}", "", None
            message = self._reason or message
        if status != self.get_status():
            self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(error_body(status, code, message, field)))

    def log_exception(self, typ: Any, value: Any, tb: Any) -> None:
        """Log a traceback for bugs only: nbcast's refusals are the caller's problem."""
        if isinstance(value, (NbcastError, ApiError)):
            log.info("%s %s: %s", self.request.method, self.request.path, value)
            return
        super().log_exception(typ, value, tb)

    def write_json(self, body: Any, status: int = 200) -> None:
        """Answer ``body`` as JSON."""
        self.set_status(status)
        self.set_header("Content-Type", "application/json; charset=UTF-8")
        self.finish(json.dumps(body, ensure_ascii=False, default=_default))

    # -- input ------------------------------------------------------------------

    async def json_body(self) -> Any:
        """The request's JSON body, checked for size, depth and text nbcast cannot
        store; ApiError 400 otherwise. Decoded and checked in the extension's thread
        pool: a body of tens of megabytes takes seconds, which must not stop the
        server's event loop (every other request) meanwhile."""
        return await self.call(self._decode_body, self.request.body or b"")

    @staticmethod
    def _decode_body(raw: bytes) -> Any:
        return decode_json_body(raw)

    async def json_object(self) -> dict[str, Any]:
        """The JSON body, which must be an object."""
        body = await self.json_body()
        if not isinstance(body, dict):
            raise ApiError(400, "the body must be a JSON object", field="body")
        return body

    def path_int(self, name: str, value: str) -> int:
        """A path segment that must be a positive id."""
        number = whole_number(value)
        if number is None:
            raise ApiError(404, f"no {name} {value[:40]!r}", code="not_found", field=name)
        return number


MAX_QUERY_DIGITS = 19
"""The most digits an integer query parameter may have (a signed 64-bit id has 19)."""


def whole_number(text: str) -> int | None:
    """``text`` as a non-negative integer if it is 1 to :data:`MAX_QUERY_DIGITS` ASCII
    digits, else None. Python's ``int()`` is not used on its own: it also takes other
    scripts' digits (``int("١٢")`` is 12), a sign, surrounding blanks and ``_``
    separators, so ``?limit=١٢`` would reach the command layer as a number that no
    client wrote."""
    if not 0 < len(text) <= MAX_QUERY_DIGITS or not (text.isascii() and text.isdigit()):
        return None
    return int(text)


def _default(value: Any) -> Any:
    if isinstance(value, datetime):
        from nbcast.clock import format_instant

        return format_instant(value)
    raise TypeError(f"{type(value).__name__} is not JSON")
