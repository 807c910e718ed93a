"""Bindings across DST changes, slot by slot: a table of real slots (the compiler's)
with what each binding must resolve to, and a fold slot's run retried through the
database. The rule is the one :mod:`nbcast.definitions.bindings` documents ("DST"):
minutes and hours move the instant, calendar steps the wall time, read back at the
pass they started from; a wall time in a gap stands for the instant after the gap."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.bindings import Period, parse_binding, resolve, resolve_parameters
from nbcast.definitions.compiler import interval_schedule
from nbcast.definitions.spec import DstFold, DstGap, ScheduleSpec
from nbcast.definitions.versions import publish
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run, RunState
from nbcast.scheduler.period import slot_periods
from tests.notebooks import make_notebook

NY = "America/New_York"


@dataclass(frozen=True)
class Case:
    """A slot of a schedule, a binding, and what it must resolve to."""

    spec: ScheduleSpec
    slot_key: str
    binding: dict[str, Any]
    expected: str


def _daily(cron: str, zone: str, fold: DstFold = DstFold.both) -> ScheduleSpec:
    return ScheduleSpec(cron=cron, timezone=zone, dst_fold=fold, dst_gap=DstGap.shift)


NY_FOLD = _daily("30 1 * * *", NY)
CASES = {
    "ny_fold_both_second_pass_is_est": Case(
        NY_FOLD, "2026-11-01T01:30~2", {"$period": "slot", "format": "datetime"},
        "2026-11-01T01:30:00-05:00",
    ),
    "ny_fold_both_first_pass_is_edt": Case(
        NY_FOLD, "2026-11-01T01:30", {"$period": "slot", "format": "datetime"},
        "2026-11-01T01:30:00-04:00",
    ),
    "ny_fold_last_is_est": Case(
        _daily("30 1 * * *", NY, DstFold.last), "2026-11-01T01:30",
        {"$period": "slot", "format": "%H:%M %z %Z"}, "01:30 -0500 EST",
    ),
    "ny_fold_an_hour_after_the_first_pass_is_the_second": Case(
        NY_FOLD, "2026-11-01T01:30", {"$period": "slot", "steps": [{"hours": 1}],
                                      "format": "datetime"},
        "2026-11-01T01:30:00-05:00",
    ),
    "ny_fold_an_hour_before_the_second_pass_is_the_first": Case(
        NY_FOLD, "2026-11-01T01:30~2", {"$period": "slot", "steps": [{"hours": -1}],
                                        "format": "datetime"},
        "2026-11-01T01:30:00-04:00",
    ),
    "ny_fold_half_an_hour_before_the_second_pass": Case(
        NY_FOLD, "2026-11-01T01:30~2",
        {"$period": "slot", "steps": [{"minutes": -30}], "format": "%Y-%m-%d %H:%M %z"},
        "2026-11-01 01:00 -0500",
    ),
    "ny_fold_second_pass_interval_ends_est": Case(
        NY_FOLD, "2026-11-01T01:30~2", {"$period": "interval_end", "format": "datetime"},
        "2026-11-01T01:30:00-05:00",
    ),
    "ny_fold_next_day_interval_starts_at_the_second_pass": Case(
        NY_FOLD, "2026-11-02T01:30", {"$period": "interval_start", "format": "datetime"},
        "2026-11-01T01:30:00-05:00",
    ),
    "ny_fold_a_day_on_from_saturday_is_the_first_pass": Case(
        NY_FOLD, "2026-10-31T01:30", {"$period": "slot", "steps": [{"days": 1}],
                                      "format": "datetime"},
        "2026-11-01T01:30:00-04:00",
    ),
    "ny_fold_52_weeks_on_from_a_second_pass_keep_it": Case(
        NY_FOLD, "2025-11-02T01:30~2", {"$period": "slot", "steps": [{"weeks": 52}],
                                        "format": "datetime"},
        "2026-11-01T01:30:00-05:00",
    ),
    "ny_spring_gap_a_day_back_is_the_instant_after_the_gap": Case(
        _daily("30 2 * * *", NY), "2026-03-09T02:30",
        {"$period": "slot", "steps": [{"days": -1}], "format": "datetime"},
        "2026-03-08T03:00:00-04:00",
    ),
    "ny_spring_gap_a_day_back_keeps_its_date": Case(
        _daily("30 2 * * *", NY), "2026-03-09T02:30",
        {"$period": "slot", "steps": [{"days": -1}]}, "2026-03-08",
    ),
    "ny_spring_gap_shifted_slot_an_hour_back_is_est": Case(
        _daily("30 2 * * *", NY), "2026-03-08T02:30",
        {"$period": "slot", "steps": [{"hours": -1}], "format": "datetime"},
        "2026-03-08T01:00:00-05:00",
    ),
    "lord_howe_half_hour_after_the_second_pass": Case(
        _daily("45 1 * * *", "Australia/Lord_Howe"), "2026-04-05T01:45~2",
        {"$period": "slot", "steps": [{"minutes": 30}], "format": "datetime"},
        "2026-04-05T02:15:00+10:30",
    ),
    "lord_howe_half_hour_after_the_first_pass_is_the_second": Case(
        _daily("45 1 * * *", "Australia/Lord_Howe"), "2026-04-05T01:45",
        {"$period": "slot", "steps": [{"minutes": 30}], "format": "%H:%M%z"},
        "01:45+1030",
    ),
    "santiago_end_of_a_fold_day_is_its_last_pass": Case(
        _daily("0 12 * * *", "America/Santiago"), "2026-04-04T12:00",
        {"$period": "slot", "steps": [{"to": "end_of_day"}], "format": "datetime"},
        "2026-04-04T23:59:59-04:00",
    ),
    "santiago_start_of_a_gap_day_is_after_the_gap": Case(
        _daily("0 12 * * *", "America/Santiago"), "2026-09-06T12:00",
        {"$period": "slot", "steps": [{"to": "start_of_day"}], "format": "datetime"},
        "2026-09-06T01:00:00-03:00",
    ),
    "apia_the_skipped_friday_is_still_a_business_day": Case(
        _daily("0 7 * * *", "Pacific/Apia"), "2011-12-31T07:00",
        {"$period": "slot", "steps": [{"business_days": -1}]}, "2011-12-30",
    ),
    "apia_the_skipped_friday_as_an_instant": Case(
        _daily("0 7 * * *", "Pacific/Apia"), "2011-12-31T07:00",
        {"$period": "slot", "steps": [{"business_days": -1}], "format": "datetime"},
        "2011-12-31T00:00:00+14:00",
    ),
}  # fmt: skip


def _period_of(spec: ScheduleSpec, key: str) -> Period:
    """The period of the slot ``key`` of ``spec``, from the compiler's slots."""
    schedule = interval_schedule(spec)
    zone = ZoneInfo(spec.timezone)
    around = datetime.fromisoformat(key.removesuffix("~2")).replace(tzinfo=UTC)
    slots = list(schedule.slots(around - timedelta(days=2), around + timedelta(days=2)))
    periods = slot_periods(schedule, zone, slots)
    [period] = [p for s, p in zip(slots, periods, strict=True) if s.key == key]
    return period


