"""The schedule compiler: a :class:`~nbcast.definitions.spec.ScheduleSpec` becomes slots.

A slot is one wall-clock time of a definition (DESIGN.md, "Schedules and slots").
:func:`compile_schedule` returns a :class:`CompiledSchedule` whose :meth:`~CompiledSchedule.slots`
lists every slot firing in a UTC window, in fire order, with its DST decision made.

How it works. Cron schedules are compiled **by local day**: a day's ``(hour, minute)``
pairs come straight from the cron's field sets. A day far (two days either side) from
any UTC-offset transition of the zone is *ordinary*: every wall time exists once and
maps to UTC by one fixed offset, so its slots are built with datetime arithmetic alone.
Days near a transition are built from the zone's exact constant-offset periods: a wall
time inside one period exists once, inside two is a fold, inside none is a gap. Only
those days touch zoneinfo per slot. Transitions are found by sampling the zone's offset
once per UTC day and bisecting to the second, 32 UTC days at a time, cached per
(zone, block); nothing here uses croniter.

Decisions where DESIGN.md is silent (each is tested):

- *Gap slots.* A wall time that does not exist becomes a gap slot whose ``fire_at`` is
  the transition instant that ends the gap (the first instant after it) and whose
  ``local`` is that instant in the zone, **whatever the policy** — a skipped slot is
  recorded at the moment it would have fired under ``shift``. So all slots of one gap
  share one ``fire_at`` and sort by key; the earliest is the one ``shift`` fires.
- *Own slot at the gap's end.* Under ``shift`` the earliest gap slot is SKIPPED too when
  the schedule has its own scheduled slot (inside ``start``/``end``, under the fold
  policy in force) firing at exactly the transition instant.
- *start/end* are compared with a cron slot's wall time (both passes of a fold share
  one), inclusive at both ends; the earliest gap slot "in the gap" is the earliest one
  that ``start``/``end`` keep.
- *Interval (``every``) schedules* are absolute: slots fire at ``anchor + k * every``.
  The anchor is ``start`` read as a wall time in the zone (an ambiguous ``start`` takes
  its first pass; a nonexistent one its pre-transition offset, as PEP 495 ``fold=0``
  does), or the Unix epoch 1970-01-01T00:00:00Z without ``start`` — so ``every: 15m``
  fires at :00/:15/:30/:45 UTC. Microseconds of the anchor are dropped. ``every`` must
  be whole seconds and at least one minute (the metadata rule). ``start`` and ``end``
  bound interval slots as instants: ``end`` is read at its last pass, inclusive. An
  interval slot's ``wall`` is its local time without zone.
- *At least hourly*: a cron whose hour field has all 24 hours; an interval of at most
  one hour. The same test resolves ``auto`` for both kinds.
- *Fire order* is ``(fire_at, key)``. Fire times are whole seconds (transition instants
  of local-mean-time eras may carry odd seconds); window bounds with microseconds are
  rounded up, so ``start <= fire_at < end`` holds exactly.
- *next_fire_after* returns the next slot of any status: a SKIPPED slot is still a row
  the materializer writes at its fire time. ``None`` when no slot ever follows (a cron
  that names no real day, such as ``0 0 30 2 *``, or past ``end``).
- *Domain*: the compiler works between 1800-01-01 and 9000-01-01 UTC; a window is
  clipped to that.
- *Assumptions about tzdata* (true for every zone of tzdata 2025b/2026f): offsets change
  at most once in any 24 hours (the closest pair is ~4 days apart), and no transition
  moves clocks by 24 hours or more. A fold deeper than one pass back (three passes of
  one wall time) is never produced; ``last`` and ``both`` would use the outermost passes.
"""

from __future__ import annotations

import bisect
from abc import ABC, abstractmethod
from collections.abc import Iterator
from dataclasses import dataclass, replace
from datetime import UTC, date, datetime, timedelta
from enum import StrEnum
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from nbcast.definitions.cron import CronExpression
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.definitions.transitions import DAY, Neighbourhood, offset_at, transitions
from nbcast.errors import ScheduleError

