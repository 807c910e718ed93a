"""Property tests: the compiler against a brute-force reference, over the whole tz database.

The reference below does not share code with the compiler (only CronExpression's
parsed field sets). It walks every local wall minute around the window, asks zoneinfo
for both folds of each matching one, decides by round trips whether the minute is
normal, in a fold or in a gap, finds a gap's end by bisection on UTC seconds, and then
applies DESIGN.md's rules literally.
"""

from __future__ import annotations

from collections import Counter
from datetime import UTC, datetime, timedelta
from functools import lru_cache
from typing import Any
from zoneinfo import ZoneInfo, available_timezones

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from nbcast.definitions.compiler import Slot, compile_schedule
from nbcast.definitions.cron import CronExpression
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec

ZONES = sorted(available_timezones())
LIVELY = [
    "America/New_York",
    "Europe/Berlin",
    "Australia/Lord_Howe",
    "Africa/Cairo",
    "America/Santiago",
    "America/Havana",
    "Pacific/Apia",
    "Australia/Sydney",
    "Asia/Gaza",
    "America/Sitka",
    "Pacific/Kwajalein",
    "Asia/Manila",
]
MINUTE = timedelta(minutes=1)
SECOND = timedelta(seconds=1)
SETTINGS = settings(
    max_examples=200,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

Row = tuple[str, datetime, str, str | None]


# ----------------------------------------------------------------------------- reference


def _offset(zone: ZoneInfo, instant: datetime) -> timedelta | None:
    return instant.astimezone(zone).utcoffset()


def _gap_end(zone: ZoneInfo, before: datetime, after: datetime) -> datetime:
    """The first UTC second in (before, after] whose offset differs from before's."""
    first = _offset(zone, before)
    while after - before > SECOND:
        middle = before + ((after - before) // SECOND // 2) * SECOND
        if _offset(zone, middle) == first:
            before = middle
        else:
            after = middle
    return after


def _cron_matches(cron: CronExpression, wall: datetime) -> bool:
    return wall.minute in cron.minutes and wall.hour in cron.hours and cron.matches_day(wall)


def reference(
    cron_text: str,
    zone_name: str,
    gap: DstGap,
    fold: DstFold,
    low: datetime,
    high: datetime,
    start: datetime | None = None,
    end: datetime | None = None,
) -> list[Row]:
    """Every slot with low <= fire_at < high, by brute force over wall minutes."""
    cron = CronExpression.parse(cron_text)
    zone = ZoneInfo(zone_name)
    hourly = len(cron.hours) == 24
    if gap is DstGap.auto:
        gap = DstGap.skip if hourly else DstGap.shift
    if fold is DstFold.auto:
        fold = DstFold.both if hourly else DstFold.first
    wall = low.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0) - timedelta(days=2)
    last = high.astimezone(zone).replace(tzinfo=None) + timedelta(days=2)
    fired: list[Row] = []
    gaps: dict[datetime, list[str]] = {}
    while wall <= last:
        if (
            _cron_matches(cron, wall)
            and (start is None or wall >= start)
            and (end is None or wall <= end)
        ):
            key = wall.strftime("%Y-%m-%dT%H:%M")
            first_utc = wall.replace(tzinfo=zone, fold=0).astimezone(UTC)
            second_utc = wall.replace(tzinfo=zone, fold=1).astimezone(UTC)
            first_ok = first_utc.astimezone(zone).replace(tzinfo=None) == wall
            second_ok = second_utc.astimezone(zone).replace(tzinfo=None) == wall
            if first_ok and second_ok and first_utc != second_utc:
                passes = sorted([first_utc, second_utc])
                if fold is DstFold.first:
                    fired.append((key, passes[0], "scheduled", None))
                elif fold is DstFold.last:
                    fired.append((key, passes[1], "scheduled", None))
                else:
                    fired.append((key, passes[0], "scheduled", None))
                    fired.append((key + "~2", passes[1], "scheduled", None))
            elif first_ok or second_ok:
                fired.append((key, first_utc if first_ok else second_utc, "scheduled", None))
            else:
                # fold=1 reads a gap wall with the later offset: an instant before the gap.
                gaps.setdefault(_gap_end(zone, second_utc, first_utc), []).append(key)
        wall += MINUTE
    rows = list(fired)
    for instant, keys in gaps.items():
        own = any(row[1] == instant for row in fired)
        for index, key in enumerate(sorted(keys)):
            fires = gap is DstGap.shift and not own and index == 0
            rows.append(
                (key, instant, "scheduled" if fires else "skipped", None if fires else "dst_gap")
            )
    rows = [row for row in rows if low <= row[1] < high]
    return sorted(rows, key=lambda row: (row[1], row[0]))


# ----------------------------------------------------------------------------- strategies


@lru_cache(maxsize=4096)
def transitions_in(zone_name: str, year: int) -> tuple[datetime, ...]:
    """UTC instants (to the hour) where the zone's offset changes during ``year``."""
    zone = ZoneInfo(zone_name)
    day = datetime(year, 1, 1, tzinfo=UTC)
    found = []
    for _ in range(366):
        following = day + timedelta(days=1)
        if _offset(zone, day) != _offset(zone, following):
            hour = day
            while _offset(zone, hour) == _offset(zone, day):
                hour += timedelta(hours=1)
            found.append(hour)
        day = following
    return tuple(found)


def _token(draw: Any, low: int, high: int, names: list[str] | None) -> tuple[int, str]:
    value = draw(st.integers(low, high))
    if names and value - low < len(names) and draw(st.booleans()):
        return value, names[value - low]
    return value, str(value)


@st.composite
def cron_field(draw: Any, low: int, high: int, names: list[str] | None = None) -> str:
    """One cron field: a list of *, */S, N, A-B, A-B/S or A/S (names sometimes)."""
    items = []
    for _ in range(draw(st.integers(1, 3))):
        kind = draw(st.sampled_from(["*", "*/s", "n", "a-b", "a-b/s", "a/s"]))
        step = draw(st.integers(1, min(high - low + 1, 13)))
        a, a_text = _token(draw, low, high, names)
        _, b_text = _token(draw, a, high, None)
        if kind == "*":
            items.append("*")
        elif kind == "*/s":
            items.append(f"*/{step}")
        elif kind == "n":
            items.append(a_text)
        elif kind == "a-b":
            items.append(f"{a_text}-{b_text}")
        elif kind == "a-b/s":
            items.append(f"{a_text}-{b_text}/{step}")
        else:
            items.append(f"{a_text}/{step}")
    return ",".join(items)


MONTHS = ["jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec"]
DAYS = ["sun", "mon", "tue", "wed", "thu", "fri", "sat"]


def _mostly_star(field: st.SearchStrategy[str], stars: int) -> st.SearchStrategy[str]:
    return st.integers(0, 9).flatmap(lambda n: st.just("*") if n < stars else field)


@st.composite
def crons(draw: Any) -> str:
    """Random five-field cron expressions, often with every hour (the 'hourly' branch)."""
    minute = draw(st.one_of(st.just("*/15"), st.just("0,30"), cron_field(0, 59)))
    hour = draw(st.sampled_from(["*", "*", "0-3", "2", "23,0", "*/4"]) | cron_field(0, 23))
    dom = draw(_mostly_star(cron_field(1, 31), 7))
    month = draw(_mostly_star(cron_field(1, 12, MONTHS), 9))
    dow = draw(_mostly_star(cron_field(0, 7, DAYS), 7))
    return f"{minute} {hour} {dom} {month} {dow}"


@st.composite
def windows(draw: Any) -> tuple[str, datetime, datetime]:
    """A zone and a UTC window of up to three days, usually around a real transition."""
    zone = draw(st.sampled_from(LIVELY) | st.sampled_from(LIVELY) | st.sampled_from(ZONES))
    year = draw(st.integers(1970, 2040) | st.integers(1970, 2040) | st.integers(1850, 2100))
    around_transition = draw(st.sampled_from([True] * 9 + [False]))
    found: tuple[datetime, ...] = ()
    for candidate in range(year, year + 12 if around_transition else year):
        found = transitions_in(zone, candidate)
        if found:
            break
    if found:
        middle = draw(st.sampled_from(found))
        low = middle - draw(st.integers(0, 36 * 60) | st.integers(3 * 60, 36 * 60)) * MINUTE
        return zone, low, middle + draw(st.integers(3 * 60, 36 * 60)) * MINUTE
    low = datetime(year, 1, 1, tzinfo=UTC) + draw(st.integers(0, 364 * 24 * 60)) * MINUTE
    return zone, low, low + draw(st.integers(1, 72 * 60)) * MINUTE


def rows_of(slots: list[Slot]) -> list[Row]:
    return [(s.key, s.fire_at, s.status.value, s.reason) for s in slots]


def _spec(cron: str, zone: str, gap: DstGap, fold: DstFold, **kw: Any) -> ScheduleSpec:
    return ScheduleSpec(cron=cron, timezone=zone, dst_gap=gap, dst_fold=fold, **kw)


# ----------------------------------------------------------------------------- properties


@SETTINGS
@given(
    cron=crons(),
    window=windows(),
    gap=st.sampled_from(DstGap),
    fold=st.sampled_from(DstFold),
)
def test_compiler_matches_brute_force(
    cron: str, window: tuple[str, datetime, datetime], gap: DstGap, fold: DstFold
) -> None:
    zone, low, high = window
    slots = list(compile_schedule(_spec(cron, zone, gap, fold)).slots(low, high))
    assert rows_of(slots) == reference(cron, zone, gap, fold, low, high)
    event("slots", "none" if not slots else "some")
    event("dst gap", str(any(s.wall != s.local.replace(tzinfo=None) for s in slots)))
    event("dst fold", str(any(s.local.fold for s in slots)))
    _assert_invariants(slots, ZoneInfo(zone), fold, cron)


@settings(SETTINGS, max_examples=60)
@given(
    cron=crons(),
    window=windows(),
    gap=st.sampled_from(DstGap),
    fold=st.sampled_from(DstFold),
    bounds=st.tuples(st.integers(-36 * 60, 36 * 60), st.integers(0, 60 * 60)),
)
def test_start_and_end_bound_wall_times(
    cron: str,
    window: tuple[str, datetime, datetime],
    gap: DstGap,
    fold: DstFold,
    bounds: tuple[int, int],
) -> None:
    zone, low, high = window
    start = low.astimezone(ZoneInfo(zone)).replace(tzinfo=None) + bounds[0] * MINUTE
    end = start + bounds[1] * MINUTE
    compiled = compile_schedule(_spec(cron, zone, gap, fold, start=start, end=end))
    slots = list(compiled.slots(low, high))
    assert rows_of(slots) == reference(cron, zone, gap, fold, low, high, start, end)
    assert all(start <= s.wall <= end for s in slots)


def _assert_invariants(slots: list[Slot], zone: ZoneInfo, fold: DstFold, cron: str) -> None:
    order = [(s.fire_at, s.key) for s in slots]
    assert order == sorted(order)
    assert len(set(order)) == len(order), "(fire_at, key) must strictly increase"
    keys = [s.key for s in slots]
    assert len(set(keys)) == len(keys), "no key twice"
    for slot in slots:
        local = slot.fire_at.astimezone(zone)
        assert slot.local == local
        assert slot.local.utcoffset() == local.utcoffset()
        # Every fire instant's wall time exists: it round-trips through the zone.
        back = local.replace(tzinfo=None).replace(tzinfo=zone, fold=local.fold)
        assert back.astimezone(UTC) == slot.fire_at
        assert slot.key.removesuffix("~2") == slot.wall.strftime("%Y-%m-%dT%H:%M")
        assert (slot.status.value == "skipped") == (slot.reason == "dst_gap")
    effective = fold
    if fold is DstFold.auto:
        effective = DstFold.both if CronExpression.parse(cron).fires_at_least_hourly else fold
    if effective is not DstFold.both:
        assert keys == sorted(keys)


@settings(SETTINGS, max_examples=60)
@given(cron=crons(), window=windows(), fold=st.sampled_from(DstFold))
def test_every_matched_wall_time_appears_exactly_once(
    cron: str, window: tuple[str, datetime, datetime], fold: DstFold
) -> None:
    zone_name, low, high = window
    zone = ZoneInfo(zone_name)
    wide = compile_schedule(_spec(cron, zone_name, DstGap.auto, fold)).slots(
        low - timedelta(days=2), high + timedelta(days=2)
    )
    counts = Counter(s.key for s in wide)
    parsed = CronExpression.parse(cron)
    both = fold is DstFold.both or (fold is DstFold.auto and parsed.fires_at_least_hourly)
    wall = low.astimezone(zone).replace(tzinfo=None, second=0, microsecond=0)
    while wall < high.astimezone(zone).replace(tzinfo=None):
        key = wall.strftime("%Y-%m-%dT%H:%M")
        if _cron_matches(parsed, wall):
            assert counts[key] == 1, key
            first = wall.replace(tzinfo=zone, fold=0)
            second = wall.replace(tzinfo=zone, fold=1)
            ambiguous = first.utcoffset() > second.utcoffset()  # type: ignore[operator]
            assert counts[key + "~2"] == (1 if both and ambiguous else 0), key
        else:
            assert counts[key] == 0, key
        wall += MINUTE


@settings(SETTINGS, max_examples=60)
@given(
    cron=crons(),
    window=windows(),
    gap=st.sampled_from(DstGap),
    fold=st.sampled_from(DstFold),
    cut=st.floats(0, 1),
)
def test_adjacent_windows_partition_the_slots(
    cron: str, window: tuple[str, datetime, datetime], gap: DstGap, fold: DstFold, cut: float
) -> None:
    zone, low, high = window
    compiled = compile_schedule(_spec(cron, zone, gap, fold))
    middle = low + (high - low) * cut
    whole = rows_of(list(compiled.slots(low, high)))
    parts = rows_of(list(compiled.slots(low, middle)) + list(compiled.slots(middle, high)))
    assert whole == parts
    following = [row for row in whole if row[1] > low]
    if following:
        assert compiled.next_fire_after(low) == following[0][1]


@settings(SETTINGS, max_examples=100)
@given(
    every=st.integers(1, 6 * 60).map(lambda m: m * MINUTE),
    zone=st.sampled_from(LIVELY),
    anchor=st.integers(0, 10**6).map(lambda m: datetime(2020, 1, 1, tzinfo=UTC) + m * MINUTE),
    offset=st.integers(-(10**5), 10**5),
    span=st.integers(1, 5000),
)
def test_interval_slots_are_absolute(
    every: timedelta, zone: str, anchor: datetime, offset: int, span: int
) -> None:
    low = anchor + offset * MINUTE
    high = low + span * MINUTE
    compiled = compile_schedule(ScheduleSpec(every=every, timezone=zone), anchor=anchor)
    slots = list(compiled.slots(low, high))
    expected = []
    instant = anchor
    while instant < high:
        if instant >= low:
            expected.append(instant)
        instant += every
    assert [s.fire_at for s in slots] == expected
    for slot in slots:
        assert slot.key == slot.fire_at.strftime("%Y-%m-%dT%H:%M:%SZ")
        assert slot.local == slot.fire_at.astimezone(ZoneInfo(zone))
        assert slot.status.value == "scheduled"
        assert slot.reason is None
