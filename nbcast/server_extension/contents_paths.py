"""Contents-manager paths as nbcast takes them, who may name one, and how a bound
file is shown.

**Who may publish by path.** ``POST /definitions {"path": …}`` (and the check's
``path``) reads a file through the server's contents manager, so it is allowed exactly
where jupyter-server's own contents API would let the caller read that path
(:func:`readable_path`): its authorizer says yes to ``read`` on ``contents`` — the
question ``GET /api/contents/<path>`` asks for the same user — and the contents
manager would show the file (under its root, not hidden unless
``ContentsManager.allow_hidden``). nbcast adds no per-tenant root of its own: which
files a person may read is the server's decision, made once, by its authorizer and
contents manager. Under ``nbcast serve`` (:class:`~nbcast.server_extension.authorizer.
NbcastAuthorizer`) only operators may read files, so a tenant's people publish a
notebook's JSON instead; in a person's own ``jupyter lab`` they may read their files,
and the Lab extension publishes by path. A refusal says nothing about whether the file
exists.

**What the caller is shown.** A definition published from a file is bound to the
file's real path (:func:`bound_source`: so ``nbcast publish`` of that file updates the
same definition), which is an absolute path on the server. No answer of the server
shows it: :func:`shown_source` gives the path relative to the server's root folder
(``reports/nightly.ipynb``), and a file outside the root (published with the CLI from
elsewhere) by its name alone, as ``outside-root:nightly.ipynb``. ``api:<name>`` (a
notebook published as a body) and ``contents:<path>`` (a contents manager without a
local root) are shown as stored. The command line, which runs as the home's own OS
user, keeps showing the stored path.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from jupyter_core.utils import ensure_async
from tornado.web import HTTPError

from nbcast.definitions.notebook import LoadedNotebook, loaded_document, parse_notebook_text
from nbcast.limits import MAX_NOTEBOOK_FILE_BYTES, clip
from nbcast.server_extension.errors import ApiError

__all__ = [
    "MAX_PATH_CHARS",
    "OUTSIDE_ROOT",
    "bound_source",
    "contents_path",
    "may_read_contents",
    "read_notebook",
    "readable_path",
    "shown_record",
    "shown_source",
]

MAX_PATH_CHARS = 1_024
"""The longest contents-manager path a publish accepts."""

OUTSIDE_ROOT = "outside-root:"
"""How a bound file outside the server's root folder is shown: this, then its name."""

R = TypeVar("R")


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


async def may_read_contents(handler: Any) -> bool:
    """Whether jupyter-server's authorizer lets the request's user ``read`` the
    resource ``contents`` (what ``GET /api/contents/…`` asks it). The authorizer is
    handed nbcast's handler, as jupyter-server hands it its own."""
    user = handler.current_user
    if not user:
        return False
    return bool(
        await ensure_async(handler.authorizer.is_authorized(handler, user, "read", "contents"))
    )


async def readable_path(handler: Any, clean: str) -> bool:
    """Whether the request's user may read contents path ``clean`` through the contents
    API (module docstring): the authorizer's ``read`` on ``contents``, and a path the
    contents manager does not hide."""
    if not await may_read_contents(handler):
        return False
    manager = handler.contents_manager
    if getattr(manager, "allow_hidden", False):
        return True
    try:
        return not await ensure_async(manager.is_hidden(clean))
    except (OSError, ValueError):  # a name the file system refuses: reading says so
        return True


