"""How much output a run may produce: counted while it executes, stopped when too much.

nbclient keeps every output a kernel sends in memory, papermill rewrites the whole
executed notebook as it goes, and ipykernel sends what a cell printed in one message
per flush (every 0.2 s) however large. A cell running ``while True: print("z" *
100000)`` pushed a worker to 4–14 GB and filled the disk with a 1 GB notebook, and
``print("y" * 150_000_000)`` succeeded and stored 150 MB. So a run's output is
bounded on the worker's side, where the kernel cannot change it:

- **Counted as it arrives.** The ``nbcast`` notebook client
  (:mod:`nbcast.executor.notebook_runner`) measures every IOPub message of a cell
  (:func:`message_bytes`: the text and data of stream, display, result, error, update
  and widget messages, in UTF-8 bytes) with an :class:`OutputBudget`. Past
  :attr:`OutputLimits.cell_bytes` for one cell (default :data:`DEFAULT_CELL_BYTES`,
  8 MiB) or :attr:`OutputLimits.run_bytes` for the run (default
  :data:`DEFAULT_RUN_BYTES`, 16 MiB), the message is dropped, a note is added to the
  cell (``[nbcast] output stopped: …``) and the kernel is killed at once; the run
  fails with :class:`OutputTooLargeError` (reason ``output_too_large``, not retried:
  the report would do the same again). What counts is all a cell sent — output it
  later cleared or updated too — since that is what the worker had to take in.
- **One message cannot be larger than the run's limit.** The client's sockets refuse
  a message larger than :attr:`OutputLimits.message_bytes` (the run's limit plus
  1 MiB of envelope) before reading it (ZeroMQ's ``MAXMSGSIZE``): ZeroMQ drops the
  connection instead, and :class:`SocketWatch` sees that drop while the kernel is
  still alive and fails the run the same way.
- **Nothing is processed after the end.** Once the run's watchdog has fired (time
  limit, cancel, too much output), later messages are dropped unread, so a backlog
  of queued output is not worked through after the run has ended.

Bounds: each limit is between :data:`MIN_LIMIT_BYTES` (1 KiB) and
:data:`MAX_LIMIT_BYTES` (1 GiB), a cell's at most the run's.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DEFAULT_CELL_BYTES",
    "DEFAULT_RUN_BYTES",
    "MAX_LIMIT_BYTES",
    "MIN_LIMIT_BYTES",
    "OutputBudget",
    "OutputLimits",
    "SocketWatch",
    "message_bytes",
]

DEFAULT_CELL_BYTES = 8 * 1024 * 1024
"""Output one cell may send (bytes)."""

DEFAULT_RUN_BYTES = 16 * 1024 * 1024
"""Output a whole run may send (bytes)."""

MIN_LIMIT_BYTES = 1024
"""The smallest limit accepted."""

MAX_LIMIT_BYTES = 1024 * 1024 * 1024
"""The largest limit accepted."""

_ENVELOPE_BYTES = 1024 * 1024
_UNCOUNTED = frozenset({"status", "execute_input", "clear_output", "shutdown_reply"})


@dataclass(frozen=True, kw_only=True)
class OutputLimits:
    """A run's output limits in bytes (module docstring); out of bounds is a
    ``ValueError``."""

    cell_bytes: int = DEFAULT_CELL_BYTES
    run_bytes: int = DEFAULT_RUN_BYTES

    def __post_init__(self) -> None:
        for name in ("cell_bytes", "run_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"{name} must be a whole number of bytes")
            if not MIN_LIMIT_BYTES <= value <= MAX_LIMIT_BYTES:
                raise ValueError(f"{name} must be {MIN_LIMIT_BYTES} to {MAX_LIMIT_BYTES} bytes")
        if self.cell_bytes > self.run_bytes:
            raise ValueError("cell_bytes must not exceed run_bytes")

    @property
    def message_bytes(self) -> int:
        """The largest message the client's sockets accept."""
        return self.run_bytes + _ENVELOPE_BYTES


