"""The schedule compiler's API: errors, policies, windows, intervals, next fire time."""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

import nbcast.definitions.compiler as compiler
from nbcast.definitions.compiler import (
    CronSchedule,
    IntervalSchedule,
    Slot,
    SlotStatus,
    compile_schedule,
    load_zone,
)
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.errors import ScheduleError


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *rest: int) -> datetime:
    second, micro = (*rest, 0, 0)[:2]
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def keys(spec: ScheduleSpec, low: datetime, high: datetime) -> list[str]:
    return [slot.key for slot in compile_schedule(spec).slots(low, high)]


def test_public_api() -> None:
    assert sorted(compiler.__all__) == [
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


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        pytest.param(ScheduleSpec(), "exactly one of cron or every", id="neither"),
        pytest.param(
            ScheduleSpec(cron="* * * * *", every=timedelta(hours=1)),
            "exactly one of cron or every",
            id="both",
        ),
        pytest.param(ScheduleSpec(cron="61 * * * *"), "cron minute: 61", id="bad_cron"),
        pytest.param(
            ScheduleSpec(cron="* * * * *", timezone="Mars/Olympus"),
            "'Mars/Olympus' is not an IANA time zone",
            id="unknown_zone",
        ),
        pytest.param(
            ScheduleSpec(cron="* * * * *", timezone="../etc/passwd"),
            "is not an IANA time zone",
            id="zone_path_traversal",
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(seconds=30)), "at least 1m", id="every_too_short"
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(minutes=1, microseconds=5)),
            "whole seconds",
            id="every_fraction",
        ),
        pytest.param(
            ScheduleSpec(cron="* * * * *", start=utc(2026, 1, 1)),
            "naive local wall times",
            id="aware_start",
        ),
        pytest.param(
            ScheduleSpec(cron="* * * * *", start=datetime(2026, 2, 1), end=datetime(2026, 1, 1)),
            "end is before start",
            id="end_before_start",
        ),
    ],
)
def test_compile_errors(spec: ScheduleSpec, message: str) -> None:
    with pytest.raises(ScheduleError, match=message):
        compile_schedule(spec)


def test_unknown_policy_is_a_schedule_error() -> None:
    spec = ScheduleSpec(cron="* * * * *", dst_gap="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match=r"schedule\.dst: 'sometimes' is not a valid DstGap"):
        compile_schedule(spec)


def test_anchor_is_for_interval_schedules_only() -> None:
    with pytest.raises(ScheduleError, match="every schedules only"):
        compile_schedule(ScheduleSpec(cron="* * * * *"), anchor=utc(2026, 1, 1))


def test_load_zone() -> None:
    assert str(load_zone("Europe/Berlin")) == "Europe/Berlin"
    with pytest.raises(ScheduleError, match="not an IANA time zone"):
        load_zone("")


@pytest.mark.parametrize(
    ("spec", "hourly", "gap", "fold"),
    [
        pytest.param(ScheduleSpec(cron="*/5 * * * *"), True, "skip", "both", id="cron_hourly"),
        pytest.param(ScheduleSpec(cron="0 */2 * * *"), False, "shift", "first", id="cron_2h"),
        pytest.param(ScheduleSpec(cron="30 2 * * *"), False, "shift", "first", id="cron_daily"),
        pytest.param(
            ScheduleSpec(cron="30 2 * * *", dst_gap=DstGap.skip, dst_fold=DstFold.last),
            False,
            "skip",
            "last",
            id="explicit_policies_kept",
        ),
        pytest.param(
            ScheduleSpec(cron="* * * * *", dst_gap=DstGap.shift, dst_fold=DstFold.first),
            True,
            "shift",
            "first",
            id="explicit_beats_hourly",
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(hours=1)), True, "skip", "both", id="every_1h_hourly"
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(hours=1, minutes=1)),
            False,
            "shift",
            "first",
            id="every_61m_not_hourly",
        ),
    ],
)
def test_effective_policies(spec: ScheduleSpec, hourly: bool, gap: str, fold: str) -> None:
    compiled = compile_schedule(spec)
    assert compiled.fires_at_least_hourly is hourly
    assert (compiled.gap_policy, compiled.fold_policy) == (DstGap(gap), DstFold(fold))


