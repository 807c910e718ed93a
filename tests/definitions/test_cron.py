"""Cron parsing (cronie syntax), the cronie day rule and ``fires_at_least_hourly``."""

from __future__ import annotations

from datetime import date, datetime, timedelta
from typing import Any

import pytest
from croniter import croniter
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcast.definitions.cron import CronExpression
from nbcast.errors import ScheduleError

ALL_MINUTES = tuple(range(60))
ALL_HOURS = tuple(range(24))
ALL_DAYS = tuple(range(1, 32))
ALL_MONTHS = tuple(range(1, 13))
ALL_WEEKDAYS = tuple(range(7))


def fields(text: str) -> tuple[tuple[int, ...], ...]:
    cron = CronExpression.parse(text)
    return (cron.minutes, cron.hours, cron.days, cron.months, cron.weekdays)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        pytest.param(
            "* * * * *",
            (ALL_MINUTES, ALL_HOURS, ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS),
            id="all_stars",
        ),
        pytest.param("5 4 3 2 1", ((5,), (4,), (3,), (2,), (1,)), id="single_values"),
        pytest.param(
            "0 0 * jan,Mar,DEC *",
            ((0,), (0,), ALL_DAYS, (1, 3, 12), ALL_WEEKDAYS),
            id="month_names_any_case",
        ),
        pytest.param(
            "0 0 * * mon-fri",
            ((0,), (0,), ALL_DAYS, ALL_MONTHS, (1, 2, 3, 4, 5)),
            id="weekday_name_range",
        ),
        pytest.param("0 0 * * 0", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0,)), id="sunday_is_0"),
        pytest.param("0 0 * * 7", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0,)), id="sunday_is_7"),
        pytest.param(
            "0 0 * * 5-7", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0, 5, 6)), id="range_through_7"
        ),
        pytest.param(
            "*/15 */6 * * *",
            ((0, 15, 30, 45), (0, 6, 12, 18), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS),
            id="star_steps",
        ),
        pytest.param(
            "10-20/5 6-16/4 * * *",
            ((10, 15, 20), (6, 10, 14), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS),
            id="range_steps",
        ),
        pytest.param(
            "7/20 22/1 * * *",
            ((7, 27, 47), (22, 23), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS),
            id="start_step_means_start_to_max",
        ),
        pytest.param(
            "0 0 */10 * *", ((0,), (0,), (1, 11, 21, 31), ALL_MONTHS, ALL_WEEKDAYS), id="dom_step"
        ),
        pytest.param(
            "1,2,5-6,30-31/1 0 * * *",
            ((1, 2, 5, 6, 30, 31), (0,), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS),
            id="lists_mix_items",
        ),
        pytest.param("@yearly", ((0,), (0,), (1,), (1,), ALL_WEEKDAYS), id="macro_yearly"),
        pytest.param("@annually", ((0,), (0,), (1,), (1,), ALL_WEEKDAYS), id="macro_annually"),
        pytest.param("@monthly", ((0,), (0,), (1,), ALL_MONTHS, ALL_WEEKDAYS), id="macro_monthly"),
        pytest.param("@weekly", ((0,), (0,), ALL_DAYS, ALL_MONTHS, (0,)), id="macro_weekly"),
        pytest.param("@daily", ((0,), (0,), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS), id="macro_daily"),
        pytest.param(
            "@midnight", ((0,), (0,), ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS), id="macro_midnight"
        ),
        pytest.param(
            " @HOURLY ", ((0,), ALL_HOURS, ALL_DAYS, ALL_MONTHS, ALL_WEEKDAYS), id="macro_hourly"
        ),
        pytest.param("0\t0  1 1\t*", ((0,), (0,), (1,), (1,), ALL_WEEKDAYS), id="tabs_and_spaces"),
    ],
)
def test_parse(text: str, expected: tuple[tuple[int, ...], ...]) -> None:
    assert fields(text) == expected


