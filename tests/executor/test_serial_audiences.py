"""Serial runs are one at a time per definition *and audience*: a slot of a
recipient-scoped report runs its audiences side by side, while a second slot of one
audience waits for that audience's first — on both back ends (the PostgreSQL claim
function and the Python claim)."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.materializer import Materializer
from tests.scheduler.test_audiences import T0, THREE, define, runs


def test_the_audiences_of_a_slot_run_side_by_side_and_each_in_order(
    db: Database, tmp_path: Path
) -> None:
    define(
        db,
        tmp_path,
        "sales",
        {"cron": "0 * * * *", "overlap": "buffer_all"},  # serial: every slot queued in order
        THREE,
    )
    clock = FixedClock(T0 + timedelta(hours=1, minutes=1))
    Materializer(db, clock).tick()  # the 01:00 slot, on time
    clock.advance(timedelta(hours=1))
    Materializer(db, clock).tick()  # the 02:00 slot, queued behind it (buffer_all)
    queued = [r for r in runs(db) if r.state == "QUEUED"]
    audiences = {r.audience for r in queued}
    assert len(audiences) == 3
    slots = sorted({r.slot_key for r in queued if r.slot_key})
    assert len(slots) >= 2  # two slots of each audience are waiting

    queue = RunQueue(db, clock, owner="w")
    first = queue.claim(10)
    # One run per audience (side by side), and of each the earliest slot only.
    assert sorted(lease.audience for lease in first) == sorted(audiences)
    assert {lease.slot_key for lease in first} == {slots[0]}
    assert queue.claim(10) == []  # the later slots wait for their audience's run
    lease = next(lease for lease in first if lease.audience == "")
    queue.start(lease)
    queue.succeed(lease, artifact_sha256=None, duration_s=0.1)
    (following,) = queue.claim(10)  # that audience's next slot, only
    assert (following.audience, following.slot_key) == ("", slots[1])
