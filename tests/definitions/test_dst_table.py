"""DST behaviour of the schedule compiler, one readable case per row.

Every transition used below was checked against the installed tzdata first;
``test_transition_dates`` fails with "tzdata changed" if a release moves one, so a
failure elsewhere in this file is never a silent tzdata drift.

Each expected slot is ``"KEY FIRE_AT STATUS"`` (``FIRE_AT`` in UTC), with ``!`` after
SKIPPED for reason ``dst_gap``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

from nbcast.definitions.compiler import compile_schedule
from nbcast.definitions.spec import ScheduleSpec


def transition(name: str, zone: str, at: str, change: str) -> Any:
    """A transition: its first instant (UTC) and the local time just before -> from then."""
    before, after = change.split(" -> ")
    return pytest.param(zone, at, before, after, id=name)


TRANSITIONS = [
    transition(
        "ny_spring", "America/New_York", "2026-03-08T07:00", "01:59:59-05:00 -> 03:00-04:00"
    ),
    transition("ny_fall", "America/New_York", "2026-11-01T06:00", "01:59:59-04:00 -> 01:00-05:00"),
    transition(
        "lord_howe_fall", "Australia/Lord_Howe", "2026-04-04T15:00", "01:59:59+11:00 -> 01:30+10:30"
    ),
    transition(
        "lord_howe_spring",
        "Australia/Lord_Howe",
        "2026-10-03T15:30",
        "01:59:59+10:30 -> 02:30+11:00",
    ),
    transition("cairo_spring", "Africa/Cairo", "2026-04-23T22:00", "23:59:59+02:00 -> 01:00+03:00"),
    transition("cairo_fall", "Africa/Cairo", "2026-10-29T21:00", "23:59:59+03:00 -> 23:00+02:00"),
    transition(
        "santiago_fall", "America/Santiago", "2026-04-05T03:00", "23:59:59-03:00 -> 23:00-04:00"
    ),
    transition(
        "santiago_spring", "America/Santiago", "2026-09-06T04:00", "23:59:59-04:00 -> 01:00-03:00"
    ),
    transition(
        "havana_spring", "America/Havana", "2026-03-08T05:00", "23:59:59-05:00 -> 01:00-04:00"
    ),
    transition(
        "havana_fall", "America/Havana", "2026-11-01T05:00", "00:59:59-04:00 -> 00:00-05:00"
    ),
    transition(
        "sydney_fall", "Australia/Sydney", "2026-04-04T16:00", "02:59:59+11:00 -> 02:00+10:00"
    ),
    transition(
        "sydney_spring", "Australia/Sydney", "2026-10-03T16:00", "01:59:59+10:00 -> 03:00+11:00"
    ),
    transition(
        "apia_dateline", "Pacific/Apia", "2011-12-30T10:00", "23:59:59-10:00 -> 00:00+14:00"
    ),
    transition("paris_fall", "Europe/Paris", "2026-10-25T01:00", "02:59:59+02:00 -> 02:00+01:00"),
    transition(
        "la_spring", "America/Los_Angeles", "2026-03-08T10:00", "01:59:59-08:00 -> 03:00-07:00"
    ),
]


def _utc(text: str) -> datetime:
    return datetime.fromisoformat(text).replace(tzinfo=UTC)


@pytest.mark.parametrize(("zone", "at", "before", "after"), TRANSITIONS)
def test_transition_dates(zone: str, at: str, before: str, after: str) -> None:
    instant = _utc(at)
    just_before = (instant - timedelta(seconds=1)).astimezone(ZoneInfo(zone))
    then = instant.astimezone(ZoneInfo(zone))
    seen = (just_before.isoformat()[11:], then.isoformat()[11:].replace(":00", "", 1))
    assert seen == (before, after), f"tzdata changed: {zone} at {at}Z"


def _slots(
    cron: str, zone: str, low: str, high: str, gap: str = "auto", fold: str = "auto"
) -> list[str]:
    spec = ScheduleSpec(cron=cron, timezone=zone, dst_gap=gap, dst_fold=fold)  # type: ignore[arg-type]
    return [
        f"{s.key} {s.fire_at:%Y-%m-%dT%H:%MZ} {s.status.value}{'!' if s.reason else ''}"
        for s in compile_schedule(spec).slots(_utc(low), _utc(high))
    ]


def case(name: str, cron: str, zone: str, window: str, *slots: str, **policy: str) -> Any:
    """One row: ``window`` is ``"FROM .. TO"`` in UTC; ``policy`` may set gap and fold."""
    low, high = window.split(" .. ")
    gap, fold = policy.get("gap", "auto"), policy.get("fold", "auto")
    return pytest.param(cron, zone, gap, fold, low, high, list(slots), id=name)


CASES = [
    # -- America/New_York, spring forward 2026-03-08 02:00 -> 03:00 (07:00Z)
    case(
        "ny_spring_gap_daily_shift",
        "30 2 * * *",
        "America/New_York",
        "2026-03-07T00:00 .. 2026-03-10T00:00",
        "2026-03-07T02:30 2026-03-07T07:30Z scheduled",
        "2026-03-08T02:30 2026-03-08T07:00Z scheduled",
        "2026-03-09T02:30 2026-03-09T06:30Z scheduled",
        gap="shift",
    ),
    case(
        "ny_spring_gap_daily_skip",
        "30 2 * * *",
        "America/New_York",
        "2026-03-08T00:00 .. 2026-03-09T00:00",
        "2026-03-08T02:30 2026-03-08T07:00Z skipped!",
        gap="skip",
    ),
    case(
        "ny_spring_gap_daily_auto_shifts",
        "30 2 * * *",
        "America/New_York",
        "2026-03-08T00:00 .. 2026-03-09T00:00",
        "2026-03-08T02:30 2026-03-08T07:00Z scheduled",
    ),
    case(
        "ny_spring_gap_quarter_hours_one_shifted",
        "*/15 2 * * *",
        "America/New_York",
        "2026-03-08T00:00 .. 2026-03-09T00:00",
        "2026-03-08T02:00 2026-03-08T07:00Z scheduled",
        "2026-03-08T02:15 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:30 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:45 2026-03-08T07:00Z skipped!",
    ),
    case(
        "ny_spring_gap_quarter_hours_skip",
        "*/15 2 * * *",
        "America/New_York",
        "2026-03-08T00:00 .. 2026-03-09T00:00",
        "2026-03-08T02:00 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:15 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:30 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:45 2026-03-08T07:00Z skipped!",
        gap="skip",
    ),
    case(
        "ny_spring_gap_own_slot_at_0300_blocks_shift",
        "0,30 2-3 * * *",
        "America/New_York",
        "2026-03-08T06:00 .. 2026-03-08T08:00",
        "2026-03-08T02:00 2026-03-08T07:00Z skipped!",
        "2026-03-08T02:30 2026-03-08T07:00Z skipped!",
        "2026-03-08T03:00 2026-03-08T07:00Z scheduled",
        "2026-03-08T03:30 2026-03-08T07:30Z scheduled",
        gap="shift",
    ),
    case(
        "ny_spring_gap_own_slot_at_0330_does_not_block",
        "30 2,3 * * *",
        "America/New_York",
        "2026-03-08T06:00 .. 2026-03-08T08:00",
        "2026-03-08T02:30 2026-03-08T07:00Z scheduled",
        "2026-03-08T03:30 2026-03-08T07:30Z scheduled",
        gap="shift",
    ),
    case(
        "ny_spring_gap_hourly_auto_skips",
        "0 * * * *",
        "America/New_York",
        "2026-03-08T05:00 .. 2026-03-08T09:00",
        "2026-03-08T00:00 2026-03-08T05:00Z scheduled",
        "2026-03-08T01:00 2026-03-08T06:00Z scheduled",
        "2026-03-08T02:00 2026-03-08T07:00Z skipped!",
        "2026-03-08T03:00 2026-03-08T07:00Z scheduled",
        "2026-03-08T04:00 2026-03-08T08:00Z scheduled",
    ),
    # -- America/New_York, fall back 2026-11-01 02:00 EDT -> 01:00 EST (06:00Z)
    case(
        "ny_fall_half_hours_both",
        "*/30 * * * *",
        "America/New_York",
        "2026-11-01T05:00 .. 2026-11-01T07:00",
        "2026-11-01T01:00 2026-11-01T05:00Z scheduled",
        "2026-11-01T01:30 2026-11-01T05:30Z scheduled",
        "2026-11-01T01:00~2 2026-11-01T06:00Z scheduled",
        "2026-11-01T01:30~2 2026-11-01T06:30Z scheduled",
        fold="both",
    ),
    case(
        "ny_fall_daily_first",
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T01:30 2026-11-01T05:30Z scheduled",
        fold="first",
    ),
    case(
        "ny_fall_daily_last",
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T01:30 2026-11-01T06:30Z scheduled",
        fold="last",
    ),
    case(
        "ny_fall_daily_auto_first",
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T01:30 2026-11-01T05:30Z scheduled",
    ),
    case(
        "ny_fall_daily_both",
        "30 1 * * *",
        "America/New_York",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T01:30 2026-11-01T05:30Z scheduled",
        "2026-11-01T01:30~2 2026-11-01T06:30Z scheduled",
        fold="both",
    ),
    # -- Australia/Lord_Howe: half-hour shifts
    case(
        "lord_howe_spring_half_hour_gap_own_slot",
        "*/15 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T14:00 .. 2026-10-03T16:00",
        "2026-10-04T02:00 2026-10-03T15:30Z skipped!",
        "2026-10-04T02:15 2026-10-03T15:30Z skipped!",
        "2026-10-04T02:30 2026-10-03T15:30Z scheduled",
        "2026-10-04T02:45 2026-10-03T15:45Z scheduled",
    ),
    case(
        "lord_howe_spring_daily_shift_to_0230",
        "0 2 * * *",
        "Australia/Lord_Howe",
        "2026-10-03T00:00 .. 2026-10-04T00:00",
        "2026-10-04T02:00 2026-10-03T15:30Z scheduled",
    ),
    case(
        "lord_howe_fall_half_hour_fold",
        "*/15 1 * * *",
        "Australia/Lord_Howe",
        "2026-04-04T13:00 .. 2026-04-04T16:00",
        "2026-04-05T01:00 2026-04-04T14:00Z scheduled",
        "2026-04-05T01:15 2026-04-04T14:15Z scheduled",
        "2026-04-05T01:30 2026-04-04T14:30Z scheduled",
        "2026-04-05T01:45 2026-04-04T14:45Z scheduled",
        "2026-04-05T01:30~2 2026-04-04T15:00Z scheduled",
        "2026-04-05T01:45~2 2026-04-04T15:15Z scheduled",
        fold="both",
    ),
    # -- Africa/Cairo: spring forward at midnight, fall back at midnight to 23:00
    case(
        "cairo_midnight_gap_daily_shift",
        "0 0 * * *",
        "Africa/Cairo",
        "2026-04-22T00:00 .. 2026-04-24T12:00",
        "2026-04-23T00:00 2026-04-22T22:00Z scheduled",
        "2026-04-24T00:00 2026-04-23T22:00Z scheduled",
    ),
    case(
        "cairo_midnight_gap_hourly",
        "0 * * * *",
        "Africa/Cairo",
        "2026-04-23T20:00 .. 2026-04-23T23:00",
        "2026-04-23T22:00 2026-04-23T20:00Z scheduled",
        "2026-04-23T23:00 2026-04-23T21:00Z scheduled",
        "2026-04-24T00:00 2026-04-23T22:00Z skipped!",
        "2026-04-24T01:00 2026-04-23T22:00Z scheduled",
    ),
    case(
        "cairo_midnight_fold_hourly",
        "0 * * * *",
        "Africa/Cairo",
        "2026-10-29T19:00 .. 2026-10-29T23:00",
        "2026-10-29T22:00 2026-10-29T19:00Z scheduled",
        "2026-10-29T23:00 2026-10-29T20:00Z scheduled",
        "2026-10-29T23:00~2 2026-10-29T21:00Z scheduled",
        "2026-10-30T00:00 2026-10-29T22:00Z scheduled",
    ),
    # -- America/Santiago: the day starts at 01:00 in September; 23:xx repeats in April
    case(
        "santiago_midnight_gap_daily_shift_to_0100",
        "0 0 * * *",
        "America/Santiago",
        "2026-09-05T00:00 .. 2026-09-07T00:00",
        "2026-09-05T00:00 2026-09-05T04:00Z scheduled",
        "2026-09-06T00:00 2026-09-06T04:00Z scheduled",
    ),
    case(
        "santiago_midnight_gap_own_0100",
        "0 0,1 * * *",
        "America/Santiago",
        "2026-09-06T00:00 .. 2026-09-07T00:00",
        "2026-09-06T00:00 2026-09-06T04:00Z skipped!",
        "2026-09-06T01:00 2026-09-06T04:00Z scheduled",
    ),
    case(
        "santiago_fold_before_midnight_both",
        "30 23 * * *",
        "America/Santiago",
        "2026-04-04T00:00 .. 2026-04-07T00:00",
        "2026-04-03T23:30 2026-04-04T02:30Z scheduled",
        "2026-04-04T23:30 2026-04-05T02:30Z scheduled",
        "2026-04-04T23:30~2 2026-04-05T03:30Z scheduled",
        "2026-04-05T23:30 2026-04-06T03:30Z scheduled",
        fold="both",
    ),
    # -- America/Havana: midnight gap in March, midnight fold in November
    case(
        "havana_midnight_gap_daily_shift",
        "0 0 * * *",
        "America/Havana",
        "2026-03-08T00:00 .. 2026-03-09T00:00",
        "2026-03-08T00:00 2026-03-08T05:00Z scheduled",
    ),
    case(
        "havana_midnight_fold_first",
        "30 0 * * *",
        "America/Havana",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T00:30 2026-11-01T04:30Z scheduled",
        fold="first",
    ),
    case(
        "havana_midnight_fold_last",
        "30 0 * * *",
        "America/Havana",
        "2026-11-01T00:00 .. 2026-11-02T00:00",
        "2026-11-01T00:30 2026-11-01T05:30Z scheduled",
        fold="last",
    ),
    case(
        "havana_midnight_fold_half_hourly_both",
        "0,30 * * * *",
        "America/Havana",
        "2026-11-01T03:30 .. 2026-11-01T06:30",
        "2026-10-31T23:30 2026-11-01T03:30Z scheduled",
        "2026-11-01T00:00 2026-11-01T04:00Z scheduled",
        "2026-11-01T00:30 2026-11-01T04:30Z scheduled",
        "2026-11-01T00:00~2 2026-11-01T05:00Z scheduled",
        "2026-11-01T00:30~2 2026-11-01T05:30Z scheduled",
        "2026-11-01T01:00 2026-11-01T06:00Z scheduled",
    ),
    # -- Australia/Sydney: fold in April (03:00 -> 02:00), gap in October (02:00 -> 03:00)
    case(
        "sydney_fall_fold_first",
        "30 2 * * *",
        "Australia/Sydney",
        "2026-04-04T00:00 .. 2026-04-05T00:00",
        "2026-04-05T02:30 2026-04-04T15:30Z scheduled",
        fold="first",
    ),
    case(
        "sydney_fall_fold_last",
        "30 2 * * *",
        "Australia/Sydney",
        "2026-04-04T00:00 .. 2026-04-05T00:00",
        "2026-04-05T02:30 2026-04-04T16:30Z scheduled",
        fold="last",
    ),
    case(
        "sydney_spring_gap_shift",
        "30 2 * * *",
        "Australia/Sydney",
        "2026-10-03T00:00 .. 2026-10-04T00:00",
        "2026-10-04T02:30 2026-10-03T16:00Z scheduled",
    ),
    case(
        "sydney_spring_gap_skip",
        "30 2 * * *",
        "Australia/Sydney",
        "2026-10-03T00:00 .. 2026-10-04T00:00",
        "2026-10-04T02:30 2026-10-03T16:00Z skipped!",
        gap="skip",
    ),
    # -- Pacific/Apia: 2011-12-30 does not exist
    case(
        "apia_missing_day_daily_shift_to_dec31_midnight",
        "0 9 * * *",
        "Pacific/Apia",
        "2011-12-28T00:00 .. 2012-01-01T00:00",
        "2011-12-28T09:00 2011-12-28T19:00Z scheduled",
        "2011-12-29T09:00 2011-12-29T19:00Z scheduled",
        "2011-12-30T09:00 2011-12-30T10:00Z scheduled",
        "2011-12-31T09:00 2011-12-30T19:00Z scheduled",
        "2012-01-01T09:00 2011-12-31T19:00Z scheduled",
    ),
    case(
        "apia_missing_day_midnight_own_slot",
        "0 0 * * *",
        "Pacific/Apia",
        "2011-12-29T00:00 .. 2011-12-31T00:00",
        "2011-12-29T00:00 2011-12-29T10:00Z scheduled",
        "2011-12-30T00:00 2011-12-30T10:00Z skipped!",
        "2011-12-31T00:00 2011-12-30T10:00Z scheduled",
    ),
    case(
        "apia_missing_day_skip",
        "0 9 * * *",
        "Pacific/Apia",
        "2011-12-30T00:00 .. 2011-12-30T12:00",
        "2011-12-30T09:00 2011-12-30T10:00Z skipped!",
        gap="skip",
    ),
    # -- ordinary days and fields that never touch a transition
    case(
        "weekday_hour_steps_friday_to_monday",
        "30 6-16/4 * * 1-5",
        "Europe/London",
        "2026-06-05T00:00 .. 2026-06-09T00:00",
        "2026-06-05T06:30 2026-06-05T05:30Z scheduled",
        "2026-06-05T10:30 2026-06-05T09:30Z scheduled",
        "2026-06-05T14:30 2026-06-05T13:30Z scheduled",
        "2026-06-08T06:30 2026-06-08T05:30Z scheduled",
        "2026-06-08T10:30 2026-06-08T09:30Z scheduled",
        "2026-06-08T14:30 2026-06-08T13:30Z scheduled",
    ),
    case(
        "la_spring_every_4_hours_misses_the_gap",
        "20 */4 * * *",
        "America/Los_Angeles",
        "2026-03-08T08:00 .. 2026-03-09T07:00",
        "2026-03-08T00:20 2026-03-08T08:20Z scheduled",
        "2026-03-08T04:20 2026-03-08T11:20Z scheduled",
        "2026-03-08T08:20 2026-03-08T15:20Z scheduled",
        "2026-03-08T12:20 2026-03-08T19:20Z scheduled",
        "2026-03-08T16:20 2026-03-08T23:20Z scheduled",
        "2026-03-08T20:20 2026-03-09T03:20Z scheduled",
    ),
]


@pytest.mark.parametrize(("cron", "zone", "gap", "fold", "low", "high", "expected"), CASES)
def test_dst_table(
    cron: str, zone: str, gap: str, fold: str, low: str, high: str, expected: list[str]
) -> None:
    assert _slots(cron, zone, low, high, gap, fold) == expected


def test_ny_fall_back_day_has_25_hourly_slots() -> None:
    # The local day 2026-11-01 runs from 04:00Z (00:00 EDT) to 05:00Z next day (24:00 EST).
    slots = _slots("0 * * * *", "America/New_York", "2026-11-01T04:00", "2026-11-02T05:00")
    assert len(slots) == 25
    assert slots[1:4] == [
        "2026-11-01T01:00 2026-11-01T05:00Z scheduled",
        "2026-11-01T01:00~2 2026-11-01T06:00Z scheduled",
        "2026-11-01T02:00 2026-11-01T07:00Z scheduled",
    ]
    assert all(slot.startswith("2026-11-01T") for slot in slots)


def test_paris_fall_back_day_hours_7_to_21() -> None:
    # 2026-10-25 local day in Paris: 00:00 CEST = 2026-10-24T22:00Z to 24:00 CET = 23:00Z.
    slots = _slots("0 7-21 * * *", "Europe/Paris", "2026-10-24T22:00", "2026-10-25T23:00")
    assert len(slots) == 15
    assert not any("~2" in slot for slot in slots)
    assert slots[0] == "2026-10-25T07:00 2026-10-25T06:00Z scheduled"
    assert slots[-1] == "2026-10-25T21:00 2026-10-25T20:00Z scheduled"


def test_apia_every_minute_missing_day() -> None:
    """1440 gap slots for 2011-12-30, all at the transition; the own 00:00 slot runs."""
    slots = _slots("* * * * *", "Pacific/Apia", "2011-12-30T10:00", "2011-12-30T10:01", "shift")
    assert len(slots) == 1440 + 1
    assert slots[0] == "2011-12-30T00:00 2011-12-30T10:00Z skipped!"
    assert all(slot.endswith("skipped!") for slot in slots[:-1])
    assert slots[-1] == "2011-12-31T00:00 2011-12-30T10:00Z scheduled"


def test_gap_slot_local_is_the_instant_after_the_gap() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="America/New_York", dst_gap="skip")  # type: ignore[arg-type]
    (slot,) = compile_schedule(spec).slots(_utc("2026-03-08T00:00"), _utc("2026-03-09T00:00"))
    assert slot.wall == datetime(2026, 3, 8, 2, 30)
    assert slot.local.isoformat() == "2026-03-08T03:00:00-04:00"
    assert slot.fire_at == _utc("2026-03-08T07:00")