async def read_notebook(handler: Any, path: Any) -> tuple[LoadedNotebook, str]:
    """The notebook at contents path ``path``, read for ``handler``'s user through the
    server's contents manager, and the file it is bound to (:func:`bound_source`).

    ApiError 403 where that user may not read the path (:func:`readable_path`), before
    anything else is looked at; 400 (field ``path``) for a path that is not a notebook
    nbcast may read: not ``.ipynb``, outside the root or inside nbcast's home once
    symbolic links are followed, a folder, over :data:`~nbcast.limits.
    MAX_NOTEBOOK_FILE_BYTES`, not UTF-8 text, or not a notebook. The contents
    manager's own messages are not passed on: they may name the file's absolute path.
    """
    if not isinstance(path, str) or not path.strip() or len(path) > MAX_PATH_CHARS:
        raise ApiError(
            400,
            f"path must be a non-empty string of at most {MAX_PATH_CHARS:,} characters",
            field="path",
        )
    clean = contents_path(path)
    if not await readable_path(handler, clean):
        raise ApiError(
            403,
            "publishing by path reads the file through this server's contents API, "
            "which does not let you read it: publish the notebook's JSON (notebook) "
            "instead",
            code="forbidden",
            field="path",
        )
    if not clean.lower().endswith(".ipynb"):
        raise ApiError(400, f"{clip(clean)} is not a .ipynb notebook", field="path")
    manager = handler.contents_manager
    _check_real_path(getattr(manager, "root_dir", None), handler.state.settings.home, clean)
    try:
        model = await ensure_async(manager.get(clean, content=False))
        if model.get("type") == "directory":
            raise ApiError(400, f"{clip(clean)} is a folder, not a notebook", field="path")
        size = model.get("size")
        if isinstance(size, int) and size > MAX_NOTEBOOK_FILE_BYTES:
            raise ApiError(
                400,
                f"{clip(clean)}: {size:,} bytes is over the {MAX_NOTEBOOK_FILE_BYTES:,}"
                "-byte limit of a notebook file",
                field="path",
            )
        model = await ensure_async(manager.get(clean, content=True, type="file", format="text"))
    except HTTPError as exc:
        if isinstance(exc, ApiError):
            raise
        raise ApiError(400, f"{clip(clean)}: {_unreadable(exc)}", field="path") from None
    except (OSError, ValueError) as exc:  # a name the file system refuses
        raise ApiError(
            400, f"{clip(clean)}: cannot be read ({type(exc).__name__})", field="path"
        ) from None
    text = model.get("content")
    if not isinstance(text, str):
        raise ApiError(400, f"{clip(clean)} is not a text file", field="path")
    if len(text) > MAX_NOTEBOOK_FILE_BYTES:  # the manager did not say its size
        raise ApiError(
            400,
            f"{clip(clean)} is over the {MAX_NOTEBOOK_FILE_BYTES:,}-byte limit of a notebook file",
            field="path",
        )
    source = bound_source(manager, clean)
    loaded = await handler.call(lambda: loaded_document(parse_notebook_text(text, clean), clean))
    return loaded, source


def _check_real_path(root: Any, home: Any, clean: str) -> None:
    """Refuse a path whose real file (symlinks followed) is outside the server's root
    folder, or inside nbcast's home: nbcast's database, keys and artifacts are never
    read as a notebook (opening and closing a live SQLite file in the server would
    also drop the locks other processes rely on)."""
    if not isinstance(root, str):
        return  # a contents manager without a local root: it enforces its own
    real = Path(root, clean).resolve()
    if not real.is_relative_to(Path(root).resolve()) or real.is_relative_to(Path(home).resolve()):
        raise ApiError(
            400, "path must name a notebook under the server's root folder", field="path"
        )


def _unreadable(exc: HTTPError) -> str:
    """What a contents manager's refusal to read a file means, in nbcast's words."""
    if exc.status_code == 404:
        return "no such file"
    if exc.status_code == 403:
        return "permission denied"
    return "cannot be read as a UTF-8 text file"


def shown_source(source: str, root: Any) -> str:
    """``source`` (a definition's bound file) as the server shows it (module
    docstring); ``root`` is the contents manager's ``root_dir`` (None: no local root)."""
    if not source.startswith("/"):
        return source  # api:<name>, contents:<path>: nothing of the server's file system
    path = PurePosixPath(source)
    if isinstance(root, str) and root:
        for base in _roots(root):
            if path.is_relative_to(base):
                relative = path.relative_to(base).as_posix()
                return relative if relative != "." else f"{OUTSIDE_ROOT}{path.name}"
    return f"{OUTSIDE_ROOT}{path.name}"


def _roots(root: str) -> list[PurePosixPath]:
    """The root as given and as resolved (a bound file's path is resolved, the
    configured root may be reached through a symbolic link)."""
    given = PurePosixPath(root)
    try:
        real = PurePosixPath(Path(root).resolve())
    except (OSError, RuntimeError, ValueError):
        return [given]
    return [real] if real == given else [real, given]


def shown_record(record: R, root: Any) -> R:
    """``record`` (any dataclass with a ``source_path``) with its source as shown."""
    source = getattr(record, "source_path", None)
    if not isinstance(source, str):
        return record
    return dataclasses.replace(record, source_path=shown_source(source, root))  # type: ignore[type-var]