@pytest.mark.parametrize("case", list(CASES.values()), ids=list(CASES))
def test_a_binding_across_a_dst_change(case: Case) -> None:
    period = _period_of(case.spec, case.slot_key)
    assert resolve(parse_binding(case.binding, "p"), period) == case.expected


# -- a slot skipped for a DST gap hands its time on ----------------------------------


def test_the_run_after_a_skipped_gap_hour_covers_that_hour() -> None:
    hourly = ScheduleSpec(cron="0 * * * *", timezone=NY)  # gap auto: skip (hourly)
    after = _period_of(hourly, "2026-03-08T03:00")
    assert after.interval_start.isoformat() == "2026-03-08T01:00:00-05:00"
    assert after.interval_end.isoformat() == "2026-03-08T03:00:00-04:00"
    before = _period_of(hourly, "2026-03-08T01:00")
    assert before.interval_start.isoformat() == "2026-03-08T00:00:00-05:00"


def test_the_run_after_a_skipped_gap_day_covers_that_day() -> None:
    daily = ScheduleSpec(cron="30 2 * * *", timezone=NY, dst_gap=DstGap.skip)
    after = _period_of(daily, "2026-03-09T02:30")
    assert after.interval_start.isoformat() == "2026-03-07T02:30:00-05:00"
    assert after.interval_end.isoformat() == "2026-03-09T02:30:00-04:00"
    # Under shift the gap slot fires, and keeps its own day.
    shifted = _period_of(_daily("30 2 * * *", NY), "2026-03-09T02:30")
    assert shifted.interval_start.isoformat() == "2026-03-08T03:00:00-04:00"


