"""Differences between two versions of a report definition, computed by nbdime.

Versions are stored normalized (no outputs), so a diff shows what a reviewer cares
about: sources, the parameters cell, the ``nbcast`` block and other metadata.
"""

from __future__ import annotations

import io
from typing import Any

from nbcast.definitions.versions import VersionInfo

__all__ = ["diff_versions", "render_diff"]


def diff_versions(old: VersionInfo, new: VersionInfo) -> list[dict[str, Any]]:
    """nbdime's structured diff from ``old`` to ``new`` (JSON-serializable)."""
    import nbformat
    from nbdime import diff_notebooks

    a = nbformat.from_dict(old.notebook)
    b = nbformat.from_dict(new.notebook)
    plain: list[dict[str, Any]] = _plain(diff_notebooks(a, b))
    return plain


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def render_diff(old: VersionInfo, new: VersionInfo, *, color: bool = False) -> str:
    """A readable terminal diff from ``old`` to ``new`` (empty string if identical)."""
    import nbformat
    from nbdime import diff_notebooks
    from nbdime.prettyprint import PrettyPrintConfig, pretty_print_diff

    a = nbformat.from_dict(old.notebook)
    b = nbformat.from_dict(new.notebook)
    diff = diff_notebooks(a, b)
    if not diff:
        return ""
    out = io.StringIO()
    config = PrettyPrintConfig(out=out, use_git=False, use_diff=True, use_color=color)
    header = (
        f"--- {old.definition} v{old.version}  {old.sha256[:12]}  {old.author}\n"
        f"+++ {new.definition} v{new.version}  {new.sha256[:12]}  {new.author}\n"
    )
    pretty_print_diff(a, diff, "", config)
    return header + out.getvalue()
