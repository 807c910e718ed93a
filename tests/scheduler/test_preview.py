"""``preview``: JSON rows, formats, the [from, to) range and one-line errors."""

from __future__ import annotations

import json
from datetime import UTC, date, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo

import pytest

import nbcast.scheduler.preview as preview_module
from nbcast.definitions.spec import DstGap, ScheduleSpec
from nbcast.definitions.transitions import day_start, range_bound
from nbcast.errors import ScheduleError
from nbcast.scheduler.preview import MAX_PREVIEW_SLOTS, PREVIEW_COLUMNS, preview, table_cells


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0, *rest: int) -> datetime:
    second, micro = (*rest, 0, 0)[:2]
    return datetime(year, month, day, hour, minute, second, micro, tzinfo=UTC)


def test_public_api() -> None:
    assert sorted(preview_module.__all__) == [
        "MAX_PREVIEW_SLOTS",
        "PREVIEW_COLUMNS",
        "PreviewRow",
        "preview",
        "preview_definition",
        "slot_row",
        "table_cells",
    ]
    assert MAX_PREVIEW_SLOTS == 100_000


def test_rows_have_exactly_the_documented_keys_and_formats() -> None:
    rows = preview(
        cron="30 2 * * *",
        tz="America/New_York",
        range_from=utc(2026, 3, 7),
        range_to=utc(2026, 3, 9),
    )
    assert rows == [
        {
            "slot_key": "2026-03-07T02:30",
            "local": "2026-03-07T02:30:00-05:00",
            "fire_at": "2026-03-07T07:30:00Z",
            "status": "scheduled",
            "reason": None,
        },
        {
            "slot_key": "2026-03-08T02:30",
            "local": "2026-03-08T03:00:00-04:00",
            "fire_at": "2026-03-08T07:00:00Z",
            "status": "scheduled",
            "reason": None,
        },
    ]
    assert json.loads(json.dumps(rows)) == rows


def test_skipped_and_fold_rows() -> None:
    rows = preview(
        cron="30 1,2 * * *",
        tz="America/New_York",
        dst_gap="skip",
        dst_fold="both",
        range_from=utc(2026, 3, 8),
        range_to=utc(2026, 11, 2),
    )
    by_key = {row["slot_key"]: row for row in rows}
    assert by_key["2026-03-08T02:30"] == {
        "slot_key": "2026-03-08T02:30",
        "local": "2026-03-08T03:00:00-04:00",
        "fire_at": "2026-03-08T07:00:00Z",
        "status": "skipped",
        "reason": "dst_gap",
    }
    assert by_key["2026-11-01T01:30~2"]["local"] == "2026-11-01T01:30:00-05:00"
    assert by_key["2026-11-01T01:30~2"]["fire_at"] == "2026-11-01T06:30:00Z"


def test_range_is_from_inclusive_to_exclusive() -> None:
    rows = preview(cron="0 * * * *", range_from=utc(2026, 5, 1, 10), range_to=utc(2026, 5, 1, 12))
    assert [row["slot_key"] for row in rows] == ["2026-05-01T10:00", "2026-05-01T11:00"]


def test_range_in_other_offsets() -> None:
    rows = preview(
        cron="0 * * * *",
        range_from=datetime.fromisoformat("2026-05-01T12:00:00+02:00"),
        range_to=datetime.fromisoformat("2026-05-01T11:00:00Z"),
    )
    assert [row["fire_at"] for row in rows] == ["2026-05-01T10:00:00Z"]


def test_every_with_start_anchor() -> None:
    rows = preview(
        every="15m",
        start=utc(2026, 1, 1, 0, 5),
        tz="Asia/Kolkata",
        range_from=utc(2026, 5, 1, 10),
        range_to=utc(2026, 5, 1, 10, 30),
    )
    assert rows == [
        {
            "slot_key": "2026-05-01T10:05:00Z",
            "local": "2026-05-01T15:35:00+05:30",
            "fire_at": "2026-05-01T10:05:00Z",
            "status": "scheduled",
            "reason": None,
        },
        {
            "slot_key": "2026-05-01T10:20:00Z",
            "local": "2026-05-01T15:50:00+05:30",
            "fire_at": "2026-05-01T10:20:00Z",
            "status": "scheduled",
            "reason": None,
        },
    ]


