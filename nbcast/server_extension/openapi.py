"""The OpenAPI 3.1 document of ``/nbcast/api/v1``, built from the route registry.

Paths and operations come from :func:`nbcast.server_extension.routes.registered`, so
a route cannot exist without being described; component schemas are registered by
the handler modules with :func:`schema` next to the handlers that answer them. Every
operation documents its error statuses with the one error shape
(:mod:`nbcast.server_extension.errors`).
"""

from __future__ import annotations

from typing import Any

from nbcast import __version__
from nbcast.server_extension.routes import Route, registered

__all__ = [
    "INSTANT",
    "NULLABLE_INSTANT",
    "NULLABLE_INT",
    "NULLABLE_NUMBER",
    "NULLABLE_OBJECT",
    "NULLABLE_STRING",
    "STRING",
    "document",
    "schema",
]

_SCHEMAS: dict[str, dict[str, Any]] = {}

# The schemas' atoms, shared by every handler module.
STRING = {"type": "string"}
NULLABLE_STRING = {"type": ["string", "null"]}
NULLABLE_INT = {"type": ["integer", "null"]}
NULLABLE_NUMBER = {"type": ["number", "null"]}
NULLABLE_OBJECT = {"type": ["object", "null"]}
INSTANT = {"type": "string", "format": "date-time"}
NULLABLE_INSTANT = {"type": ["string", "null"], "format": "date-time"}


def schema(name: str, definition: dict[str, Any]) -> dict[str, Any]:
    """Register component schema ``name``; return a reference to it."""
    if name in _SCHEMAS and _SCHEMAS[name] != definition:
        raise ValueError(f"schema {name} is registered twice, differently")
    _SCHEMAS[name] = definition
    return {"$ref": f"#/components/schemas/{name}"}


schema(
    "Error",
    {
        "type": "object",
        "required": ["error"],
        "properties": {
            "error": {
                "type": "object",
                "required": ["code", "message", "field"],
                "properties": {
                    "code": {"type": "string"},
                    "message": {"type": "string"},
                    "field": {"type": ["string", "null"]},
                },
            }
        },
    },
)
_ERROR_TEXT = {
    400: "Bad input (nothing was written)",
    401: "Not authenticated",
    403: "Not allowed",
    404: "Not found (or another tenant's)",
    409: "The object's state forbids it",
    413: "The body is too large",
}


def _operation(route: Route, index: int) -> tuple[str, dict[str, Any]]:
    op = route.operations[index]
    out: dict[str, Any] = {
        "summary": op.summary,
        "operationId": _operation_id(op.method, route.path),
        "tags": [op.tag],
        "parameters": [p.to_openapi() for p in op.params],
        "security": [{"token": []}],
    }
    if op.body is not None:
        out["requestBody"] = {
            "required": True,
            "content": {"application/json": {"schema": op.body}},
        }
    responses: dict[str, Any] = {}
    if op.response is not None:
        content = {op.media: {"schema": op.response}}
        for media, alternative in op.also:
            content[media] = {} if alternative is None else {"schema": alternative}
        responses[str(op.status)] = {"description": "OK", "content": content}
    elif op.media != "application/json":
        responses[str(op.status)] = {"description": "The file", "content": {op.media: {}}}
    else:
        responses[str(op.status)] = {"description": "Done"}
    error = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
    for status in sorted({*op.errors, 403}):
        responses[str(status)] = {"description": _ERROR_TEXT.get(status, "Error"), "content": error}
    out["responses"] = responses
    if op.admin:
        out["description"] = "Operators only (see nbcast users grant NAME operator)."
    return op.method, out


def _operation_id(method: str, path: str) -> str:
    tail = path.split("/nbcast/api/v1", 1)[-1].strip("/") or "root"
    words = [w.strip("{}") for w in tail.split("/")]
    return f"{method}_{'_'.join(words)}".replace("-", "_")


def document() -> dict[str, Any]:
    """The OpenAPI document (module docstring)."""
    paths: dict[str, dict[str, Any]] = {}
    for route in registered():
        if not route.documented:
            continue
        item = paths.setdefault(route.path, {})
        for index in range(len(route.operations)):
            method, operation = _operation(route, index)
            item[method] = operation
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "nbcast",
            "version": __version__,
            "description": "Scheduled, versioned reports from Jupyter notebooks. Every "
            "request acts for the caller's tenant; another tenant's object is not found.",
        },
        "paths": dict(sorted(paths.items())),
        "components": {
            "schemas": dict(sorted(_SCHEMAS.items())),
            "securitySchemes": {
                "token": {
                    "type": "apiKey",
                    "in": "header",
                    "name": "Authorization",
                    "description": "'token <jupyter-server token>'",
                }
            },
        },
    }