__all__ = [
    "CompiledSchedule",
    "CronSchedule",
    "IntervalSchedule",
    "Slot",
    "SlotReason",
    "SlotStatus",
    "compile_schedule",
    "interval_schedule",
    "load_zone",
]


_SECOND = timedelta(seconds=1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_EPOCH_ORDINAL = date(1970, 1, 1).toordinal()
_MIN_SECONDS = (datetime(1800, 1, 1, tzinfo=UTC) - _EPOCH_UTC) // _SECOND
_MAX_SECONDS = (datetime(9000, 1, 1, tzinfo=UTC) - _EPOCH_UTC) // _SECOND
_HOUR = timedelta(hours=1)
_QUIET_REACH = 64 * DAY  # how far one quiet-interval look-up searches each way


class SlotStatus(StrEnum):
    """What the materializer records for a slot."""

    scheduled = "scheduled"
    """The slot fires: the scheduler queues a run at ``fire_at``."""
    skipped = "skipped"
    """The slot is recorded SKIPPED with its ``reason`` (``dst_gap``)."""


class SlotReason(StrEnum):
    """Why a slot is recorded without running (the ``reason`` of a SKIPPED or MISSED row)."""

    dst_gap = "dst_gap"
    """The wall time does not exist (spring forward) and the gap policy skips it."""
    misfire = "misfire"
    """Materialized past fire time + grace under misfire policy ``skip``."""
    superseded = "superseded"
    """Missed, and a newer due slot runs instead (``run_latest``)."""
    catchup_cap = "catchup_cap"
    """Missed beyond ``max_catchup`` (``run_all``)."""
    overlap = "overlap"
    """An earlier run of the definition was still queued or running."""
    paused = "paused"
    """It fell while the definition was paused (recorded on resume)."""


@dataclass(frozen=True, slots=True)
class Slot:
    """One wall-clock time of a schedule, and when and whether it fires.

    ``key`` is unique per definition: the local wall time ``YYYY-MM-DDTHH:MM`` for cron
    (``~2`` appended for the second pass of a fold kept under ``both``), the UTC instant
    ``YYYY-MM-DDTHH:MM:SSZ`` for ``every``. ``wall`` is the naive wall time the cron
    matched (it may not exist, for a gap slot); ``local`` is the aware time in the zone
    at which it fires; ``fire_at`` is that instant in UTC.
    """

    key: str
    wall: datetime
    local: datetime
    fire_at: datetime
    status: SlotStatus
    reason: str | None


def load_zone(name: str) -> ZoneInfo:
    """The IANA zone ``name``; :class:`~nbcast.errors.ScheduleError` if there is none."""
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError, TypeError):
        raise ScheduleError(f"timezone: {name!r} is not an IANA time zone") from None


# --------------------------------------------------------------------------- schedules


def _utc(seconds: int) -> datetime:
    return _EPOCH_UTC + timedelta(seconds=seconds)