def test_every_start_is_also_the_first_slot() -> None:
    rows = preview(
        every="1h",
        start=utc(2026, 5, 1, 10, 30),
        range_from=utc(2026, 5, 1),
        range_to=utc(2026, 5, 1, 12),
    )
    assert [row["slot_key"] for row in rows] == ["2026-05-01T10:30:00Z", "2026-05-01T11:30:00Z"]


def test_every_without_start_is_anchored_at_the_epoch() -> None:
    rows = preview(every="1h30m", range_from=utc(2026, 5, 1), range_to=utc(2026, 5, 1, 3))
    assert [row["slot_key"] for row in rows] == ["2026-05-01T00:00:00Z", "2026-05-01T01:30:00Z"]


def test_preview_of_a_spec() -> None:
    spec = ScheduleSpec(cron="30 2 * * *", timezone="America/New_York", dst_gap=DstGap.skip)
    rows = preview(spec, range_from=utc(2026, 3, 8), range_to=utc(2026, 3, 9))
    assert [(row["status"], row["reason"]) for row in rows] == [("skipped", "dst_gap")]


def test_limit_is_exact() -> None:
    hour = {"cron": "* * * * *", "range_from": utc(2026, 1, 1), "range_to": utc(2026, 1, 1, 1)}
    assert len(preview(**hour, limit=60)) == 60  # type: ignore[arg-type]
    with pytest.raises(ScheduleError, match="more than 59 slots"):
        preview(**hour, limit=59)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        pytest.param({"cron": "* * *"}, "cron: '* * *' has 3 fields", id="bad_cron"),
        pytest.param({"cron": "0 25 * * *"}, "cron hour: 25 is outside 0-23", id="bad_hour"),
        pytest.param(
            {"cron": "* * * * *", "tz": "Europe/Atlantis"},
            "timezone: 'Europe/Atlantis' is not an IANA time zone",
            id="unknown_zone",
        ),
        pytest.param(
            {"cron": "* * * * *", "range_to": utc(2026, 1, 1)},
            "must be before to",
            id="from_equals_to",
        ),
        pytest.param(
            {"cron": "* * * * *", "range_to": utc(2025, 1, 1)},
            "must be before to",
            id="from_after_to",
        ),
        pytest.param(
            {"cron": "* * * * *", "range_to": utc(2026, 3, 15)},
            "more than 100,000 slots",
            id="too_many_slots",
        ),
        pytest.param(
            {"cron": "* * * * *", "range_to": utc(2026, 1, 1, 2), "limit": 100},
            "more than 100 slots",
            id="too_many_slots_own_limit",
        ),
        pytest.param(
            {"every": "fortnight"}, "every: 'fortnight' is not a duration", id="bad_every"
        ),
        pytest.param({"every": "30s"}, "every: 30s is shorter than 1m", id="every_too_short"),
        pytest.param({"every": "0"}, "shorter than 1m", id="every_zero"),
        pytest.param({"cron": "* * * * *", "every": "5m"}, "exactly one of", id="cron_and_every"),
        pytest.param({}, "exactly one of", id="neither_cron_nor_every"),
        pytest.param(
            {"cron": "* * * * *", "start": utc(2026, 1, 1)},
            "start applies to every schedules only",
            id="start_with_cron",
        ),
        pytest.param(
            {"every": "5m", "start": datetime(2026, 1, 1)},
            "start: 2026-01-01T00:00:00 has no UTC offset",
            id="naive_start",
        ),
        pytest.param(
            {"cron": "* * * * *", "range_from": datetime(2026, 1, 1)},
            "from: 2026-01-01T00:00:00 has no UTC offset",
            id="naive_from",
        ),
        pytest.param(
            {"cron": "* * * * *", "dst_gap": "later"},
            "dst gap: 'later' is not one of auto|shift|skip",
            id="bad_gap_policy",
        ),
        pytest.param(
            {"cron": "* * * * *", "dst_fold": "twice"},
            "dst fold: 'twice' is not one of auto|first|last|both",
            id="bad_fold_policy",
        ),
    ],
)
def test_errors(kwargs: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {"range_from": utc(2026, 1, 1), "range_to": utc(2026, 1, 2)}
    arguments.update(kwargs)
    with pytest.raises(ScheduleError) as caught:
        preview(**arguments)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_spec_and_cron_together_are_refused() -> None:
    with pytest.raises(ScheduleError, match="a spec or cron/every, not both"):
        preview(
            ScheduleSpec(cron="@daily"),
            cron="@hourly",
            range_from=utc(2026, 1, 1),
            range_to=utc(2026, 1, 2),
        )


@pytest.mark.timeout(60)
def test_too_many_slots_stops_early(monkeypatch: pytest.MonkeyPatch) -> None:
    """A range of a century of minutes fails after ``limit + 1`` slots instead of listing
    52 million of them."""
    drawn = 0
    real_compile = preview_module.compile_schedule

    def counting(*args: Any, **kwargs: Any) -> Any:
        compiled = real_compile(*args, **kwargs)
        real_slots = compiled.slots

        def slots(low: datetime, high: datetime) -> Any:
            nonlocal drawn
            for slot in real_slots(low, high):
                drawn += 1
                yield slot

        monkeypatch.setattr(compiled, "slots", slots)
        return compiled

    monkeypatch.setattr(preview_module, "compile_schedule", counting)
    with pytest.raises(ScheduleError, match="narrow the range"):
        preview(cron="* * * * *", range_from=utc(2000, 1, 1), range_to=utc(2100, 1, 1))
    assert drawn == MAX_PREVIEW_SLOTS + 1  # enumeration stopped one past the limit


def test_table_cells() -> None:
    rows = preview(
        cron="*/15 2 * * *",
        tz="America/New_York",
        range_from=utc(2026, 3, 8),
        range_to=utc(2026, 3, 9),
    )
    columns, cells = table_cells(rows)
    assert columns == list(PREVIEW_COLUMNS)
    assert len(cells) == 4
    assert cells[1] == [
        "2026-03-08T02:15",
        "2026-03-08T03:00-04:00",
        "2026-03-08T07:00Z",
        "skipped",
        "dst_gap",
    ]
    for row in rows:
        row["parameters"] = {"day": "2026-03-07", "region": "EMEA"}
    columns, cells = table_cells(rows)
    assert columns[-1] == "parameters"
    assert cells[0][-1] == "day=2026-03-07, region=EMEA"


def test_a_bare_date_is_the_start_of_that_day_in_the_schedules_zone() -> None:
    rows = preview(
        cron="0 0 * * *",
        tz="America/Santiago",
        range_from=date(2026, 9, 5),  # midnight, the last before the spring-forward
        range_to=date(2026, 9, 7),  # 6 September starts at 01:00: midnight is in the gap
    )
    assert [r["fire_at"] for r in rows] == ["2026-09-05T04:00:00Z", "2026-09-06T04:00:00Z"]
    assert [r["local"] for r in rows] == [
        "2026-09-05T00:00:00-04:00",
        "2026-09-06T01:00:00-03:00",  # the gap slot shifted to where the day starts
    ]


@pytest.mark.parametrize(
    ("zone", "day", "start"),
    [
        ("Europe/Berlin", date(2026, 10, 5), "2026-10-04T22:00:00+00:00"),
        ("America/Santiago", date(2026, 9, 6), "2026-09-06T04:00:00+00:00"),  # gap at 00:00
        ("America/Havana", date(2026, 3, 8), "2026-03-08T05:00:00+00:00"),  # gap at 00:00
        ("Australia/Lord_Howe", date(2026, 4, 5), "2026-04-04T13:00:00+00:00"),
        ("UTC", date(2026, 1, 1), "2026-01-01T00:00:00+00:00"),
    ],
)
def test_day_start_is_the_first_instant_of_the_local_day(zone: str, day: date, start: str) -> None:
    instant = day_start(day, ZoneInfo(zone))
    assert instant.isoformat() == start
    assert instant.astimezone(ZoneInfo(zone)).date() == day
    assert (instant - timedelta(seconds=1)).astimezone(ZoneInfo(zone)).date() < day
    assert range_bound(instant, ZoneInfo("Asia/Tokyo")) == instant  # instants stay instants