@pytest.mark.parametrize(
    ("text", "dom_star", "dow_star"),
    [
        pytest.param("0 0 * * *", True, True, id="both_star"),
        pytest.param("0 0 */2 * mon", True, False, id="dom_star_step"),
        pytest.param("0 0 1 * */2", False, True, id="dow_star_step"),
        pytest.param("0 0 1 * mon", False, False, id="neither"),
        pytest.param("0 0 1-31 * 0-7", False, False, id="full_ranges_are_not_stars"),
    ],
)
def test_star_flags(text: str, dom_star: bool, dow_star: bool) -> None:
    cron = CronExpression.parse(text)
    assert (cron.dom_star, cron.dow_star) == (dom_star, dow_star)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        pytest.param("", "an expression is required", id="empty"),
        pytest.param("   ", "an expression is required", id="blank"),
        pytest.param("* * * *", "has 4 fields; five are needed", id="four_fields"),
        pytest.param("0 * * * * *", "has 6 fields; five are needed", id="six_fields_seconds"),
        pytest.param("60 * * * *", "cron minute: 60 is outside 0-59", id="minute_60"),
        pytest.param("* 24 * * *", "cron hour: 24 is outside 0-23", id="hour_24"),
        pytest.param("* * 0 * *", "cron day of month: 0 is outside 1-31", id="dom_0"),
        pytest.param("* * 32 * *", "cron day of month: 32 is outside 1-31", id="dom_32"),
        pytest.param("* * * 13 *", "cron month: 13 is outside 1-12", id="month_13"),
        pytest.param("* * * * 8", "cron day of week: 8 is outside 0-7", id="dow_8"),
        pytest.param("* * * foo *", "'foo' is not a number or a known name", id="bad_month_name"),
        pytest.param("* * * * mon-sunday", "'sunday' is not a number", id="long_day_name"),
        pytest.param("jan * * * *", "cron minute: 'jan' is not a number", id="name_in_minute"),
        pytest.param("30-10 * * * *", "range '30-10' runs backwards", id="backwards_range"),
        pytest.param("* * * * fri-sun", "range 'fri-sun' runs backwards", id="backwards_names"),
        pytest.param("*/0 * * * *", "step 0 is out of range", id="step_zero"),
        pytest.param("*/61 * * * *", "step 61 is out of range", id="step_too_big"),
        pytest.param("1,,2 * * * *", "cannot parse ''", id="empty_list_item"),
        pytest.param("*-5 * * * *", "cannot parse '*-5'", id="star_range"),
        pytest.param("-5 * * * *", "cannot parse '-5'", id="negative"),
        pytest.param("@reboot", "unknown macro '@reboot'", id="reboot_is_not_a_schedule"),
        pytest.param("@fortnightly", "unknown macro", id="unknown_macro"),
    ],
)
def test_parse_errors(text: str, message: str) -> None:
    with pytest.raises(ScheduleError, match=r"^cron") as caught:
        CronExpression.parse(text)
    assert message in str(caught.value)
    assert "\n" not in str(caught.value)


def test_parse_refuses_non_strings() -> None:
    with pytest.raises(ScheduleError, match="an expression is required"):
        CronExpression.parse(None)  # type: ignore[arg-type]


# ----------------------------------------------------------------------------- day rule

JUNE_2026 = [date(2026, 6, d) for d in range(1, 31)]  # 2026-06-01 is a Monday


