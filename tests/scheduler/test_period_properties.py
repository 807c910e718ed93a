"""Properties of run periods and slot bindings, over random schedules, zones with
odd DST histories and random bindings:

- the data intervals of consecutive slots that fire tile time: no gap, no overlap,
  across DST folds and gaps (New York, Lord Howe's half-hour shift, Santiago, Apia
  skipping 30 December 2011); a slot skipped for a gap hands its time on;
- a slot's period does not depend on which window or chunk computed it (a late run, a
  retry, a backfill all see the same);
- resolved bindings equal an independent computation that walks the calendar day by
  day.
"""

from __future__ import annotations

import itertools
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

import holidays
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nbcast.definitions.bindings import Period, parse_binding, resolve
from nbcast.definitions.compiler import SlotStatus, compile_schedule, interval_schedule
from nbcast.definitions.spec import ScheduleSpec
from nbcast.scheduler.period import slot_periods

ZONES = [
    "America/New_York",
    "Australia/Lord_Howe",
    "America/Santiago",
    "Pacific/Apia",
    "Europe/Berlin",
    "UTC",
]
WINDOWS = [
    datetime(2011, 12, 20, tzinfo=UTC),  # Apia skips 30 December 2011
    datetime(2026, 3, 1, tzinfo=UTC),  # northern spring forward
    datetime(2026, 3, 28, tzinfo=UTC),  # southern fall back (Lord Howe, Santiago)
    datetime(2026, 9, 1, tzinfo=UTC),  # southern spring forward
    datetime(2026, 10, 20, tzinfo=UTC),  # northern fall back
]
PROPERTY = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def crons(draw: st.DrawFn) -> str:
    minute = draw(st.sampled_from(["0", "30", "*/15", "0,45", "5"]))
    hour = draw(st.sampled_from(["*", "*/2", "1", "2", "0-3", "7", "22"]))
    dom = draw(st.sampled_from(["*", "*", "1", "15", "29-31"]))
    dow = draw(st.sampled_from(["*", "*", "1-5", "0", "mon,thu"]))
    return f"{minute} {hour} {dom} * {dow}"


@st.composite
def schedules(draw: st.DrawFn) -> ScheduleSpec:
    zone = draw(st.sampled_from(ZONES))
    if draw(st.integers(0, 5)) == 0:
        return ScheduleSpec(
            every=timedelta(minutes=draw(st.sampled_from([30, 90, 240]))), timezone=zone
        )
    return ScheduleSpec(
        cron=draw(crons()),
        timezone=zone,
        dst_gap=draw(st.sampled_from(["auto", "shift", "skip"])),
        dst_fold=draw(st.sampled_from(["auto", "first", "last", "both"])),
    )


def _utc(moment: datetime) -> datetime:
    return moment.astimezone(UTC)


@PROPERTY
@given(
    spec=schedules(),
    start=st.sampled_from(WINDOWS),
    days=st.integers(1, 20),
    cut=st.integers(0, 50),
)
@example(  # Santiago falls back at 2026-04-05 00:00: a half-hourly slot in the fold
    spec=ScheduleSpec(every=timedelta(minutes=30), timezone="America/Santiago"),
    start=datetime(2026, 3, 28, tzinfo=UTC),
    days=9,
    cut=0,
)
def test_intervals_tile_time_and_do_not_depend_on_the_window(
    spec: ScheduleSpec, start: datetime, days: int, cut: int
) -> None:
    schedule = interval_schedule(spec)
    zone = ZoneInfo(spec.timezone)
    slots = list(schedule.slots(start, start + timedelta(days=days)))
    periods = slot_periods(schedule, zone, slots)
    # Compared as UTC instants: datetimes of one zone compare by wall time and
    # ignore ``fold``, so 23:30 (first pass) would wrongly sort after 23:00 (second).
    for slot, period in zip(slots, periods, strict=True):
        assert _utc(period.nominal) == _utc(slot.local)
        assert _utc(period.interval_end) == _utc(slot.local)
        assert _utc(period.interval_start) <= _utc(period.interval_end)
    # The slots that fire tile time: no gap, no overlap; a slot skipped for a DST gap
    # hands its time on to the next one that fires.
    fired = [
        p for slot, p in zip(slots, periods, strict=True) if slot.status is not SlotStatus.skipped
    ]
    for before, after in itertools.pairwise(fired):
        assert _utc(after.interval_start) == _utc(before.interval_end)
    # Split anywhere (another pass, a late tick, a backfill): the same periods.
    if slots:
        split = min(cut, len(slots) - 1)
        again = slot_periods(schedule, zone, slots[:split]) + slot_periods(
            schedule, zone, slots[split:]
        )
        assert again == periods
        # The first slot's previous one, found independently by walking back.
        if spec.cron is not None:
            earlier = list(schedule.slots(slots[0].fire_at - timedelta(days=400), slots[0].fire_at))
            earlier += [
                s
                for s in schedule.slots(
                    slots[0].fire_at, slots[0].fire_at + timedelta(microseconds=1)
                )
                if s.key < slots[0].key
            ]
            earlier = [s for s in earlier if s.status is not SlotStatus.skipped]
            if earlier:
                assert periods[0].interval_start == earlier[-1].local