def test_kinds() -> None:
    assert isinstance(compile_schedule(ScheduleSpec(cron="@daily")), CronSchedule)
    interval = compile_schedule(ScheduleSpec(every=timedelta(minutes=5)))
    assert isinstance(interval, IntervalSchedule)


# ----------------------------------------------------------------------------- windows


def test_window_is_half_open() -> None:
    spec = ScheduleSpec(cron="0 * * * *")
    assert keys(spec, utc(2026, 5, 1, 10), utc(2026, 5, 1, 12)) == [
        "2026-05-01T10:00",
        "2026-05-01T11:00",
    ]


def test_window_bounds_with_microseconds() -> None:
    spec = ScheduleSpec(cron="0 * * * *")
    epsilon = timedelta(microseconds=1)
    low, high = utc(2026, 5, 1, 10) + epsilon, utc(2026, 5, 1, 12) + epsilon
    assert keys(spec, low, high) == ["2026-05-01T11:00", "2026-05-01T12:00"]


def test_window_in_another_offset_is_the_same_instant() -> None:
    spec = ScheduleSpec(cron="0 * * * *")
    low = datetime.fromisoformat("2026-05-01T12:00+02:00")
    high = datetime.fromisoformat("2026-05-01T07:00-05:00")
    assert keys(spec, low, high) == ["2026-05-01T10:00", "2026-05-01T11:00"]


def test_empty_and_reversed_windows() -> None:
    compiled = compile_schedule(ScheduleSpec(cron="* * * * *"))
    assert list(compiled.slots(utc(2026, 1, 1), utc(2026, 1, 1))) == []
    assert list(compiled.slots(utc(2026, 1, 2), utc(2026, 1, 1))) == []


def test_naive_window_is_refused() -> None:
    compiled = compile_schedule(ScheduleSpec(cron="* * * * *"))
    with pytest.raises(ScheduleError, match="not a timezone-aware instant"):
        compiled.slots(datetime(2026, 1, 1), utc(2026, 1, 2))  # raised before iterating
    with pytest.raises(ScheduleError, match="not a timezone-aware instant"):
        compiled.next_fire_after(datetime(2026, 1, 1))


def test_outside_the_domain_yields_nothing() -> None:
    compiled = compile_schedule(ScheduleSpec(cron="0 0 * * *"))
    assert list(compiled.slots(utc(1700, 1, 1), utc(1700, 2, 1))) == []
    assert keys(ScheduleSpec(cron="0 0 1 1 *"), utc(1799, 1, 1), utc(1801, 1, 2)) == [
        "1800-01-01T00:00",
        "1801-01-01T00:00",
    ]


def test_slot_fields_on_an_ordinary_day() -> None:
    spec = ScheduleSpec(cron="15 9 * * *", timezone="Asia/Kolkata")
    (slot,) = compile_schedule(spec).slots(utc(2026, 5, 1), utc(2026, 5, 2))
    assert slot == Slot(
        key="2026-05-01T09:15",
        wall=datetime(2026, 5, 1, 9, 15),
        local=datetime.fromisoformat("2026-05-01T09:15+05:30"),
        fire_at=utc(2026, 5, 1, 3, 45),
        status=SlotStatus.scheduled,
        reason=None,
    )
    assert str(slot.local.tzinfo) == "Asia/Kolkata"
    assert slot.fire_at.tzinfo is UTC
    with pytest.raises(dataclasses.FrozenInstanceError):
        slot.key = "other"  # type: ignore[misc]


