"""Contents-manager paths as nbcast takes them: a path under the server's root folder,
and the source a notebook published from it is bound to (its file's real path, so
``nbcast publish`` of the same file updates the same definition)."""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any

from nbcast.server_extension.errors import ApiError

__all__ = ["bound_source", "contents_path"]


def contents_path(path: str) -> str:
    """``path`` as a contents-manager path under the server's root (no leading or
    trailing slash); ApiError 400 (field ``path``) for one that leaves it or is none."""
    clean = path.strip().strip("/")
    parts = PurePosixPath(clean).parts
    if "\x00" in clean or "\\" in clean or ".." in parts or not parts:
        raise ApiError(
            400, "path must name a notebook under the server's root folder", field="path"
        )
    return clean


def bound_source(manager: Any, clean: str) -> str:
    """The source a notebook published from contents path ``clean`` is bound to: its
    file's real path under a local root, else ``contents:<path>``."""
    root = getattr(manager, "root_dir", None)
    return str(Path(root, clean).resolve()) if isinstance(root, str) else f"contents:{clean}"
