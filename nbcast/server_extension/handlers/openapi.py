"""``/nbcast/api/v1/openapi.json``: the API's OpenAPI 3.1 document."""

from __future__ import annotations

from jupyter_server.auth.decorator import authorized

from nbcast.server_extension.handlers.base import ApiHandler
from nbcast.server_extension.openapi import document
from nbcast.server_extension.routes import API, Operation, route

__all__ = ["OpenApiHandler"]


@route(
    f"{API}/openapi.json",
    Operation(
        "get",
        "This document",
        tag="service",
        response={"type": "object", "required": ["openapi", "paths"]},
        errors=(403,),
    ),
)
class OpenApiHandler(ApiHandler):
    """The OpenAPI document (built once per process)."""

    _document: dict[str, object] | None = None

    @authorized
    async def get(self) -> None:
        """The document."""
        if OpenApiHandler._document is None:
            OpenApiHandler._document = document()
        self.write_json(OpenApiHandler._document)
