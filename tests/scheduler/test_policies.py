"""Misfire and overlap decisions, as a pure function."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcast.definitions.compiler import Slot, SlotStatus
from nbcast.definitions.spec import MisfirePolicy, OverlapPolicy, ScheduleSpec
from nbcast.scheduler.models import RunState
from nbcast.scheduler.policies import ActiveRuns, decide

T0 = datetime(2026, 11, 1, 4, 0, tzinfo=UTC)


def slot(minutes: int, skipped: bool = False) -> Slot:
    fire = T0 + timedelta(minutes=minutes)
    return Slot(
        key=fire.strftime("%Y-%m-%dT%H:%M"),
        wall=fire.replace(tzinfo=None),
        local=fire,
        fire_at=fire,
        status=SlotStatus.skipped if skipped else SlotStatus.scheduled,
        reason="dst_gap" if skipped else None,
    )


def outcome(decisions: list) -> list[tuple[str, str | None]]:  # type: ignore[type-arg]
    return [(d.state.value, d.reason) for d in decisions]


HOURLY = [slot(0), slot(60), slot(120), slot(180)]
NOW = T0 + timedelta(minutes=185)  # the first three are missed (grace 10m), the last is not


@pytest.mark.parametrize(
    ("policy", "overlap", "expected"),
    [
        pytest.param(
            MisfirePolicy.run_latest,
            OverlapPolicy.allow,
            [("MISSED", "superseded")] * 3 + [("QUEUED", None)],
            id="run_latest",
        ),
        pytest.param(
            MisfirePolicy.skip,
            OverlapPolicy.allow,
            [("MISSED", "misfire")] * 3 + [("QUEUED", None)],
            id="skip",
        ),
        pytest.param(
            MisfirePolicy.run_all, OverlapPolicy.allow, [("QUEUED", None)] * 4, id="run_all"
        ),
        pytest.param(
            MisfirePolicy.run_all,
            OverlapPolicy.skip,
            [("QUEUED", None)] + [("SKIPPED", "overlap")] * 3,
            id="run_all_through_overlap_skip",
        ),
        pytest.param(
            MisfirePolicy.run_all,
            OverlapPolicy.buffer_one,
            [("QUEUED", None)] + [("SKIPPED", "overlap")] * 3,
            id="run_all_buffer_one",
        ),
        pytest.param(
            MisfirePolicy.run_all,
            OverlapPolicy.buffer_all,
            [("QUEUED", None)] * 4,
            id="run_all_buffer_all",
        ),
        pytest.param(
            MisfirePolicy.run_all,
            OverlapPolicy.replace,
            [("SKIPPED", "overlap")] * 3 + [("QUEUED", None)],
            id="run_all_replace",
        ),
    ],
)
def test_misfire_then_overlap(
    policy: MisfirePolicy, overlap: OverlapPolicy, expected: list[tuple[str, str | None]]
) -> None:
    spec = ScheduleSpec(cron="0 * * * *", misfire=policy, overlap=overlap)
    assert outcome(decide(HOURLY, NOW, spec, ActiveRuns()).items) == expected


def test_run_all_caps_the_catchup() -> None:
    spec = ScheduleSpec(
        cron="0 * * * *", misfire=MisfirePolicy.run_all, max_catchup=2, overlap=OverlapPolicy.allow
    )
    assert outcome(decide(HOURLY, NOW, spec, ActiveRuns()).items) == [
        ("QUEUED", None),
        ("QUEUED", None),
        ("MISSED", "catchup_cap"),
        ("QUEUED", None),
    ]


def test_run_latest_runs_the_newest_even_if_missed() -> None:
    spec = ScheduleSpec(cron="0 * * * *")
    later = T0 + timedelta(hours=10)
    assert outcome(decide(HOURLY, later, spec, ActiveRuns()).items) == [
        ("MISSED", "superseded")
    ] * 3 + [("QUEUED", None)]


def test_gap_slots_are_skipped_whatever_the_policies() -> None:
    slots = [slot(0, skipped=True), slot(1)]
    spec = ScheduleSpec(cron="* * * * *")
    assert outcome(decide(slots, T0 + timedelta(minutes=1), spec, ActiveRuns()).items) == [
        ("SKIPPED", "dst_gap"),
        ("QUEUED", None),
    ]


@pytest.mark.parametrize(
    ("overlap", "active", "expected", "cancel"),
    [
        pytest.param(
            OverlapPolicy.skip,
            ActiveRuns(0, 1),
            ("SKIPPED", "overlap"),
            False,
            id="skip_while_running",
        ),
        pytest.param(
            OverlapPolicy.skip, ActiveRuns(0, 0), ("QUEUED", None), False, id="skip_when_idle"
        ),
        pytest.param(OverlapPolicy.allow, ActiveRuns(3, 1), ("QUEUED", None), False, id="allow"),
        pytest.param(
            OverlapPolicy.buffer_one,
            ActiveRuns(0, 1),
            ("QUEUED", None),
            False,
            id="buffer_one_keeps_one",
        ),
        pytest.param(
            OverlapPolicy.buffer_one,
            ActiveRuns(1, 1),
            ("SKIPPED", "overlap"),
            False,
            id="buffer_one_full",
        ),
        pytest.param(
            OverlapPolicy.buffer_all, ActiveRuns(5, 1), ("QUEUED", None), False, id="buffer_all"
        ),
        pytest.param(
            OverlapPolicy.replace, ActiveRuns(0, 1), ("QUEUED", None), True, id="replace_cancels"
        ),
        pytest.param(
            OverlapPolicy.replace, ActiveRuns(0, 0), ("QUEUED", None), False, id="replace_idle"
        ),
    ],
)
def test_overlap_against_active_runs(
    overlap: OverlapPolicy, active: ActiveRuns, expected: tuple[str, str | None], cancel: bool
) -> None:
    spec = ScheduleSpec(cron="0 * * * *", overlap=overlap)
    result = decide([slot(0)], T0, spec, active)
    assert outcome(result.items) == [expected]
    assert result.cancel_active is cancel


@settings(max_examples=300, deadline=None)
@given(
    pattern=st.lists(st.booleans(), min_size=0, max_size=30),
    lateness=st.integers(min_value=0, max_value=2000),
    misfire=st.sampled_from(list(MisfirePolicy)),
    overlap=st.sampled_from(list(OverlapPolicy)),
    cap=st.integers(min_value=1, max_value=10),
    queued=st.integers(min_value=0, max_value=2),
    started=st.integers(min_value=0, max_value=2),
)
def test_every_slot_gets_exactly_one_decision(
    pattern: list[bool],
    lateness: int,
    misfire: MisfirePolicy,
    overlap: OverlapPolicy,
    cap: int,
    queued: int,
    started: int,
) -> None:
    slots = [slot(i * 15, skipped=skip) for i, skip in enumerate(pattern)]
    now = T0 + timedelta(minutes=15 * max(len(slots) - 1, 0) + lateness)
    spec = ScheduleSpec(cron="*/15 * * * *", misfire=misfire, overlap=overlap, max_catchup=cap)
    result = decide(slots, now, spec, ActiveRuns(queued, started))
    assert [d.slot for d in result.items] == slots
    for d in result.items:
        assert (d.state is RunState.QUEUED) == (d.reason is None)
        if d.slot.status is SlotStatus.skipped:
            assert (d.state, d.reason) == (RunState.SKIPPED, "dst_gap")
        missed = now > d.slot.fire_at + spec.grace
        if d.state is RunState.MISSED:
            assert missed
    runs = [d for d in result.items if d.state is RunState.QUEUED]
    if overlap is OverlapPolicy.skip:
        assert len(runs) <= (0 if queued + started else 1)
    if overlap is OverlapPolicy.buffer_one:
        assert len(runs) <= (0 if queued else 1)
    if overlap is OverlapPolicy.replace:
        assert len(runs) <= 1
    if misfire is MisfirePolicy.run_all:
        missed_runs = [d for d in runs if now > d.slot.fire_at + spec.grace]
        assert len(missed_runs) <= cap
