"""One registry of the extension's routes, from which both the tornado URL table and
the OpenAPI 3.1 document are made — so the document cannot drift from the handlers.

A handler module declares its routes with :func:`route`::

    @route(
        "/nbcast/api/v1/runs/{run_id}",
        Operation("get", "One run", tag="runs", params=(RUN_ID,), response=ref("RunDetail")),
    )
    class RunHandler(ApiHandler): ...

Paths are OpenAPI templates; ``{name}`` becomes the tornado group ``(?P<name>[^/]+)``.
Every operation of an API route must have a method of the same name on its handler,
and every such method an operation (:func:`check_registry`; a test runs it too).
Routes outside the API (pages, links, metrics) are registered with ``documented=False``
and appear in the URL table only.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

__all__ = [
    "API",
    "Operation",
    "Param",
    "Route",
    "check_registry",
    "ref",
    "registered",
    "route",
    "tornado_handlers",
]

API = "/nbcast/api/v1"
"""The API's prefix."""

HTTP_METHODS = ("get", "post", "put", "patch", "delete")

T = TypeVar("T", bound=type)


def ref(name: str) -> dict[str, Any]:
    """A JSON-schema reference to the component schema ``name``."""
    return {"$ref": f"#/components/schemas/{name}"}


@dataclass(frozen=True)
class Param:
    """A path or query parameter."""

    name: str
    where: str = "query"
    """``query`` or ``path``."""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})
    required: bool = False
    description: str = ""

    def to_openapi(self) -> dict[str, Any]:
        """The OpenAPI parameter object."""
        out: dict[str, Any] = {
            "name": self.name,
            "in": self.where,
            "required": self.required or self.where == "path",
            "schema": self.schema,
        }
        if self.description:
            out["description"] = self.description
        return out


@dataclass(frozen=True)
class Operation:
    """One method of a route, as the OpenAPI document describes it."""

    method: str
    summary: str
    tag: str
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    """The request body's JSON schema (None: no body)."""
    response: dict[str, Any] | None = None
    """The success response's JSON schema (None: ``media`` below, or no content)."""
    status: int = 200
    media: str = "application/json"
    """The success response's media type (a download: its type)."""
    also: tuple[tuple[str, dict[str, Any] | None], ...] = ()
    """Other media types the success response may have (chosen by a query parameter,
    e.g. ``format=html``), each with its schema (None: none)."""
    admin: bool = False
    """Only for operators (the command layer checks: :mod:`nbcast.tenancy.roles`)."""
    errors: tuple[int, ...] = (400, 403, 404)
    """The error statuses it may answer (each with the error schema)."""

    def __post_init__(self) -> None:
        if self.method not in HTTP_METHODS:
            raise ValueError(f"unknown HTTP method {self.method!r}")


@dataclass(frozen=True)
class Route:
    """A URL template, its handler and its operations."""

    path: str
    handler: type
    operations: tuple[Operation, ...]
    documented: bool = True

    @property
    def pattern(self) -> str:
        """The tornado URL pattern of :attr:`path`."""
        return re.sub(r"\{(\w+)\}", r"(?P<\1>[^/]+)", self.path)


_REGISTRY: list[Route] = []


def route(path: str, *operations: Operation, documented: bool = True) -> Callable[[T], T]:
    """Register the decorated handler class at ``path`` (module docstring)."""

    def register(handler: T) -> T:
        if any(r.path == path for r in _REGISTRY):
            raise ValueError(f"route {path} is registered twice")
        _REGISTRY.append(Route(path, handler, tuple(operations), documented))
        return handler

    return register


def registered() -> list[Route]:
    """Every route, after importing every handler module."""
    from nbcast.server_extension import handlers

    handlers.load_all()
    return list(_REGISTRY)


def check_registry(routes: Sequence[Route]) -> list[str]:
    """The problems of ``routes``: an operation without its handler method, a handler
    method without its operation (API routes), a path parameter that is not declared."""
    problems = []
    for r in routes:
        if not r.documented:
            continue
        declared = {op.method for op in r.operations}
        implemented = {m for m in HTTP_METHODS if m in vars(r.handler) or _inherits(r.handler, m)}
        for method in sorted(declared - implemented):
            problems.append(f"{method.upper()} {r.path}: {r.handler.__name__} has no {method}()")
        for method in sorted(implemented - declared):
            problems.append(f"{method.upper()} {r.path}: implemented but not documented")
        names = set(re.findall(r"\{(\w+)\}", r.path))
        for op in r.operations:
            path_params = {p.name for p in op.params if p.where == "path"}
            if path_params != names:
                problems.append(f"{op.method.upper()} {r.path}: path parameters {sorted(names)}")
    return problems


def _inherits(handler: type, method: str) -> bool:
    """Whether ``handler`` has ``method`` from an nbcast base class (not tornado's
    405 default)."""
    for klass in handler.__mro__[1:]:
        if method in vars(klass):
            return klass.__module__.startswith("nbcast.")
    return False


def tornado_handlers(routes: Sequence[Route]) -> list[tuple[str, type]]:
    """The URL table entries of ``routes`` (the extension prefixes the base URL), the
    most specific first: tornado takes the first pattern that matches, and two
    templates that match one URL have as many segments, so the one with fewer
    ``{name}`` parameters has a literal where the other has a parameter
    (``/nbcast/runs/{run_id}/notebook.html`` before ``/nbcast/runs/{run_id}/{action}``),
    whichever module registered its route first."""
    ordered = sorted(routes, key=lambda r: r.path.count("{"))
    return [(r.pattern, r.handler) for r in ordered]