def test_a_month_of_minutes_in_one_call() -> None:
    spec = ScheduleSpec(cron="* * * * *", timezone="America/New_York")
    slots = list(compile_schedule(spec).slots(utc(2026, 3, 1), utc(2026, 4, 1)))
    # 31 days of UTC minutes, plus the 60 skipped wall minutes of the 02:00 gap.
    assert len(slots) == 31 * 1440 + 60
    assert sum(s.status is SlotStatus.skipped for s in slots) == 60


# ----------------------------------------------------------------------------- start / end


def test_cron_start_and_end_are_inclusive_wall_times() -> None:
    spec = ScheduleSpec(
        cron="0 * * * *",
        timezone="Europe/Berlin",
        start=datetime(2026, 5, 1, 10),
        end=datetime(2026, 5, 1, 12),
    )
    assert keys(spec, utc(2026, 4, 1), utc(2026, 6, 1)) == [
        "2026-05-01T10:00",
        "2026-05-01T11:00",
        "2026-05-01T12:00",
    ]


def test_cron_end_keeps_both_passes_of_a_fold() -> None:
    spec = ScheduleSpec(
        cron="30 * * * *", timezone="America/New_York", end=datetime(2026, 11, 1, 1, 30)
    )
    assert keys(spec, utc(2026, 11, 1, 4), utc(2026, 11, 2)) == [
        "2026-11-01T00:30",
        "2026-11-01T01:30",
        "2026-11-01T01:30~2",
    ]


def test_cron_start_inside_a_gap_keeps_later_gap_slots() -> None:
    # The earliest gap slot that start keeps is the one shifted.
    spec = ScheduleSpec(
        cron="*/15 2 * * *",
        timezone="America/New_York",
        start=datetime(2026, 3, 8, 2, 20),
    )
    slots = list(compile_schedule(spec).slots(utc(2026, 3, 8), utc(2026, 3, 9)))
    assert [(s.key, s.status.value) for s in slots] == [
        ("2026-03-08T02:30", "scheduled"),
        ("2026-03-08T02:45", "skipped"),
    ]


# ----------------------------------------------------------------------------- intervals


def interval_keys(spec: ScheduleSpec, low: datetime, high: datetime, **kw: Any) -> list[str]:
    return [s.key for s in compile_schedule(spec, **kw).slots(low, high)]


def test_interval_without_start_is_anchored_at_the_epoch() -> None:
    spec = ScheduleSpec(every=timedelta(minutes=15), timezone="Asia/Kathmandu")
    assert interval_keys(spec, utc(2026, 5, 1, 10, 1), utc(2026, 5, 1, 11)) == [
        "2026-05-01T10:15:00Z",
        "2026-05-01T10:30:00Z",
        "2026-05-01T10:45:00Z",
    ]


def test_interval_anchored_at_local_start() -> None:
    spec = ScheduleSpec(
        every=timedelta(hours=7), timezone="America/New_York", start=datetime(2026, 1, 1, 9, 5)
    )
    assert interval_keys(spec, utc(2025, 1, 1), utc(2026, 1, 2, 14)) == [
        "2026-01-01T14:05:00Z",
        "2026-01-01T21:05:00Z",
        "2026-01-02T04:05:00Z",
        "2026-01-02T11:05:00Z",
    ]


def test_interval_start_in_a_fold_takes_the_first_pass() -> None:
    spec = ScheduleSpec(
        every=timedelta(hours=1),
        timezone="America/New_York",
        start=datetime(2026, 11, 1, 1, 30),
    )
    compiled = compile_schedule(spec)
    assert isinstance(compiled, IntervalSchedule)
    assert compiled.anchor == utc(2026, 11, 1, 5, 30)


def test_interval_end_is_inclusive_at_its_last_pass() -> None:
    spec = ScheduleSpec(
        every=timedelta(minutes=30),
        timezone="America/New_York",
        end=datetime(2026, 11, 1, 1, 30),
    )
    assert interval_keys(spec, utc(2026, 11, 1, 5), utc(2026, 11, 2))[-1] == (
        "2026-11-01T06:30:00Z"
    )