def _text_bytes(text: str) -> int:
    return len(text) if text.isascii() else len(text.encode("utf-8", "surrogatepass"))


def message_bytes(msg: Mapping[str, Any], stop_at: int) -> int:
    """The output bytes of a kernel message: every string and buffer in its content,
    in UTF-8. Counting stops past ``stop_at`` (the answer is then larger than it)."""
    if msg.get("msg_type") in _UNCOUNTED:
        return 0
    total = 0
    pending: list[Any] = [msg.get("content"), msg.get("metadata")]
    pending.extend(msg.get("buffers") or ())
    while pending and total <= stop_at:
        item = pending.pop()
        if isinstance(item, str):
            total += _text_bytes(item)
        elif isinstance(item, bytes | bytearray | memoryview):
            total += len(item)
        elif isinstance(item, Mapping):
            pending.extend(item.keys())
            pending.extend(item.values())
        elif isinstance(item, list | tuple):
            pending.extend(item)
    return total


class OutputBudget:
    """Counts a run's output per cell and in all against its :class:`OutputLimits`."""

    def __init__(self, limits: OutputLimits) -> None:
        self.limits = limits
        self.run_total = 0
        self._cells: dict[int, int] = {}

    def add(self, cell_index: int, msg: Mapping[str, Any]) -> str | None:
        """Count ``msg`` for cell ``cell_index``; return why it is one too many (a
        sentence) or None."""
        cell_total = self._cells.get(cell_index, 0)
        room = min(self.limits.cell_bytes - cell_total, self.limits.run_bytes - self.run_total)
        size = message_bytes(msg, max(room, 0))
        if size > self.limits.cell_bytes - cell_total:
            return f"cell {cell_index} sent more than {self.limits.cell_bytes:,} bytes of output"
        if size > self.limits.run_bytes - self.run_total:
            return f"the run sent more than {self.limits.run_bytes:,} bytes of output"
        self._cells[cell_index] = cell_total + size
        self.run_total += size
        return None


class SocketWatch:
    """Notices when a kernel client's socket loses its connection — what ZeroMQ does
    with a message over ``MAXMSGSIZE`` — through socket monitors.

    Made on the client's thread; :meth:`dropped` may be called from another thread
    (the watchdog's), :meth:`close` from either: a lock keeps them apart.
    """

    def __init__(self, sockets: Iterable[Any]) -> None:
        import zmq

        self._lock = threading.Lock()
        self._monitored: list[Any] = []
        self._pairs: list[Any] = []
        self._closed = False
        for sock in sockets:
            address = f"inproc://nbcast-watch-{id(self)}-{len(self._pairs)}"
            sock.monitor(address, zmq.EVENT_DISCONNECTED)
            # The monitor's end lives in the socket's own ZeroMQ context; a plain
            # (not asyncio) wrapper of it can be polled from any thread.
            pair: Any = zmq.Context.shadow(sock.context.underlying).socket(zmq.PAIR)
            pair.linger = 0
            pair.connect(address)
            self._monitored.append(sock)
            self._pairs.append(pair)

    def dropped(self) -> int:
        """How many times the watched sockets lost their connection since the last call."""
        import zmq

        with self._lock:
            if self._closed:
                return 0
            seen = 0
            for pair in self._pairs:
                with contextlib.suppress(zmq.ZMQError):
                    while pair.poll(0):
                        pair.recv_multipart(zmq.NOBLOCK)
                        seen += 1
            return seen

    def close(self) -> None:
        """Stop watching (before the client closes its sockets). Idempotent."""
        import zmq

        with self._lock:
            if self._closed:
                return
            self._closed = True
            for sock in self._monitored:
                with contextlib.suppress(zmq.ZMQError):
                    sock.disable_monitor()
            for pair in self._pairs:
                pair.close(linger=0)