def _ceil_seconds(instant: datetime) -> int:
    """Whole UTC seconds since the epoch, rounded up, of an aware datetime."""
    if instant.tzinfo is None or instant.utcoffset() is None:
        raise ScheduleError(f"{instant.isoformat()} is not a timezone-aware instant")
    return -((_EPOCH_UTC - instant) // _SECOND)


def _wall_seconds(wall: datetime, *, up: bool) -> int:
    if wall.tzinfo is not None:
        raise ScheduleError(f"{wall.isoformat()}: start and end are naive local wall times")
    if up:
        return -((_EPOCH_NAIVE - wall) // _SECOND)
    return (wall - _EPOCH_NAIVE) // _SECOND


class CompiledSchedule(ABC):
    """A schedule ready to list its slots.

    Contract: :meth:`slots` yields every slot with ``start <= fire_at < end`` exactly
    once, ordered by ``(fire_at, key)``; the same slot (same key) always gets the same
    ``fire_at``, status and reason, whatever window asks for it, so the materializer
    may walk any sequence of adjacent windows. ``gap_policy`` and ``fold_policy`` are the
    effective policies (``auto`` resolved with ``fires_at_least_hourly``).
    """

    zone: ZoneInfo
    fires_at_least_hourly: bool
    gap_policy: DstGap
    fold_policy: DstFold

    def __init__(
        self, zone: ZoneInfo, hourly: bool, gap: DstGap = DstGap.auto, fold: DstFold = DstFold.auto
    ) -> None:
        self.zone = zone
        self.fires_at_least_hourly = hourly
        gap, fold = DstGap(gap), DstFold(fold)
        if gap is DstGap.auto:
            gap = DstGap.skip if hourly else DstGap.shift
        if fold is DstFold.auto:
            fold = DstFold.both if hourly else DstFold.first
        self.gap_policy = gap
        self.fold_policy = fold

    def slots(self, start: datetime, end: datetime) -> Iterator[Slot]:
        """Every slot with ``start <= fire_at < end`` (aware instants), in fire order.

        The window is checked at once (a naive instant raises ScheduleError here, not
        on first iteration); slots are produced lazily.
        """
        low = max(_ceil_seconds(start), _MIN_SECONDS)
        high = min(_ceil_seconds(end), _MAX_SECONDS)
        return self._slots(low, high)

    @abstractmethod
    def _slots(self, low: int, high: int) -> Iterator[Slot]:
        """Slots firing in ``[low, high)`` (UTC seconds), in fire order."""

    def next_fire_after(self, instant: datetime) -> datetime | None:
        """The first ``fire_at`` later than ``instant`` (any status), or ``None`` if none."""
        low = max(_ceil_seconds(instant + timedelta(microseconds=1)), _MIN_SECONDS)
        # Start with a small window: the next slot of a frequent schedule is near, and
        # windows grow fourfold, so a yearly one still needs only a few steps.
        span = 3600
        while low < _MAX_SECONDS and low < self._last_possible_fire():
            high = min(low + span, _MAX_SECONDS)
            for slot in self.slots(_utc(low), _utc(high)):
                return slot.fire_at
            low, span = high, span * 4
        return None

    def _last_possible_fire(self) -> int:
        return _MAX_SECONDS


@lru_cache(maxsize=4096)
def _day_times(
    hours: tuple[int, ...], minutes: tuple[int, ...]
) -> tuple[tuple[int, ...], tuple[str, ...], tuple[timedelta, ...]]:
    """A day's firing times (seconds of day, ``HH:MM`` labels, offsets from midnight).

    Shared by every schedule with the same hour and minute fields: 100,000
    definitions use a handful of distinct ones.
    """
    pairs = [(h, m) for h in hours for m in minutes]
    sods = tuple(h * 3600 + m * 60 for h, m in pairs)
    return (
        sods,
        tuple(f"{h:02d}:{m:02d}" for h, m in pairs),
        tuple(timedelta(seconds=x) for x in sods),
    )


class CronSchedule(CompiledSchedule):
    """A cron expression read on local wall time in ``zone``, with DST policies applied.

    ``start`` and ``end`` are the spec's naive wall-time bounds (inclusive), or ``None``.
    """

    def __init__(
        self,
        cron: CronExpression,
        zone: ZoneInfo,
        *,
        gap: DstGap = DstGap.auto,
        fold: DstFold = DstFold.auto,
        start: datetime | None = None,
        end: datetime | None = None,
    ) -> None:
        super().__init__(zone, cron.fires_at_least_hourly, gap, fold)
        self.cron = cron
        self.start = start
        self.end = end
        self._first_wall = _MIN_SECONDS if start is None else _wall_seconds(start, up=True)
        self._last_wall = _MAX_SECONDS if end is None else _wall_seconds(end, up=False)
        self._sods, self._labels, self._deltas = _day_times(cron.hours, cron.minutes)
        self._months = frozenset(cron.months)
        self._doms = frozenset(cron.days)
        self._dows = frozenset(cron.weekdays)
        self._day_and = cron.dom_star or cron.dow_star
        self._hour_set = frozenset(cron.hours)
        self._minute_set = frozenset(cron.minutes)
        self._fires_ever = _names_a_real_day(cron)
        self._quiet = (0, -1, 0)  # (low, high, offset): no transition in (low, high]

    # ---- day matching

    def _matches(self, day: date) -> bool:
        if day.month not in self._months:
            return False
        dom = day.day in self._doms
        dow = day.isoweekday() % 7 in self._dows
        return (dom and dow) if self._day_and else (dom or dow)

    def _matches_wall(self, wall: int) -> bool:
        if wall % 60:
            return False
        day, sod = divmod(wall, DAY)
        return (
            sod // 3600 in self._hour_set
            and sod // 60 % 60 in self._minute_set
            and self._matches(date.fromordinal(day + _EPOCH_ORDINAL))
        )

    def _last_possible_fire(self) -> int:
        if not self._fires_ever:
            return _MIN_SECONDS
        return min(self._last_wall + DAY, _MAX_SECONDS)

    # ---- the quiet-interval cache: is a day far from every transition?

    def _quietoffset_at(self, middle: int) -> int | None:
        """The zone's offset if no transition lies within two days of day ``middle``."""
        low, high, offset = self._quiet
        if not (low <= middle - 2 * DAY and middle + 3 * DAY <= high):
            around = transitions(self.zone, middle - _QUIET_REACH, middle + _QUIET_REACH)
            starts = [t.at for t in around]
            i = bisect.bisect_right(starts, middle)
            low = starts[i - 1] if i else middle - _QUIET_REACH
            high = starts[i] - 1 if i < len(starts) else middle + _QUIET_REACH
            self._quiet = (low, high, offset_at(self.zone, middle))
            low, high, offset = self._quiet
            if not (low <= middle - 2 * DAY and middle + 3 * DAY <= high):
                return None
        return offset

    # ---- slots

    def _slots(self, low: int, high: int) -> Iterator[Slot]:
        if low >= high or not self._fires_ever:
            return
        # A day's slots fire within (midnight - 1 day, midnight + 2 days) of its wall.
        first = max(low // DAY - 2, self._first_wall // DAY)
        last = min(high // DAY + 1, self._last_wall // DAY)
        run: list[int] = []  # days near a transition, built together for order and gaps
        for day_number in range(first, last + 1):
            day = date.fromordinal(day_number + _EPOCH_ORDINAL)
            if not self._matches(day):
                continue
            midnight = day_number * DAY
            offset = self._quietoffset_at(midnight)
            if offset is None:
                run.append(day_number)
                continue
            if run:
                yield from self._transition_slots(run, low, high)
                run = []
            yield from self._ordinary_slots(day, midnight, offset, low, high)
        if run:
            yield from self._transition_slots(run, low, high)

    def _ordinary_slots(
        self, day: date, midnight: int, offset: int, low: int, high: int
    ) -> Iterator[Slot]:
        base = midnight - offset
        sods = self._sods
        i = bisect.bisect_left(sods, max(low - base, self._first_wall - midnight))
        j = bisect.bisect_left(sods, min(high - base, self._last_wall - midnight + 1))
        if i >= j:
            return
        wall0 = datetime(day.year, day.month, day.day)
        local0 = wall0.replace(tzinfo=self.zone)
        fire0 = _utc(base)
        prefix = day.isoformat() + "T"
        labels, deltas = self._labels, self._deltas
        scheduled = SlotStatus.scheduled
        for k in range(i, j):
            delta = deltas[k]
            yield Slot(
                prefix + labels[k], wall0 + delta, local0 + delta, fire0 + delta, scheduled, None
            )

    def _transition_slots(self, days: list[int], low: int, high: int) -> Iterator[Slot]:
        """Slots of consecutive days near transitions, with gap and fold rules applied."""
        hood = Neighbourhood(self.zone, days[0] * DAY - 2 * DAY, days[-1] * DAY + 3 * DAY)
        out: list[Slot] = []
        gaps: dict[int, list[tuple[str, datetime]]] = {}
        fold = self.fold_policy
        # Every instant of a wall time (and a gap's end) lies within [wall - largest
        # offset, wall - smallest offset], so walls that cannot fire inside the window
        # are passed over by bisection instead of being classified one by one.
        offsets = [p.offset for p in hood.periods]
        smallest, largest = min(offsets), max(offsets)
        sods, labels, deltas = self._sods, self._labels, self._deltas
        for day_number in days:
            midnight = day_number * DAY
            i = bisect.bisect_left(sods, low + smallest - midnight)
            j = bisect.bisect_left(sods, high + largest - midnight)
            if i >= j:
                continue
            day = date.fromordinal(day_number + _EPOCH_ORDINAL)
            wall0 = datetime(day.year, day.month, day.day)
            prefix = day.isoformat() + "T"
            for k in range(i, j):
                sod, label, delta = sods[k], labels[k], deltas[k]
                wall = midnight + sod
                if not self._first_wall <= wall <= self._last_wall:
                    continue
                key = prefix + label
                instants = hood.instants(wall)
                if not instants:
                    gaps.setdefault(hood.gap_end(wall), []).append((key, wall0 + delta))
                    continue
                if len(instants) == 1 or fold is DstFold.first:
                    picks = [(instants[0], key)]
                elif fold is DstFold.last:
                    picks = [(instants[-1], key)]
                else:
                    picks = [(instants[0], key), (instants[-1], key + "~2")]
                for fire, name in picks:
                    if low <= fire < high:
                        out.append(self._slot(name, wall0 + delta, fire, SlotStatus.scheduled))
        for end, members in gaps.items():
            if not low <= end < high:
                continue
            members.sort()
            shifted = self.gap_policy is DstGap.shift and not self._own_slot_at(end)
            for index, (key, gap_wall) in enumerate(members):
                status = SlotStatus.scheduled if shifted and index == 0 else SlotStatus.skipped
                out.append(self._slot(key, gap_wall, end, status))
        out.sort(key=lambda s: (s.fire_at, s.key))
        yield from out

    def _slot(self, key: str, wall: datetime, fire: int, status: SlotStatus) -> Slot:
        # Only gap slots are ever skipped; a shifted gap slot fires, so it has no reason.
        reason = SlotReason.dst_gap if status is SlotStatus.skipped else None
        return Slot(key, wall, datetime.fromtimestamp(fire, self.zone), _utc(fire), status, reason)

    def _own_slot_at(self, end: int) -> bool:
        """Whether a non-gap slot of this schedule is scheduled at the instant ``end``."""
        hood = Neighbourhood(self.zone, end - 2 * DAY, end + 2 * DAY)
        wall = end + offset_at(self.zone, end)
        if not (self._first_wall <= wall <= self._last_wall and self._matches_wall(wall)):
            return False
        instants = hood.instants(wall)
        if not instants:
            return False
        if len(instants) == 1 or self.fold_policy is DstFold.first:
            chosen = [instants[0]]
        elif self.fold_policy is DstFold.last:
            chosen = [instants[-1]]
        else:
            chosen = [instants[0], instants[-1]]
        return end in chosen


def _names_a_real_day(cron: CronExpression) -> bool:
    """Whether some calendar day ever matches (``0 0 30 2 *`` never does)."""
    if not (cron.dom_star or cron.dow_star):
        return True  # either field may match, and every month has every weekday
    longest = {1: 31, 2: 29, 3: 31, 4: 30, 5: 31, 6: 30, 7: 31, 8: 31, 9: 30, 10: 31, 11: 30}
    # Over the 400-year Gregorian cycle each (month, day) falls on every weekday.
    return any(d <= longest.get(m, 31) for m in cron.months for d in cron.days)


class IntervalSchedule(CompiledSchedule):
    """``every`` schedules: absolute instants ``anchor + k * every``, never DST-affected.

    With an ``anchor`` (an aware instant) no slot fires before it; without one, slots are
    counted from the Unix epoch and unbounded below. ``not_after`` is an inclusive
    upper bound.
    """

    def __init__(
        self,
        every: timedelta,
        zone: ZoneInfo,
        *,
        anchor: datetime | None = None,
        not_after: datetime | None = None,
        gap: DstGap = DstGap.auto,
        fold: DstFold = DstFold.auto,
    ) -> None:
        if every < timedelta(minutes=1) or every % _SECOND:
            raise ScheduleError(f"every: {every} must be whole seconds and at least 1m")
        super().__init__(zone, every <= _HOUR, gap, fold)
        self.every = every
        self._step = every // _SECOND
        self._bounded = anchor is not None
        self._anchor = 0 if anchor is None else (anchor - _EPOCH_UTC) // _SECOND
        self._last = _MAX_SECONDS if not_after is None else (not_after - _EPOCH_UTC) // _SECOND

    @property
    def anchor(self) -> datetime:
        """The UTC instant slots are counted from."""
        return _utc(self._anchor)

    def _last_possible_fire(self) -> int:
        return min(self._last + 1, _MAX_SECONDS)

    def _slots(self, low: int, high: int) -> Iterator[Slot]:
        if self._bounded:
            low = max(low, self._anchor)
        high = min(high, self._last + 1)
        k = -((self._anchor - low) // self._step)
        fire = self._anchor + k * self._step
        step = timedelta(seconds=self._step)
        naive = _EPOCH_NAIVE + timedelta(seconds=fire)  # the UTC wall, for a cheap key
        zone = self.zone
        scheduled = SlotStatus.scheduled
        while fire < high:
            instant = naive.replace(tzinfo=UTC)
            local = instant.astimezone(zone)
            yield Slot(
                naive.isoformat() + "Z", local.replace(tzinfo=None), local, instant, scheduled, None
            )
            fire += self._step
            naive += step


def compile_schedule(spec: ScheduleSpec, *, anchor: datetime | None = None) -> CompiledSchedule:
    """Compile ``spec``; :class:`~nbcast.errors.ScheduleError` says what is wrong with it.

    ``anchor`` (an aware instant) replaces ``spec.start`` as the anchor and lower bound
    of an interval schedule — for callers that hold an instant, not a wall time.
    """
    zone = load_zone(spec.timezone)
    if (spec.cron is None) == (spec.every is None):
        raise ScheduleError("schedule: needs exactly one of cron or every")
    if (
        spec.start is not None
        and spec.end is not None
        and _wall_seconds(spec.end, up=False) < _wall_seconds(spec.start, up=True)
    ):
        raise ScheduleError("schedule: end is before start")
    try:
        gap, fold = DstGap(spec.dst_gap), DstFold(spec.dst_fold)
    except ValueError as exc:
        raise ScheduleError(f"schedule.dst: {exc}") from None
    if spec.cron is not None:
        if anchor is not None:
            raise ScheduleError("schedule: an anchor applies to every schedules only")
        return CronSchedule(
            CronExpression.parse(spec.cron),
            zone,
            gap=gap,
            fold=fold,
            start=spec.start,
            end=spec.end,
        )
    assert spec.every is not None
    if anchor is not None:
        _ceil_seconds(anchor)
        first: datetime | None = anchor.astimezone(UTC)
    elif spec.start is not None:
        _wall_seconds(spec.start, up=True)
        first = spec.start.replace(tzinfo=zone, fold=0).astimezone(UTC)
    else:
        first = None
    last = None
    if spec.end is not None:
        _wall_seconds(spec.end, up=False)
        last = spec.end.replace(tzinfo=zone, fold=1).astimezone(UTC)
    return IntervalSchedule(spec.every, zone, anchor=first, not_after=last, gap=gap, fold=fold)


def interval_schedule(schedule: ScheduleSpec) -> CompiledSchedule:
    """The schedule whose slots define intervals: without ``start``/``end``, so the
    first slot's previous one exists (:mod:`nbcast.scheduler.period`)."""
    if schedule.cron is not None and (schedule.start is not None or schedule.end is not None):
        return compile_schedule(replace(schedule, start=None, end=None))
    return compile_schedule(schedule)
