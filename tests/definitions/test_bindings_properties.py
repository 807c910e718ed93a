"""Bindings resolved for real slots, across DST folds and gaps, against an independent
oracle (:mod:`tests.definitions.bindings_oracle`).

Schedules are random crons (every gap and fold policy) and intervals, in zones with
odd DST histories — New York, Lord Howe's half-hour shift, Santiago's midnight
changes, Apia's 2011 changes and the day it skipped — each window around one of the
zone's transitions, so both passes of a kept fold, ``last`` folds and shifted or
skipped gap slots are the bases bindings resolve against. Checked:

- every binding (all three bases, every step kind, ``date``, ``datetime`` and
  patterns with ``%z`` and ``%Z``) equals the oracle's value;
- the resolved ``interval_start`` / ``interval_end`` of consecutive slots tile time,
  compared as instants, and each interval ends at its slot's fire instant;
- resolving again from the context as stored on the run row (JSON: offsets, a zone
  name) — what a retry, a rerun or a late run has — gives the same values.
"""

from __future__ import annotations

import itertools
import json
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from nbcast.definitions.bindings import SNAPS, Period, parse_binding, resolve, resolve_parameters
from nbcast.definitions.compiler import CompiledSchedule, Slot, SlotStatus, interval_schedule
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.scheduler.period import context_of, slot_periods
from tests.definitions import bindings_oracle as oracle

# Each zone's UTC-offset changes the windows are centred on.
TRANSITIONS: dict[str, list[datetime]] = {
    "America/New_York": [
        datetime(2011, 3, 13, 7, tzinfo=UTC),
        datetime(2026, 3, 8, 7, tzinfo=UTC),
        datetime(2026, 11, 1, 6, tzinfo=UTC),
    ],
    "Australia/Lord_Howe": [  # 30 minutes: fold 01:30-02:00, gap 02:00-02:30
        datetime(2026, 4, 4, 15, tzinfo=UTC),
        datetime(2026, 10, 3, 15, 30, tzinfo=UTC),
    ],
    "America/Santiago": [  # at midnight: fold 23:00-24:00, gap 00:00-01:00
        datetime(2026, 4, 5, 3, tzinfo=UTC),
        datetime(2026, 9, 6, 4, tzinfo=UTC),
    ],
    "Pacific/Apia": [
        datetime(2011, 4, 2, 14, tzinfo=UTC),
        datetime(2011, 9, 24, 14, tzinfo=UTC),
        datetime(2011, 12, 30, 10, tzinfo=UTC),  # skips 30 December 2011
    ],
    "Europe/Berlin": [datetime(2026, 10, 25, 1, tzinfo=UTC)],
}
REACH = timedelta(hours=36)
PROPERTY = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])

FORMATS = [
    "date",
    "datetime",
    "%Y-%m-%d %H:%M:%S %z",
    "%H:%M %Z",
    "%z",
    "%Y-%m",
    "%a %d %b %Y %I:%M%p",
    "%j %U %W %G-W%V-%u",
]
STEPS = st.one_of(
    st.builds(lambda n: {"minutes": n}, st.integers(-720, 720)),
    st.builds(lambda n: {"minutes": n}, st.sampled_from([-90, -60, -30, -1, 1, 30, 60, 90])),
    st.builds(lambda n: {"hours": n}, st.integers(-30, 30)),
    st.builds(lambda n: {"days": n}, st.integers(-40, 40)),
    st.builds(lambda n: {"weeks": n}, st.integers(-60, 60)),
    st.builds(lambda n: {"months": n}, st.integers(-14, 14)),
    st.builds(lambda n: {"business_days": n}, st.integers(-12, 12)),
    st.builds(
        lambda n, c: {"business_days": n, "calendar": c},
        st.integers(-12, 12),
        st.sampled_from(["DE", "US", "US-NY", "CL", "AU"]),
    ),
    st.builds(lambda a: {"to": a}, st.sampled_from(SNAPS)),
)
BINDINGS = st.fixed_dictionaries(
    {
        "$period": st.sampled_from(["slot", "interval_start", "interval_end"]),
        "steps": st.lists(STEPS, max_size=4),
        "format": st.sampled_from(FORMATS),
    }
)


