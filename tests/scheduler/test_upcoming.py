"""``upcoming``: the next fire times in the definition's zone, with DST notes."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.scheduler.upcoming import MAX_UPCOMING, upcoming

NY = "America/New_York"


def notes(spec: ScheduleSpec, after: datetime, count: int = 3) -> list[tuple[str, str | None]]:
    return [(u.slot_key, u.note) for u in upcoming(spec, after, count)]


def test_a_fold_run_both_times_says_so_on_each_pass() -> None:
    spec = ScheduleSpec(cron="30 1 * * *", timezone=NY, dst_fold=DstFold.both)
    found = upcoming(spec, datetime(2026, 10, 31, 12, tzinfo=UTC), 3)
    assert [(u.slot_key, u.local.isoformat(), u.note) for u in found] == [
        (
            "2026-11-01T01:30",
            "2026-11-01T01:30:00-04:00",
            "01:30 happens twice on 2026-11-01: runs both (EDT, then EST)",
        ),
        (
            "2026-11-01T01:30~2",
            "2026-11-01T01:30:00-05:00",
            "01:30 happens twice on 2026-11-01: this is the second pass (EST)",
        ),
        ("2026-11-02T01:30", "2026-11-02T01:30:00-05:00", None),
    ]


@pytest.mark.parametrize(
    ("fold", "note"),
    [
        (DstFold.first, "runs the first pass only (EDT)"),
        (DstFold.auto, "runs the first pass only (EDT)"),  # daily: auto is first
        (DstFold.last, "runs the second pass only (EST)"),
    ],
)
def test_a_fold_run_once_says_which_pass(fold: DstFold, note: str) -> None:
    spec = ScheduleSpec(cron="30 1 * * *", timezone=NY, dst_fold=fold)
    [(key, said)] = notes(spec, datetime(2026, 10, 31, 12, tzinfo=UTC), 1)
    assert (key, said) == ("2026-11-01T01:30", f"01:30 happens twice on 2026-11-01: {note}")


@pytest.mark.parametrize(
    ("gap", "status", "end"),
    [(DstGap.shift, "scheduled", "runs at 03:00 EDT"), (DstGap.skip, "skipped", "skipped")],
)
def test_a_gap_says_where_it_runs_or_that_it_is_skipped(gap: DstGap, status: str, end: str) -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone=NY, dst_gap=gap)
    [first, second] = upcoming(spec, datetime(2026, 3, 7, 12, tzinfo=UTC), 2)
    assert (first.slot_key, first.status) == ("2026-03-08T02:30", status)
    assert first.note == f"02:30 does not exist on 2026-03-08 (clocks go forward): {end}"
    assert second.note is None


def test_ordinary_days_interval_schedules_and_bounds() -> None:
    spec = ScheduleSpec(cron="0 7 * * 1-5", timezone="Europe/Berlin")
    found = upcoming(spec, datetime(2026, 10, 23, 12, tzinfo=UTC), 3)
    assert [u.to_json()["fire_at"] for u in found] == [
        "2026-10-26T06:00:00Z",  # Monday, after the fall-back: CET
        "2026-10-27T06:00:00Z",
        "2026-10-28T06:00:00Z",
    ]
    assert all(u.note is None for u in found)
    every = ScheduleSpec(cron=None, every=timedelta(hours=4), timezone=NY)
    assert all(u.note is None for u in upcoming(every, datetime(2026, 11, 1, tzinfo=UTC), 5))
    assert len(upcoming(spec, datetime(2026, 1, 1, tzinfo=UTC), 10**9)) == MAX_UPCOMING
    assert upcoming(spec, datetime(2026, 1, 1, tzinfo=UTC), -5) == []


def test_a_fold_longer_than_hours_says_both_on_each_pass() -> None:
    """Casey (Antarctica) went from +11 to +08 at 02:00 on 5 March 2010: 23:00 to 02:00
    happened twice, a three-hour fold; Apia's 1892 change repeated a whole day. The
    first pass says "runs both" when the second pass fires, however long the fold,
    whether it is in the list or beyond it."""
    casey = ScheduleSpec(cron="30 23 * * *", timezone="Antarctica/Casey", dst_fold=DstFold.both)
    [first] = upcoming(casey, datetime(2010, 3, 4, 0, tzinfo=UTC), 1)  # the second is 3 h on
    assert (first.slot_key, first.note) == (
        "2010-03-04T23:30",
        "23:30 happens twice on 2010-03-04: runs both (+11, then +08)",
    )
    apia = ScheduleSpec(cron="0 12 * * *", timezone="Pacific/Apia", dst_fold=DstFold.both)
    # Count 1: the second pass, 24 hours later, is found beyond the list.
    [noon] = upcoming(apia, datetime(1892, 7, 3, 12, tzinfo=UTC), 1)
    assert noon.note == "12:00 happens twice on 1892-07-04: runs both (LMT, then LMT)"
    assert notes(apia, datetime(1892, 7, 3, 12, tzinfo=UTC)) == [
        ("1892-07-04T12:00", "12:00 happens twice on 1892-07-04: runs both (LMT, then LMT)"),
        ("1892-07-04T12:00~2", "12:00 happens twice on 1892-07-04: this is the second pass (LMT)"),
        ("1892-07-05T12:00", None),
    ]
