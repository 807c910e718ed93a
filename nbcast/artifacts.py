"""The content-addressed artifact store shared by execution and delivery.

An artifact (an executed notebook, a rendered PDF, …) is stored under the sha256 of
its bytes, so the same content is stored once however often it is produced, and a
reference (:class:`ArtifactRef`) says exactly which bytes it means. Keys are the
only names the store accepts — 64 lowercase hex digits, laid out as
``ab/cd/abcd…`` — so no caller can make it read or write outside its root: there
is no path to traverse.

Backends (one ABC, :class:`ArtifactStore`):

- :class:`LocalArtifactStore` — a folder (the default: ``$NBCAST_HOME/artifacts``);
  writes go to a temporary file in the same folder and are renamed into place, so a
  crash never leaves a partial artifact under a valid key.
- :class:`FsspecArtifactStore` — any fsspec URL (``s3://bucket/prefix``,
  ``memory://…``), for stores shared by workers on several machines.

:func:`open_store` picks one from a path or URL.
"""

from __future__ import annotations

import hashlib
import io
import os
import re
import tempfile
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from nbcast.errors import ConfigError

__all__ = [
    "ArtifactRef",
    "ArtifactStore",
    "FsspecArtifactStore",
    "LocalArtifactStore",
    "open_store",
]

_KEY = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True, kw_only=True)
class ArtifactRef:
    """Which bytes: their sha256 and size."""

    sha256: str
    size: int


def _check(key: str) -> str:
    if not isinstance(key, str) or not _KEY.fullmatch(key):
        raise ConfigError(f"{key!r} is not an artifact key (64 lowercase hex digits)")
    return key


def _relative(key: str) -> str:
    key = _check(key)
    return f"{key[:2]}/{key[2:4]}/{key}"


class ArtifactStore(ABC):
    """Stores bytes under their sha256.

    Contract: ``put`` is idempotent (storing existing content is a no-op that returns
    the same reference) and atomic (a reader never sees a partial artifact);
    ``get`` returns exactly the bytes whose sha256 is the key, or raises
    :class:`KeyError`; keys that are not 64 hex digits are refused before any I/O.
    """

    def put(self, data: bytes) -> ArtifactRef:
        """Store ``data``; return its reference."""
        ref = ArtifactRef(sha256=hashlib.sha256(data).hexdigest(), size=len(data))
        if not self.exists(ref.sha256):
            self._write(_relative(ref.sha256), data)
        return ref

    def put_file(self, path: str | os.PathLike[str]) -> ArtifactRef:
        """Store the content of the file at ``path``."""
        return self.put(Path(path).read_bytes())

    def get(self, key: str) -> bytes:
        """The bytes stored under ``key``."""
        return self._read(_relative(key))

    def exists(self, key: str) -> bool:
        """Whether ``key`` is stored."""
        return self._exists(_relative(key))

    def open(self, key: str) -> IO[bytes]:
        """The bytes stored under ``key`` as a binary file to read in chunks (a large
        rendition is streamed, never held whole in memory); :class:`KeyError` if it
        is not stored. Backends that cannot stream read it whole."""
        return io.BytesIO(self.get(key))

    def size(self, key: str) -> int | None:
        """How many bytes are stored under ``key`` (None: it is not stored)."""
        return self._size(_relative(key))

    def delete(self, key: str) -> bool:
        """Remove ``key``; True if it was stored, False if it was not (deleting is
        idempotent). Only retention deletes (:mod:`nbcast.oversight.retention`), and
        only content nothing kept refers to; a storage failure raises ``OSError``."""
        return self._delete(_relative(key))

    @abstractmethod
    def _write(self, relative: str, data: bytes) -> None: ...

    @abstractmethod
    def _read(self, relative: str) -> bytes: ...

    @abstractmethod
    def _exists(self, relative: str) -> bool: ...

    @abstractmethod
    def _size(self, relative: str) -> int | None: ...

    @abstractmethod
    def _delete(self, relative: str) -> bool: ...


class LocalArtifactStore(ArtifactStore):
    """Artifacts in a local folder."""

    def __init__(self, root: str | os.PathLike[str]) -> None:
        self.root = Path(root).resolve()

    def path(self, key: str) -> Path:
        """Where ``key`` lives on disk (for renderers and links that need a file)."""
        return self.root / _relative(key)

    def _write(self, relative: str, data: bytes) -> None:
        target = self.root / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".tmp-")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(tmp, target)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def _read(self, relative: str) -> bytes:
        try:
            return (self.root / relative).read_bytes()
        except FileNotFoundError:
            raise KeyError(relative.rsplit("/", 1)[-1]) from None

    def _exists(self, relative: str) -> bool:
        return (self.root / relative).is_file()

    def _size(self, relative: str) -> int | None:
        try:
            return (self.root / relative).stat().st_size
        except FileNotFoundError:
            return None

    def _delete(self, relative: str) -> bool:
        try:
            (self.root / relative).unlink()
        except FileNotFoundError:
            return False
        return True

    def open(self, key: str) -> IO[bytes]:
        """The file of ``key``, opened for reading."""
        try:
            return (self.root / _relative(key)).open("rb")
        except FileNotFoundError:
            raise KeyError(key) from None


class FsspecArtifactStore(ArtifactStore):
    """Artifacts under any fsspec URL."""

    def __init__(self, url: str, **storage_options: Any) -> None:
        import fsspec

        self.url = url.rstrip("/")
        self.fs, self.base = fsspec.core.url_to_fs(self.url, **storage_options)

    def _full(self, relative: str) -> str:
        return f"{self.base.rstrip('/')}/{relative}"

    def _write(self, relative: str, data: bytes) -> None:
        path = self._full(relative)
        tmp = f"{path}.tmp-{os.getpid()}"
        self.fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
        self.fs.pipe_file(tmp, data)
        self.fs.mv(tmp, path)

    def _read(self, relative: str) -> bytes:
        try:
            return bytes(self.fs.cat_file(self._full(relative)))
        except FileNotFoundError:
            raise KeyError(relative.rsplit("/", 1)[-1]) from None

    def _exists(self, relative: str) -> bool:
        return bool(self.fs.exists(self._full(relative)))

    def _size(self, relative: str) -> int | None:
        try:
            return int(self.fs.size(self._full(relative)))
        except FileNotFoundError:
            return None

    def _delete(self, relative: str) -> bool:
        path = self._full(relative)
        if not self.fs.exists(path):
            return False
        try:
            self.fs.rm_file(path)
        except FileNotFoundError:
            return False
        return True

    def open(self, key: str) -> IO[bytes]:
        """The object of ``key``, opened for reading through fsspec."""
        try:
            return self.fs.open(self._full(_relative(key)), "rb")  # type: ignore[no-any-return]
        except FileNotFoundError:
            raise KeyError(key) from None


def open_store(location: str | os.PathLike[str]) -> ArtifactStore:
    """A local store for a path (or ``file://`` URL), an fsspec store for other URLs."""
    text = os.fspath(location)
    if "://" not in text:
        return LocalArtifactStore(text)
    if text.startswith("file://"):
        return LocalArtifactStore(text[len("file://") :])
    return FsspecArtifactStore(text)