@st.composite
def schedules(draw: st.DrawFn) -> tuple[ScheduleSpec, datetime]:
    """A schedule and the transition its window is centred on."""
    zone = draw(st.sampled_from(sorted(TRANSITIONS)))
    transition = draw(st.sampled_from(TRANSITIONS[zone]))
    if draw(st.integers(0, 6)) == 0:
        every = timedelta(minutes=draw(st.sampled_from([30, 45, 90, 240])))
        return ScheduleSpec(every=every, timezone=zone), transition
    minute = draw(st.sampled_from(["0", "30", "*/15", "0,45", "5"]))
    hour = draw(st.sampled_from(["*", "*/2", "0", "1", "2", "3", "23", "0-3", "22-23"]))
    dom = draw(st.sampled_from(["*", "*", "*", "1-15", "16-31"]))
    dow = draw(st.sampled_from(["*", "*", "*", "1-5", "0,6"]))
    spec = ScheduleSpec(
        cron=f"{minute} {hour} {dom} * {dow}",
        timezone=zone,
        dst_gap=draw(st.sampled_from(DstGap)),
        dst_fold=draw(st.sampled_from(DstFold)),
    )
    return spec, transition


def _previous_fire(schedule: CompiledSchedule, slot: Slot) -> datetime:
    """The fire instant of the last slot before ``slot`` that fires (not one the
    schedule skips for a DST gap), walking back a year."""
    earlier = list(schedule.slots(slot.fire_at - timedelta(days=400), slot.fire_at))
    earlier += [
        s
        for s in schedule.slots(slot.fire_at, slot.fire_at + timedelta(microseconds=1))
        if s.key < slot.key
    ]
    earlier = [s for s in earlier if s.status is not SlotStatus.skipped]
    assert earlier, "every window's schedule fires within a year before it"
    return earlier[-1].fire_at


def _bases(
    spec: ScheduleSpec, schedule: CompiledSchedule, slots: list[Slot]
) -> list[dict[str, datetime]]:
    """Each slot's base instants, by the rules DESIGN.md and the README state (not via
    nbcast's period code): the nominal time and the interval's end are the fire
    instant, the interval's start the fire instant of the previous slot that fires — a
    slot skipped for a DST gap hands its time on (interval schedules: ``every``
    before)."""
    bases = []
    previous = _previous_fire(schedule, slots[0]) if spec.every is None else None
    for slot in slots:
        if spec.every is not None:
            start = slot.fire_at - spec.every
        else:
            assert previous is not None
            start = previous
        bases.append({"slot": slot.fire_at, "interval_start": start, "interval_end": slot.fire_at})
        if slot.status is not SlotStatus.skipped:
            previous = slot.fire_at
    return bases


def _check_slot_key(slot: Slot, zone: ZoneInfo) -> None:
    """A cron slot fires at an instant of its key's wall time (a ``~2`` key: the
    second one), or, in a gap, at the gap's end: the bases are what they claim."""
    wall = datetime.fromisoformat(slot.key.removesuffix("~2"))
    found = oracle.instants(wall, zone)
    if not found:
        assert slot.fire_at == oracle.gap_end(wall, zone)
    elif slot.key.endswith("~2"):
        assert (len(found), slot.fire_at) == (2, found[1])
    else:
        assert slot.fire_at in found


def _window(spec: ScheduleSpec, transition: datetime) -> tuple[CompiledSchedule, list[Slot]]:
    schedule = interval_schedule(spec)
    return schedule, list(schedule.slots(transition - REACH, transition + REACH))