# -- a fold slot's run, retried through the database ---------------------------------

BOUND = {
    "at": {"$period": "slot", "format": "datetime"},
    "hour_before": {"$period": "slot", "steps": [{"hours": -1}], "format": "%Y-%m-%d %H:%M %z"},
    "since": {"$period": "interval_start", "format": "datetime"},
    "day": {"$period": "slot", "steps": [{"business_days": -1}]},
}


def test_a_fold_slot_keeps_its_values_through_a_retry(db: Database, tmp_path: Path) -> None:
    spec = {
        "name": "ny-fold",
        "schedule": {
            "cron": "30 1 * * *",
            "timezone": NY,
            "dst": {"fold": "both"},
            "overlap": "allow",
        },
        "parameters": BOUND,
    }
    path = make_notebook(
        tmp_path / "fold.ipynb",
        parameters="at = None\nhour_before = None\nsince = None\nday = None\n",
        body="pass",
        nbcast=spec,
    )
    publish(
        db,
        path,
        caller=Caller(tenant="default", user="t"),
        now=datetime(2026, 10, 31, 12, tzinfo=UTC),
    )
    clock = FixedClock(datetime(2026, 11, 1, 5, 31, tzinfo=UTC))
    materializer = Materializer(db, clock, threads=1)
    materializer.tick()  # the first pass, 01:30 EDT
    clock.advance(3600)
    materializer.tick()  # the second pass, 01:30 EST
    with db.session() as session:
        rows = {r.slot_key: (r.id, r.parameters) for r in session.scalars(sa.select(Run))}
    assert rows["2026-11-01T01:30"][1] == {
        "at": "2026-11-01T01:30:00-04:00",
        "hour_before": "2026-11-01 00:30 -0400",
        "since": "2026-10-31T01:30:00-04:00",
        "day": "2026-10-30",
    }
    second_id, stored = rows["2026-11-01T01:30~2"]
    assert stored == {
        "at": "2026-11-01T01:30:00-05:00",
        "hour_before": "2026-11-01 01:30 -0400",
        "since": "2026-11-01T01:30:00-04:00",
        "day": "2026-10-30",
    }

    queue = RunQueue(db, clock, owner="w", backoff_base=1.0)
    leases = {lease.run_id: queue.start(lease) for lease in queue.claim(10)}
    first = leases.pop(second_id)
    for other in leases.values():
        queue.succeed(other, artifact_sha256=None, duration_s=0.1)
    error = {"ename": "RuntimeError", "evalue": "warehouse away", "traceback": []}
    assert queue.fail(first, error) is RunState.QUEUED
    clock.advance(120)
    [again] = [queue.start(lease) for lease in queue.claim(10)]
    assert (again.run_id, again.attempt) == (second_id, 2)
    assert again.parameters == first.parameters == stored
    assert again.context == first.context
    assert {k: v for k, v in again.run_context().items() if k != "attempt"} == {
        k: v for k, v in first.run_context().items() if k != "attempt"
    }
    # Resolving again from the stored context (what a rerun carries) changes nothing.
    assert again.context is not None
    period = Period(
        datetime.fromisoformat(again.context["nominal"]),
        datetime.fromisoformat(again.context["interval_start"]),
        datetime.fromisoformat(again.context["interval_end"]),
        ZoneInfo(again.context["timezone"]),
    )
    assert resolve_parameters(BOUND, period) == stored
