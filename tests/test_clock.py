"""The injectable clock."""

from __future__ import annotations

import time
from datetime import UTC, datetime, timedelta, timezone

import pytest

from nbcast.clock import AcceleratedClock, FixedClock, SystemClock, clock_from_env, parse_instant
from nbcast.errors import ConfigError

T0 = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)


def test_system_clock_is_aware_utc() -> None:
    now = SystemClock().now()
    assert now.tzinfo is not None
    assert now.utcoffset() == timedelta(0)
    assert abs((now - datetime.now(UTC)).total_seconds()) < 5


def test_fixed_clock_moves_only_when_told() -> None:
    clock = FixedClock(T0)
    assert clock.now() == T0
    clock.sleep(90)
    assert clock.now() == T0 + timedelta(seconds=90)
    clock.advance(timedelta(hours=1))
    assert clock.now() == T0 + timedelta(hours=1, seconds=90)
    with pytest.raises(ConfigError):
        clock.set(T0)
    with pytest.raises(ConfigError):
        clock.advance(-1)


def test_fixed_clock_normalizes_offsets_to_utc() -> None:
    clock = FixedClock(datetime(2026, 3, 8, 1, 0, tzinfo=timezone(timedelta(hours=-5))))
    assert clock.now() == T0
    assert clock.now().utcoffset() == timedelta(0)


@pytest.mark.timeout(30)
def test_accelerated_clock_runs_faster_and_agrees_across_instances() -> None:
    epoch = time.time()
    a = AcceleratedClock(T0, 3600, epoch)
    b = AcceleratedClock(T0, 3600, epoch)
    time.sleep(0.05)
    first, second = a.now(), b.now()
    assert timedelta(seconds=100) < first - T0 < timedelta(hours=1)
    assert abs((first - second).total_seconds()) < 60  # same simulated time, ±60 simulated s
    before = a.now()
    a.sleep(3600)  # a simulated hour = 1 s real (slept as real time, the timeout ends it)
    assert a.now() - before >= timedelta(hours=1)


@pytest.mark.timeout(30)
def test_sleep_returns_early_on_wake() -> None:
    clock = SystemClock()
    clock.wake()
    clock.sleep(3600)  # returns at once: a wake before the sleep counts (else: the timeout)


@pytest.mark.parametrize(
    ("spec", "expected_type"),
    [
        pytest.param({}, SystemClock, id="unset"),
        pytest.param({"NBCAST_CLOCK": "system"}, SystemClock, id="system"),
        pytest.param({"NBCAST_CLOCK": "fixed:2026-03-08T06:00:00Z"}, FixedClock, id="fixed"),
        pytest.param(
            {"NBCAST_CLOCK": "accelerated:2026-03-08T06:00:00Z:60", "NBCAST_CLOCK_EPOCH": "1000"},
            AcceleratedClock,
            id="accelerated",
        ),
    ],
)
def test_clock_from_env(spec: dict[str, str], expected_type: type) -> None:
    clock = clock_from_env(spec)
    assert type(clock) is expected_type
    if isinstance(clock, FixedClock):
        assert clock.now() == T0
    if isinstance(clock, AcceleratedClock):
        assert clock.start == T0
        assert clock.factor == 60
        assert clock.epoch == 1000


@pytest.mark.parametrize("spec", ["sundial", "fixed:2026-03-08T06:00:00", "accelerated:x"])
def test_bad_clock_specs_are_refused(spec: str) -> None:
    with pytest.raises(ConfigError):
        clock_from_env({"NBCAST_CLOCK": spec})


def test_parse_instant_requires_an_offset() -> None:
    assert parse_instant("2026-03-08T01:00:00-05:00") == T0
    assert parse_instant("2026-03-08T06:00Z") == T0
    with pytest.raises(ConfigError, match="no UTC offset"):
        parse_instant("2026-03-08T06:00")
    with pytest.raises(ConfigError, match="not an ISO 8601"):
        parse_instant("yesterday")


def test_rate_is_clock_seconds_per_real_second() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    assert SystemClock().rate == 1.0
    assert FixedClock(start).rate == 0.0
    assert SystemClock().real
    assert not AcceleratedClock(start, 1.0).real  # real-time speed is not the real clock
    fast = AcceleratedClock(start, 60.0)
    assert fast.rate == 60.0
    before = fast.now()
    time.sleep(0.05)
    assert (fast.now() - before).total_seconds() >= 0.05 * fast.rate
