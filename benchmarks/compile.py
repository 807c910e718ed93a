"""Schedule compiler throughput: slots per second over a 30-day window, as JSON.

Run ``python benchmarks/compile.py`` (``--days N``, ``--repeat N``). Each figure is the
best of ``repeat`` timed passes over one window that contains a DST transition
(2026-03-01 to 2026-03-31 UTC), after one untimed warm-up pass that fills the
per-(zone, year) transition cache; ``cold_slots_per_s`` is that first pass.
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import UTC, datetime, timedelta
from zoneinfo import available_timezones

from nbcast.definitions.compiler import compile_schedule
from nbcast.definitions.spec import ScheduleSpec

WINDOW_START = datetime(2026, 3, 1, tzinfo=UTC)


def _run(specs: list[ScheduleSpec], days: int) -> tuple[int, float]:
    end = WINDOW_START + timedelta(days=days)
    began = time.perf_counter()
    count = 0
    for spec in specs:
        for _slot in compile_schedule(spec).slots(WINDOW_START, end):
            count += 1
    return count, time.perf_counter() - began


def measure(name: str, specs: list[ScheduleSpec], days: int, repeat: int) -> dict[str, object]:
    """Time listing every slot of ``specs`` over ``days`` days; return one JSON record."""
    count, cold = _run(specs, days)
    best = min(_run(specs, days)[1] for _ in range(repeat))
    return {
        "schedule": name,
        "definitions": len(specs),
        "slots": count,
        "seconds": round(best, 4),
        "slots_per_s": round(count / best),
        "cold_slots_per_s": round(count / cold),
    }


def main() -> None:
    """Print the figures as one JSON document."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    zones = sorted(available_timezones())
    cases = {
        "every_minute_utc": [ScheduleSpec(cron="* * * * *")],
        "every_minute_new_york": [ScheduleSpec(cron="* * * * *", timezone="America/New_York")],
        "hourly_berlin": [ScheduleSpec(cron="0 * * * *", timezone="Europe/Berlin")] * 50,
        "daily_all_zones": [ScheduleSpec(cron="30 2 * * *", timezone=zone) for zone in zones],
        "every_15m_interval_new_york": [
            ScheduleSpec(every=timedelta(minutes=15), timezone="America/New_York")
        ]
        * 10,
    }
    results = [measure(name, specs, args.days, args.repeat) for name, specs in cases.items()]
    print(json.dumps({"window_days": args.days, "results": results}, indent=2))


if __name__ == "__main__":
    main()
