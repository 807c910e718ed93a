"""Report definitions: notebooks, their parameter schema, versions and diffs.

The public API::

    from nbcast.definitions import publish, validate_parameters, parse_spec
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__all__ = [
    "Parameter",
    "PublishResult",
    "ReportSpec",
    "VersionInfo",
    "diff_versions",
    "get_version",
    "list_versions",
    "parse_parameters_cell",
    "parse_spec",
    "publish",
    "render_diff",
    "validate_parameters",
]

_WHERE = {
    "Parameter": "parameters",
    "parse_parameters_cell": "parameters",
    "validate_parameters": "parameters",
    "ReportSpec": "spec",
    "parse_spec": "spec",
    "PublishResult": "versions",
    "publish": "versions",
    "VersionInfo": "queries",
    "get_version": "queries",
    "list_versions": "queries",
    "diff_versions": "diff",
    "render_diff": "diff_render",
}

if TYPE_CHECKING:
    from nbcast.definitions.diff import diff_versions
    from nbcast.definitions.diff_render import render_diff
    from nbcast.definitions.parameters import (
        Parameter,
        parse_parameters_cell,
        validate_parameters,
    )
    from nbcast.definitions.queries import VersionInfo, get_version, list_versions
    from nbcast.definitions.spec import ReportSpec, parse_spec
    from nbcast.definitions.versions import PublishResult, publish


def __getattr__(name: str) -> Any:
    # Lazy, so importing one piece (e.g. parameters inside a kernel) stays cheap.
    if name in _WHERE:
        import importlib

        return getattr(importlib.import_module(f"nbcast.definitions.{_WHERE[name]}"), name)
    raise AttributeError(f"module 'nbcast.definitions' has no attribute {name!r}")
