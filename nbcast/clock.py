"""One injectable clock, so every component can be run and tested at any instant.

Components take a :class:`Clock` in their constructor and never call
``datetime.now()`` themselves. Processes started by tests get theirs from the
``NBCAST_CLOCK`` environment variable (see :func:`clock_from_env`):

- unset or ``system``: the real clock;
- ``fixed:2026-03-08T06:00:00Z``: time stands still at that instant;
- ``accelerated:2026-03-01T00:00:00Z:3600``: starts at that instant when the process
  starts and runs 3600 times faster than real time (sleeps are shortened to match),
  so a simulated month passes in minutes. Several processes given the same value
  and the same ``NBCAST_CLOCK_EPOCH`` (a real Unix time) agree on the simulated time.

Every instant a clock returns is timezone-aware UTC.
"""

from __future__ import annotations

import os
import threading
import time
from abc import ABC, abstractmethod
from datetime import UTC, datetime, timedelta

from nbcast.errors import ConfigError

__all__ = [
    "AcceleratedClock",
    "Clock",
    "FixedClock",
    "SystemClock",
    "clock_from_env",
    "format_instant",
    "parse_instant",
]


def parse_instant(text: str) -> datetime:
    """Parse an ISO 8601 instant that carries an offset or ``Z``; return it in UTC.

    A naive time is refused: an instant without an offset means different things in
    different places, and nbcast stores only UTC.
    """
    from nbcast.limits import WALL_TIME_MAX, WALL_TIME_MIN, clip, instant_in_range

    try:
        value = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"{clip(text)} is not an ISO 8601 instant") from None
    if value.tzinfo is None or value.utcoffset() is None:
        raise ConfigError(f"{clip(text)} has no UTC offset (add 'Z' or '+HH:MM')")
    if not instant_in_range(value):
        raise ConfigError(
            f"{clip(text)} is outside {WALL_TIME_MIN:%Y-%m-%d} .. {WALL_TIME_MAX:%Y-%m-%d} UTC"
        )
    return value.astimezone(UTC)


def format_instant(instant: datetime) -> str:
    """An instant as ISO 8601 UTC with ``Z`` (the form every command prints)."""
    return instant.astimezone(UTC).isoformat().replace("+00:00", "Z")


class Clock(ABC):
    """Where nbcast gets the current instant and how it waits.

    ``now()`` is timezone-aware UTC and never goes backwards within one clock.
    ``sleep(seconds)`` waits that many seconds of *this clock's* time, and returns
    early when ``wake()`` is called (used to stop services promptly).
    """

    def __init__(self) -> None:
        self._wake = threading.Event()

    @abstractmethod
    def now(self) -> datetime:
        """The current instant, timezone-aware UTC."""

    def sleep(self, seconds: float) -> None:
        """Wait ``seconds`` of clock time, or until :meth:`wake` is called."""
        if seconds > 0:
            self._wake.wait(self._real_seconds(seconds))
        self._wake.clear()

    def wake(self) -> None:
        """Make the current or next :meth:`sleep` return at once."""
        self._wake.set()

    def _real_seconds(self, seconds: float) -> float:
        return seconds

    @property
    def rate(self) -> float:
        """Clock seconds per real second while nobody moves the clock: 1 for the
        system clock, 0 for a fixed one, the factor for an accelerated one. Lets code
        running elsewhere (a server-side function) follow this clock for a moment."""
        return 1.0

    @property
    def real(self) -> bool:
        """Whether this is the machine's real clock (not simulated time)."""
        return False


class SystemClock(Clock):
    """The machine's real clock."""

    @property
    def real(self) -> bool:
        return True

    def now(self) -> datetime:
        return datetime.now(UTC)


class FixedClock(Clock):
    """A clock that moves only when told to: for tests.

    ``sleep`` advances it by the slept amount instead of waiting.
    """

    def __init__(self, start: datetime) -> None:
        super().__init__()
        if start.tzinfo is None:
            raise ConfigError("FixedClock needs a timezone-aware start")
        self._now = start.astimezone(UTC)
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def set(self, instant: datetime) -> None:
        """Jump to ``instant`` (never backwards)."""
        with self._lock:
            instant = instant.astimezone(UTC)
            if instant < self._now:
                raise ConfigError("a clock never goes backwards")
            self._now = instant

    def advance(self, delta: timedelta | float) -> datetime:
        """Move forward by ``delta`` (a timedelta or seconds); return the new now."""
        step = delta if isinstance(delta, timedelta) else timedelta(seconds=delta)
        if step < timedelta(0):
            raise ConfigError("a clock never goes backwards")
        with self._lock:
            self._now += step
            return self._now

    def sleep(self, seconds: float) -> None:
        if seconds > 0:
            self.advance(seconds)

    @property
    def rate(self) -> float:
        return 0.0


class AcceleratedClock(Clock):
    """Simulated time that starts at ``start`` and runs ``factor`` times real time.

    ``epoch`` is the real Unix time that corresponds to ``start``; processes that
    share ``start``, ``factor`` and ``epoch`` agree on the simulated instant.
    """

    def __init__(self, start: datetime, factor: float, epoch: float | None = None) -> None:
        super().__init__()
        if factor <= 0:
            raise ConfigError("an accelerated clock needs a positive factor")
        self.start = start.astimezone(UTC)
        self.factor = factor
        self.epoch = time.time() if epoch is None else epoch

    def now(self) -> datetime:
        from nbcast.limits import WALL_TIME_MAX

        # Simulated time stops at the end of nbcast's domain rather than overflowing.
        room = (WALL_TIME_MAX.replace(tzinfo=UTC) - self.start).total_seconds()
        elapsed = (time.time() - self.epoch) * self.factor
        return self.start + timedelta(seconds=min(max(elapsed, 0.0), max(room, 0.0)))

    def _real_seconds(self, seconds: float) -> float:
        return seconds / self.factor

    @property
    def rate(self) -> float:
        return self.factor


def clock_from_env(environ: dict[str, str] | None = None) -> Clock:
    """The clock the ``NBCAST_CLOCK`` variable asks for (module docstring)."""
    env = os.environ if environ is None else environ
    spec = env.get("NBCAST_CLOCK", "system").strip()
    if spec in ("", "system"):
        return SystemClock()
    kind, _, rest = spec.partition(":")
    if kind == "fixed":
        return FixedClock(parse_instant(rest))
    if kind == "accelerated":
        instant, sep, factor = rest.rpartition(":")
        if not sep:
            raise ConfigError("NBCAST_CLOCK=accelerated:<instant>:<factor>")
        try:
            speed = float(factor)
            epoch = float(env["NBCAST_CLOCK_EPOCH"]) if "NBCAST_CLOCK_EPOCH" in env else None
        except ValueError as exc:
            raise ConfigError(f"NBCAST_CLOCK: bad number in {spec!r}") from exc
        if not 0 < speed <= 1e9 or (epoch is not None and not 0 <= epoch < 1e11):
            raise ConfigError(f"NBCAST_CLOCK: factor or epoch out of range in {spec[:80]!r}")
        return AcceleratedClock(parse_instant(instant), speed, epoch)
    raise ConfigError(f"NBCAST_CLOCK: unknown clock {kind[:40]!r} (system, fixed, accelerated)")