def _oracle_business(day: date, n: int, calendar: str | None) -> date:
    """Walk the calendar one day at a time."""

    def working(d: date) -> bool:
        if d.weekday() >= 5:
            return False
        if calendar is None:
            return True
        country, _, sub = calendar.partition("-")
        return d not in holidays.country_holidays(country, subdiv=sub or None, years=d.year)

    if n == 0:
        while not working(day):
            day += timedelta(days=1)
        return day
    moved = 0
    while moved < abs(n):
        day += timedelta(days=1 if n > 0 else -1)
        if working(day):
            moved += 1
    return day


def _oracle_snap(day: date, anchor: str) -> date:
    if anchor in ("start_of_day", "end_of_day"):
        return day
    if anchor == "start_of_week":
        while day.weekday() != 0:
            day -= timedelta(days=1)
        return day
    if anchor == "end_of_week":
        while day.weekday() != 6:
            day += timedelta(days=1)
        return day
    first_month = {"month": 1, "quarter": 3}[anchor.split("_of_")[1]]
    if anchor.startswith("start"):
        while not (day.day == 1 and (day.month - 1) % first_month == 0):
            day -= timedelta(days=1)
        return day
    while True:
        nxt = day + timedelta(days=1)
        if nxt.day == 1 and (nxt.month - 1) % first_month == 0:
            return day
        day = nxt


def _oracle_months(day: date, n: int) -> date:
    year, month = day.year, day.month
    for _ in range(abs(n)):
        month += 1 if n > 0 else -1
        if month == 13:
            year, month = year + 1, 1
        if month == 0:
            year, month = year - 1, 12
    last = 31
    while True:
        try:
            return date(year, month, min(day.day, last))
        except ValueError:
            last -= 1


STEP = st.one_of(
    st.builds(lambda n: {"days": n}, st.integers(-40, 40)),
    st.builds(lambda n: {"weeks": n}, st.integers(-8, 8)),
    st.builds(lambda n: {"months": n}, st.integers(-14, 14)),
    st.builds(lambda n: {"business_days": n}, st.integers(-12, 12)),
    st.builds(
        lambda n, c: {"business_days": n, "calendar": c},
        st.integers(-12, 12),
        st.sampled_from(["DE", "US", "US-NY", "GB"]),
    ),
    st.builds(
        lambda a: {"to": a},
        st.sampled_from(
            [
                "start_of_day",
                "end_of_week",
                "start_of_week",
                "start_of_month",
                "end_of_month",
                "start_of_quarter",
                "end_of_quarter",
            ]
        ),
    ),
)


@PROPERTY
@given(
    zone=st.sampled_from(ZONES),
    when=st.datetimes(min_value=datetime(2011, 1, 1), max_value=datetime(2027, 12, 31)),
    steps=st.lists(STEP, max_size=4),
)
def test_bindings_equal_a_day_by_day_computation(
    zone: str, when: datetime, steps: list[dict[str, object]]
) -> None:
    tz = ZoneInfo(zone)
    nominal = when.replace(tzinfo=UTC).astimezone(tz)
    binding = parse_binding({"$period": "slot", "steps": steps}, "p")
    got = resolve(binding, Period(nominal, nominal, nominal, tz))
    day = nominal.date()
    for step in steps:
        if "to" in step:
            day = _oracle_snap(day, str(step["to"]))
        elif "days" in step:
            day += timedelta(days=int(step["days"]))  # type: ignore[call-overload]
        elif "weeks" in step:
            day += timedelta(weeks=int(step["weeks"]))  # type: ignore[call-overload]
        elif "months" in step:
            day = _oracle_months(day, int(step["months"]))  # type: ignore[call-overload]
        else:
            day = _oracle_business(
                day,
                int(step["business_days"]),
                step.get("calendar"),  # type: ignore[arg-type,call-overload]
            )
    assert got == day.isoformat()


@PROPERTY
@given(
    when=st.datetimes(min_value=datetime(2011, 1, 1), max_value=datetime(2027, 12, 31)),
    zone=st.sampled_from(ZONES),
)
def test_every_binding_resolves_to_a_json_string(when: datetime, zone: str) -> None:
    tz = ZoneInfo(zone)
    nominal = when.replace(tzinfo=UTC).astimezone(tz)
    period = Period(nominal, nominal - timedelta(hours=4), nominal, tz)
    for base in ("slot", "interval_start", "interval_end"):
        for fmt in ("date", "datetime", "%Y-%m", "%A %d %B %Y"):
            value = resolve(parse_binding({"$period": base, "format": fmt}, "p"), period)
            assert isinstance(value, str)


def test_a_late_or_retried_slot_resolves_exactly_as_an_on_time_one() -> None:
    spec = ScheduleSpec(cron="0 7 * * 1-5", timezone="Europe/Berlin")
    schedule = compile_schedule(spec)
    zone = ZoneInfo(spec.timezone)
    slots = list(
        schedule.slots(datetime(2026, 10, 19, tzinfo=UTC), datetime(2026, 11, 7, tzinfo=UTC))
    )
    binding = parse_binding({"$period": "slot", "steps": [{"business_days": -1}]}, "p")
    on_time = [resolve(binding, p) for p in slot_periods(schedule, zone, slots)]
    one_by_one = [resolve(binding, slot_periods(schedule, zone, [s])[0]) for s in slots]
    assert on_time == one_by_one
    assert (
        on_time[slots.index(next(s for s in slots if s.key == "2026-11-02T07:00"))] == "2026-10-30"
    )