@PROPERTY
@given(
    drawn=schedules(),
    bindings=st.lists(BINDINGS, min_size=1, max_size=3),
    extra=st.lists(st.integers(0, 10_000), max_size=3),
)
@example(  # New York's fall-back night, both passes kept: 01:30 EDT, then 01:30 EST
    drawn=(
        ScheduleSpec(cron="30 1 * * *", timezone="America/New_York", dst_fold=DstFold.both),
        datetime(2026, 11, 1, 6, tzinfo=UTC),
    ),
    bindings=[
        {"$period": "slot", "steps": [{"hours": -1}], "format": "%Y-%m-%d %H:%M %z"},
        {"$period": "interval_start", "steps": [{"hours": 1}], "format": "datetime"},
        {"$period": "interval_end", "steps": [{"minutes": -30}], "format": "%H:%M %Z"},
    ],
    extra=[],
)
@example(  # the second pass only; from it, a week back and an hour on
    drawn=(
        ScheduleSpec(cron="30 1 * * *", timezone="America/New_York", dst_fold=DstFold.last),
        datetime(2026, 11, 1, 6, tzinfo=UTC),
    ),
    bindings=[
        {"$period": "slot", "steps": [], "format": "datetime"},
        {"$period": "slot", "steps": [{"weeks": -1}, {"hours": 1}], "format": "datetime"},
    ],
    extra=[],
)
@example(  # Santiago's midnight fold and a snap to the end of that day
    drawn=(
        ScheduleSpec(cron="30 23 * * *", timezone="America/Santiago", dst_fold=DstFold.both),
        datetime(2026, 4, 5, 3, tzinfo=UTC),
    ),
    bindings=[{"$period": "interval_start", "steps": [{"to": "end_of_day"}], "format": "%z"}],
    extra=[],
)
def test_bindings_of_real_slots_equal_the_oracle(
    drawn: tuple[ScheduleSpec, datetime], bindings: list[dict[str, Any]], extra: list[int]
) -> None:
    spec, transition = drawn
    zone = ZoneInfo(spec.timezone)
    schedule, slots = _window(spec, transition)
    if not slots:
        return
    periods = slot_periods(schedule, zone, slots)
    bases = _bases(spec, schedule, slots)
    # The slots near the transition, and a few others.
    picked = {i for i, s in enumerate(slots) if abs(s.fire_at - transition) <= timedelta(hours=4)}
    picked |= {i % len(slots) for i in extra}
    for i in sorted(picked):
        if spec.cron is not None:
            _check_slot_key(slots[i], zone)
        for raw in bindings:
            got = resolve(parse_binding(raw, "p"), periods[i])
            want = oracle.expected(bases[i][raw["$period"]], raw["steps"], raw["format"], zone)
            assert got == want, (slots[i].key, raw)


def _instant(text: str) -> datetime:
    return datetime.fromisoformat(text).astimezone(UTC)


TILES = {
    "start": {"$period": "interval_start", "format": "datetime"},
    "end": {"$period": "interval_end", "format": "datetime"},
    "slot": {"$period": "slot", "format": "datetime"},
    "end_z": {"$period": "interval_end", "format": "%Y-%m-%dT%H:%M:%S%z"},
}


@PROPERTY
@given(drawn=schedules())
def test_resolved_intervals_of_consecutive_slots_tile_time(
    drawn: tuple[ScheduleSpec, datetime],
) -> None:
    spec, transition = drawn
    zone = ZoneInfo(spec.timezone)
    schedule, slots = _window(spec, transition)
    values = [resolve_parameters(TILES, period) for period in slot_periods(schedule, zone, slots)]
    for slot, value in zip(slots, values, strict=True):
        assert _instant(value["slot"]) == _instant(value["end"]) == slot.fire_at
        assert datetime.strptime(value["end_z"], "%Y-%m-%dT%H:%M:%S%z") == slot.fire_at
        assert _instant(value["start"]) <= _instant(value["end"])
    # The slots that fire tile time: no gap, no overlap (a slot skipped for a DST gap
    # hands its time on to the next one that fires).
    fired = [
        v for slot, v in zip(slots, values, strict=True) if slot.status is not SlotStatus.skipped
    ]
    for before, after in itertools.pairwise(fired):
        assert _instant(after["start"]) == _instant(before["end"])


def _stored_period(context: dict[str, Any]) -> Period:
    """A period back from a run row's context (JSON), as a retry reads it."""
    row = json.loads(json.dumps(context))
    return Period(
        datetime.fromisoformat(row["nominal"]),
        datetime.fromisoformat(row["interval_start"]),
        datetime.fromisoformat(row["interval_end"]),
        ZoneInfo(row["timezone"]),
    )


@PROPERTY
@given(drawn=schedules(), bindings=st.lists(BINDINGS, min_size=1, max_size=3))
def test_a_retry_resolves_from_the_stored_context_to_the_same_values(
    drawn: tuple[ScheduleSpec, datetime], bindings: list[dict[str, Any]]
) -> None:
    spec, transition = drawn
    zone = ZoneInfo(spec.timezone)
    schedule, slots = _window(spec, transition)
    values = {f"p{i}": b for i, b in enumerate(bindings)}
    periods = slot_periods(schedule, zone, slots)
    for slot, period in zip(slots, periods, strict=True):
        first = resolve_parameters(values, period)
        context = context_of(
            kind="scheduled", slot_key=slot.key, fire_at=slot.fire_at, period=period
        )
        assert resolve_parameters(values, _stored_period(context)) == first
        # A late run computes its slot's period alone: the same values again.
        (alone,) = slot_periods(schedule, zone, [slot])
        assert resolve_parameters(values, alone) == first
