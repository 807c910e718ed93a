"""Fixed timestamps for the container formats: zip archives and ``SOURCE_DATE_EPOCH``.

Every archive a renderer writes (xlsx is a zip, so is a multi-table csv) is written
by :func:`write_zip`: entries in the order given, each with the same fixed
``date_time`` (the slot's instant, UTC, clamped to the zip epoch 1980), the same
compression, no extra fields and neutral permissions. Two renders of the same
content therefore give identical bytes, whatever the clock, the ``TZ`` or the umask.
"""

from __future__ import annotations

import io
import os
import threading
import zipfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime

__all__ = ["rezip", "source_date_epoch", "write_zip", "zip_date_time"]

_ZIP_EPOCH = datetime(1980, 1, 1, tzinfo=UTC)
_ZIP_END = datetime(2107, 12, 31, 23, 59, 58, tzinfo=UTC)
_environ_lock = threading.Lock()


def zip_date_time(instant: datetime) -> tuple[int, int, int, int, int, int]:
    """``instant`` (aware) as a zip entry's ``date_time``: UTC, within what zip can hold."""
    utc = min(max(instant.astimezone(UTC), _ZIP_EPOCH), _ZIP_END)
    return (utc.year, utc.month, utc.day, utc.hour, utc.minute, utc.second)


def write_zip(entries: Iterable[tuple[str, bytes]], instant: datetime) -> bytes:
    """A deflated zip of ``entries`` (name, bytes), in that order, all dated ``instant``."""
    stamp = zip_date_time(instant)
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        for name, data in entries:
            info = zipfile.ZipInfo(name, date_time=stamp)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.create_system = 3  # Unix, whatever this process runs on
            info.external_attr = 0o644 << 16
            archive.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=6)
    return buffer.getvalue()


def rezip(data: bytes, instant: datetime, first: tuple[str, ...] = ()) -> bytes:
    """``data`` (a zip) rewritten by :func:`write_zip`: ``first`` names, then the rest sorted."""
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        contents = {info.filename: archive.read(info) for info in archive.infolist()}
    order = [name for name in first if name in contents]
    order += sorted(name for name in contents if name not in first)
    return write_zip(((name, contents[name]) for name in order), instant)


@contextmanager
def source_date_epoch(epoch: int) -> Iterator[None]:
    """Set ``SOURCE_DATE_EPOCH`` for the duration (fontTools dates the fonts it saves).

    The environment is process-wide, so concurrent renders in threads take turns.
    """
    with _environ_lock:
        previous = os.environ.get("SOURCE_DATE_EPOCH")
        os.environ["SOURCE_DATE_EPOCH"] = str(max(epoch, 0))
        try:
            yield
        finally:
            if previous is None:
                del os.environ["SOURCE_DATE_EPOCH"]
            else:
                os.environ["SOURCE_DATE_EPOCH"] = previous
