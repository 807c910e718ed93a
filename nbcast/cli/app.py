"""The typed state one ``nbcast`` invocation shares between its commands.

:class:`AppContext` opens the database and reads the clock lazily, so that a command
which needs neither (``schedule preview``, ``--help``) starts fast and touches no
file. :data:`INSTANT` is the parameter type of every instant on the command line.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from nbcast.config import Settings
from nbcast.errors import ConfigError

if TYPE_CHECKING:
    from nbcast.access import Caller
    from nbcast.clock import Clock
    from nbcast.db import Database

__all__ = [
    "INSTANT",
    "VERSION",
    "AppContext",
    "InstantType",
    "Seconds",
    "configure_logging",
    "pass_app",
    "supervise",
]


@dataclass
class AppContext:
    """Lazily opened state shared by the commands of one invocation."""

    settings: Settings
    _db: Database | None = field(default=None, repr=False)
    _clock: Clock | None = field(default=None, repr=False)

    @property
    def caller(self) -> Caller:
        """Who the command acts for: the OS user ``NBCAST_USER`` in the tenant named (or
        default) — an OS identity, never a jupyter-server user's (``NBCAST_USER`` that
        begins ``jupyter:`` is refused: :mod:`nbcast.access`); what they may do there
        is the command layer's to check (:mod:`nbcast.tenancy.roles`)."""
        from nbcast.access import Caller, Source

        try:
            return Caller.of(tenant=self.settings.tenant, name=self.settings.user, source=Source.os)
        except ConfigError as exc:
            raise ConfigError(f"NBCAST_USER: {exc}") from None

    @property
    def clock(self) -> Clock:
        """The clock (``NBCAST_CLOCK``; the real one by default)."""
        if self._clock is None:
            from nbcast.clock import clock_from_env

            self._clock = clock_from_env()
        return self._clock

    @property
    def db(self) -> Database:
        """The database, opened (and migrated) on first use; the home made private."""
        if self._db is None:
            from nbcast.config import prepare_home
            from nbcast.db import Database

            prepare_home(self.settings.home)
            self._db = Database.open(
                self.settings.database_url, owner_url=self.settings.database_owner_url
            )
        return self._db


pass_app = click.make_pass_decorator(AppContext)
pass_app.__doc__ = "Pass the command's :class:`AppContext` as its first argument."


class InstantType(click.ParamType):  # type: ignore[type-arg]
    """An ISO 8601 instant with an offset or ``Z``; a bad one exits with status 2."""

    name = "INSTANT"

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> datetime:
        """Parse ``value`` (:func:`nbcast.clock.parse_instant`), failing the command."""
        if isinstance(value, datetime):
            return value
        from nbcast.clock import parse_instant

        try:
            return parse_instant(str(value))
        except ConfigError as exc:
            self.fail(str(exc), param, ctx)


INSTANT = InstantType()
"""The parameter type of instants: ``--from 2026-03-08T07:00:00Z``."""


class DayOrInstantType(InstantType):
    """An instant, or a bare ISO date (``2026-10-05``): the start of that day in the
    zone of the schedule the command works on
    (:func:`nbcast.definitions.transitions.range_bound`)."""

    name = "DATE|INSTANT"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        """A :class:`datetime.date` for ``YYYY-MM-DD``, else an instant."""
        import re
        from datetime import date

        if isinstance(value, date):
            return value
        text = str(value).strip()
        if re.fullmatch(r"\d{4}-\d{2}-\d{2}", text):
            try:
                day = date.fromisoformat(text)
            except ValueError:
                self.fail(f"{text} is not a calendar date", param, ctx)
            from nbcast.limits import WALL_TIME_MAX, WALL_TIME_MIN

            if not WALL_TIME_MIN.date() < day < WALL_TIME_MAX.date():
                self.fail(
                    f"{text} is outside {WALL_TIME_MIN:%Y-%m-%d} .. {WALL_TIME_MAX:%Y-%m-%d}",
                    param,
                    ctx,
                )
            return day
        return super().convert(text, param, ctx)


DAY_OR_INSTANT = DayOrInstantType()
"""Range ends of backfills and previews: ``--from 2026-10-05`` or an instant."""


def configure_logging() -> None:
    """Services log to stderr: text, or JSON lines with ``NBCAST_LOG_FORMAT=json``
    (:mod:`nbcast.logs`)."""
    from nbcast.logs import configure_logging as configure

    configure()


def supervise(app: AppContext, service: Any) -> None:
    """Run ``service`` (a :class:`~nbcast.daemon.Service`) under a supervisor with
    signal handlers; ``NBCAST_HEARTBEAT_SECONDS`` (0.1 to 3,600, default 5) sets how
    often its heartbeat row is written (default :data:`~nbcast.daemon.DEFAULT_HEARTBEAT_S`)."""
    import math
    import os

    from nbcast.credentials import protect_process
    from nbcast.daemon import DEFAULT_HEARTBEAT_S, Supervisor

    configure_logging()
    protect_process()  # no process of the same user reads our environment or memory
    text = os.environ.get("NBCAST_HEARTBEAT_SECONDS", "").strip() or str(DEFAULT_HEARTBEAT_S)
    try:
        every = float(text)
    except ValueError:
        every = math.nan
    if not 0.1 <= every <= 3600:
        raise ConfigError(f"NBCAST_HEARTBEAT_SECONDS: {text[:40]!r} is not 0.1 to 3600 seconds")
    supervisor = Supervisor(app.db, app.clock, service, heartbeat_every=every)
    supervisor.install_signal_handlers()
    supervisor.run()


class Seconds(click.ParamType):  # type: ignore[type-arg]
    """A finite number of seconds within ``[low, high]`` (NaN and infinities refused)."""

    name = "SECONDS"

    def __init__(self, low: float, high: float) -> None:
        self.low = low
        self.high = high

    def convert(
        self, value: Any, param: click.Parameter | None, ctx: click.Context | None
    ) -> float:
        """``value`` as float seconds, or fail the command naming the range."""
        import math

        try:
            number = float(value)
        except (TypeError, ValueError):
            number = math.nan
        if not (math.isfinite(number) and self.low <= number <= self.high):
            self.fail(
                f"{str(value)[:40]!r} is not a number of seconds from {self.low:g} "
                f"to {self.high:g}",
                param,
                ctx,
            )
        return number


VERSION = click.IntRange(1, 2**31 - 1)
"""A version number (also keeps a 20-digit number from reaching the database)."""