def test_interval_ignores_dst() -> None:
    spec = ScheduleSpec(every=timedelta(hours=1), timezone="America/New_York")
    slots = list(compile_schedule(spec).slots(utc(2026, 11, 1, 4), utc(2026, 11, 1, 8)))
    assert [s.local.isoformat() for s in slots] == [
        "2026-11-01T00:00:00-04:00",
        "2026-11-01T01:00:00-04:00",
        "2026-11-01T01:00:00-05:00",
        "2026-11-01T02:00:00-05:00",
    ]
    assert [s.wall for s in slots][1:3] == [datetime(2026, 11, 1, 1)] * 2
    assert {s.status for s in slots} == {SlotStatus.scheduled}


def test_interval_anchor_instant() -> None:
    spec = ScheduleSpec(every=timedelta(minutes=10))
    anchor = datetime.fromisoformat("2026-05-01T12:03:07.250+02:00")
    assert interval_keys(spec, utc(2026, 5, 1), utc(2026, 5, 1, 10, 20), anchor=anchor) == [
        "2026-05-01T10:03:07Z",
        "2026-05-01T10:13:07Z",
    ]


# ----------------------------------------------------------------------------- next fire


@pytest.mark.parametrize(
    ("spec", "after", "expected"),
    [
        pytest.param(
            ScheduleSpec(cron="30 2 * * *"),
            utc(2026, 5, 1, 2, 30),
            utc(2026, 5, 2, 2, 30),
            id="strictly_after",
        ),
        pytest.param(
            ScheduleSpec(cron="30 2 * * *"),
            utc(2026, 5, 1, 2, 29, 59, 999999),
            utc(2026, 5, 1, 2, 30),
            id="just_before",
        ),
        pytest.param(
            ScheduleSpec(cron="0 0 29 2 *", timezone="Europe/Berlin"),
            utc(2026, 5, 1),
            utc(2028, 2, 28, 23),
            id="leap_day",
        ),
        pytest.param(
            ScheduleSpec(cron="0 0 29 2 0"),
            utc(2026, 5, 1),
            utc(2027, 2, 7),
            id="leap_day_or_a_february_sunday",
        ),
        pytest.param(
            ScheduleSpec(cron="0 0 29 2 */1"),
            utc(2028, 3, 1),
            utc(2032, 2, 29),
            id="leap_day_and_any_weekday",
        ),
        pytest.param(ScheduleSpec(cron="0 0 30 2 *"), utc(2026, 1, 1), None, id="never"),
        pytest.param(ScheduleSpec(cron="0 0 31 4,6,9,11 *"), utc(2026, 1, 1), None, id="never_31"),
        pytest.param(
            ScheduleSpec(cron="0 * * * *", end=datetime(2026, 5, 1, 12)),
            utc(2026, 5, 1, 12),
            None,
            id="after_end",
        ),
        pytest.param(
            ScheduleSpec(cron="0 * * * *", start=datetime(2030, 1, 1)),
            utc(2026, 5, 1),
            utc(2030, 1, 1),
            id="before_start",
        ),
        pytest.param(
            ScheduleSpec(cron="30 2 * * *", timezone="America/New_York", dst_gap=DstGap.skip),
            utc(2026, 3, 7, 8),
            utc(2026, 3, 8, 7),
            id="skipped_gap_slot_counts",
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(minutes=15)),
            utc(2026, 5, 1, 10, 0),
            utc(2026, 5, 1, 10, 15),
            id="interval",
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(minutes=15), start=datetime(2040, 1, 1)),
            utc(2026, 5, 1, 10, 0),
            utc(2040, 1, 1),
            id="interval_before_start",
        ),
        pytest.param(
            ScheduleSpec(every=timedelta(minutes=15), end=datetime(2026, 5, 1, 10)),
            utc(2026, 5, 1, 10, 0),
            None,
            id="interval_after_end",
        ),
    ],
)
def test_next_fire_after(spec: ScheduleSpec, after: datetime, expected: datetime | None) -> None:
    assert compile_schedule(spec).next_fire_after(after) == expected