@pytest.mark.parametrize(
    ("text", "days"),
    [
        pytest.param("0 0 1 * mon", [1, 8, 15, 22, 29], id="dom_or_dow_when_neither_star"),
        pytest.param("0 0 2 * mon", [1, 2, 8, 15, 22, 29], id="dom_or_dow_adds_days"),
        pytest.param("0 0 */2 * mon", [1, 15, 29], id="dom_star_step_and_dow"),
        pytest.param("0 0 1-7 * */1", [1, 2, 3, 4, 5, 6, 7], id="dow_star_step_and_dom"),
        pytest.param("0 0 * * mon", [1, 8, 15, 22, 29], id="dow_only"),
        pytest.param("0 0 13 * *", [13], id="dom_only"),
        pytest.param("0 0 13 * fri", [5, 12, 13, 19, 26], id="friday_or_13th"),
        pytest.param("0 0 * * sat,sun", [6, 7, 13, 14, 20, 21, 27, 28], id="weekend"),
        pytest.param("0 0 * * 0", [7, 14, 21, 28], id="sunday_0"),
        pytest.param("0 0 * * 7", [7, 14, 21, 28], id="sunday_7"),
        pytest.param("0 0 31 * *", [], id="june_has_no_31st"),
        pytest.param("0 0 * jul *", [], id="other_month"),
        pytest.param("0 0 31 jul mon", [], id="or_rule_still_needs_the_month"),
    ],
)
def test_day_rule(text: str, days: list[int]) -> None:
    cron = CronExpression.parse(text)
    assert [d.day for d in JUNE_2026 if cron.matches_day(d)] == days


def test_matches_day_accepts_datetimes() -> None:
    assert CronExpression.parse("0 0 1 * *").matches_day(datetime(2026, 6, 1, 13, 5))


@pytest.mark.parametrize(
    ("text", "hourly"),
    [
        pytest.param("* * * * *", True, id="every_minute"),
        pytest.param("0 * * * *", True, id="top_of_each_hour"),
        pytest.param("17 */1 1 jan mon", True, id="all_hours_on_few_days"),
        pytest.param("0 0-23 * * *", True, id="full_range"),
        pytest.param("0 0-11,12-23 * * *", True, id="full_list"),
        pytest.param("@hourly", True, id="macro_hourly"),
        pytest.param("0 */2 * * *", False, id="every_two_hours"),
        pytest.param("0 0-22 * * *", False, id="23_hours"),
        pytest.param("30 2 * * *", False, id="daily"),
        pytest.param("@daily", False, id="macro_daily"),
    ],
)
def test_fires_at_least_hourly(text: str, hourly: bool) -> None:
    assert CronExpression.parse(text).fires_at_least_hourly is hourly


# ----------------------------------------------------------------------------- vs croniter

# croniter reads a dom/dow that is '*/n' as restricted (OR rule) where cronie reads it as
# a star (AND rule), and croniter 7 mis-reads one-day ranges such as '1-1' (it matches
# every day), so the cross-check draws only fields where the two agree.
_plain_items = st.one_of(
    st.integers(1, 31).map(str),
    st.tuples(st.integers(1, 30), st.integers(1, 30)).map(
        lambda t: f"{t[0]}-{min(t[0] + t[1], 31)}"
    ),
)
_dom = st.one_of(st.just("*"), st.lists(_plain_items, min_size=1, max_size=3).map(",".join))
_dow = st.one_of(
    st.just("*"),
    st.lists(st.sampled_from(["0", "1", "3", "5", "6", "7", "mon", "fri", "1-5"]), min_size=1).map(
        ",".join
    ),
)
_month = st.one_of(st.just("*"), st.sampled_from(["1", "2", "2-4", "jun,dec", "*/3", "7/2"]))


@settings(max_examples=100, deadline=None)
@given(dom=_dom, month=_month, dow=_dow, start=st.dates(date(2000, 1, 1), date(2040, 1, 1)))
def test_day_matching_agrees_with_croniter(dom: str, month: str, dow: str, start: date) -> None:
    text = f"0 0 {dom} {month} {dow}"
    cron = CronExpression.parse(text)
    for offset in range(0, 120, 3):
        day = start + timedelta(days=offset)
        expected: Any = croniter.match(text, datetime(day.year, day.month, day.day))
        assert cron.matches_day(day) is bool(expected), (text, day)
