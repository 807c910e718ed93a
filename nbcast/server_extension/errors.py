"""How an error becomes an HTTP answer: one JSON shape, a 4xx status, no traceback.

Every API error body is ``{"error": {"code": …, "message": …, "field": …}}``:

=====================  ======  ===============================================
raised                 status  code
=====================  ======  ===============================================
NotFoundError          404     ``not_found``
AccessDeniedError      403     ``forbidden``
ConflictError          409     ``conflict``
other NbcastError      400     ``invalid``
ApiError               its own (a handler's own check: bad query parameter, …)
tornado HTTPError      its own ``http_<status>`` (authentication, method, size)
anything else          500     ``internal`` (logged; the body says nothing more)
=====================  ======  ===============================================

``field`` is the error's own (:attr:`nbcast.errors.NbcastError.field`): the metadata
path of a :class:`~nbcast.errors.MetadataError`, ``parameters.<name>`` of a refused
parameter value, the query argument of a refused preview range; null otherwise.
"""

from __future__ import annotations

from http import HTTPStatus
from typing import Any

from tornado.web import HTTPError

from nbcast.errors import (
    AccessDeniedError,
    ConflictError,
    NbcastError,
    NotFoundError,
)

__all__ = ["ApiError", "error_body", "status_of"]

_MESSAGE_LIMIT = 500


class ApiError(HTTPError):
    """A handler's own refusal: status, code, message and the field it concerns."""

    def __init__(
        self, status: int, message: str, *, code: str = "invalid", field: str | None = None
    ) -> None:
        super().__init__(status, log_message=None, reason=None)
        self.message = message
        self.code = code
        self.field = field


def status_of(exc: BaseException) -> tuple[int, str, str, str | None]:
    """The status, code, message and field for ``exc`` (module docstring)."""
    if isinstance(exc, ApiError):
        return exc.status_code, exc.code, exc.message, exc.field
    if isinstance(exc, NotFoundError):
        return 404, "not_found", str(exc), exc.field
    if isinstance(exc, AccessDeniedError):
        return 403, "forbidden", str(exc), exc.field
    if isinstance(exc, ConflictError):
        return 409, "conflict", str(exc), exc.field
    if isinstance(exc, NbcastError):
        return 400, "invalid", str(exc), exc.field
    if isinstance(exc, HTTPError):
        status = exc.status_code
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = "error"
        return status, f"http_{status}", exc.log_message or exc.reason or phrase, None
    return 500, "internal", "internal error (logged on the server)", None


def error_body(status: int, code: str, message: str, field: str | None) -> dict[str, Any]:
    """The JSON error body (one line of text, bounded)."""
    text = " ".join(str(message).split())
    if len(text) > _MESSAGE_LIMIT:
        text = text[: _MESSAGE_LIMIT - 1] + "…"
    return {"error": {"code": code, "message": text, "field": field}}
