"""The services' one supervisor: failed iterations are logged and the loop goes on,
signals stop and then halt, and every service keeps a heartbeat row — read here
while each real service runs, on PostgreSQL."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.clock import FixedClock
from nbcast.daemon import Service, Step, Supervisor
from nbcast.db import Database
from nbcast.heartbeats import ServiceHeartbeat
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 7, tzinfo=UTC)


class Flaky(Service):
    """Fails every third iteration; ends after ``limit`` iterations or when stopped."""

    kind = "test"

    def __init__(self, limit: int = 9) -> None:
        super().__init__()
        self.name = "flaky"
        self.limit = limit
        self.seen = 0
        self.halted = False
        self.closed = False

    def steps(self) -> Iterator[Step]:
        while not self.stopping:
            self.seen += 1
            error = RuntimeError(f"iteration {self.seen}") if self.seen % 3 == 0 else None
            yield Step(
                error=error, sleep=1.0, detail={"seen": self.seen}, done=self.seen >= self.limit
            )

    def halt(self) -> None:
        super().halt()
        self.halted = True

    def close(self) -> None:
        self.closed = True


def beats(db: Database) -> list[ServiceHeartbeat]:
    with db.session() as session:
        return list(session.scalars(sa.select(ServiceHeartbeat).order_by(ServiceHeartbeat.kind)))


def test_failed_iterations_are_logged_and_the_loop_goes_on(
    db: Database, caplog: pytest.LogCaptureFixture
) -> None:
    clock = FixedClock(T0)
    service = Flaky()
    supervisor = Supervisor(db, clock, service, heartbeat_every=0)
    supervisor.run()
    assert service.seen == 9
    assert service.closed
    assert supervisor.errors == 3
    assert [r.message for r in caplog.records if "iteration failed" in r.message] == [
        f"test iteration failed: iteration {n}" for n in (3, 6, 9)
    ]
    (row,) = beats(db)
    assert (row.kind, row.name, row.state) == ("test", "flaky", "stopped")
    assert (row.iterations, row.errors) == (9, 3)
    assert row.last_error == "RuntimeError: iteration 9"
    assert row.detail == {"seen": 9, "heartbeat_every_s": 0}
    assert row.pid == os.getpid()
    assert row.stopped_at == clock.now()
    # The supervisor slept on the service's clock between the idle steps.
    assert (clock.now() - T0).total_seconds() == 8.0


def test_the_first_signal_stops_the_second_halts(db: Database) -> None:
    service = Flaky(limit=10**9)
    supervisor = Supervisor(db, FixedClock(T0), service, heartbeat_every=0)
    supervisor._on_signal(signal.SIGTERM, None)
    assert service.stopping
    assert not service.halted
    supervisor._on_signal(signal.SIGTERM, None)
    assert service.halted
    supervisor.run()
    assert service.seen == 0
    assert beats(db)[0].state == "stopped"


def test_a_heartbeat_the_database_refuses_does_not_stop_the_service(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    with db.engine.begin() as conn:
        conn.execute(sa.text("DROP TABLE service_heartbeats"))
    service = Flaky(limit=4)
    Supervisor(db, FixedClock(T0), service, heartbeat_every=0).run()
    assert service.seen == 4
    assert any("heartbeat of test flaky failed" in r.message for r in caplog.records)
    db.dispose()


@pytest.mark.parametrize(
    ("every", "silent_s", "alive"),
    [
        (5.0, 29, True),  # the floor: a few default beats
        (5.0, 31, False),
        (600.0, 1_700, True),  # a service told to beat every 10 minutes is not dead at 28
        (600.0, 1_801, False),  # ... but is after three silent intervals
    ],
    ids=["default-alive", "default-silent", "slow-beats-alive", "slow-beats-silent"],
)
def test_a_service_is_alive_for_three_of_its_own_heartbeat_intervals(
    tmp_path: Path, every: float, silent_s: int, alive: bool
) -> None:
    """Health reads each row's own interval, so NBCAST_HEARTBEAT_SECONDS above the 30 s
    floor does not make a live service look dead."""
    from datetime import timedelta

    from nbcast.views.health import health

    db = Database.open(f"sqlite:///{tmp_path / 'db.sqlite'}")
    service = Flaky(limit=1)
    Supervisor(db, FixedClock(T0), service, heartbeat_every=every).run()
    with db.engine.begin() as conn:  # as if it still ran, its last beat at T0
        conn.execute(sa.update(ServiceHeartbeat).values(state="running"))
    with db.session() as session:
        (record,) = health(session, T0 + timedelta(seconds=silent_s)).services
    assert record.detail["heartbeat_every_s"] == every
    assert record.alive is alive
    db.dispose()


@pytest.mark.postgres
@pytest.mark.slow
def test_every_service_keeps_a_heartbeat_row_while_it_runs(pg_url: str, tmp_path: Path) -> None:
    db = Database.open(pg_url)
    with db.engine.begin() as conn:
        conn.execute(sa.text("DELETE FROM service_heartbeats"))
    env = {
        **os.environ,
        "NBCAST_DATABASE_URL": pg_url,
        "NBCAST_HOME": str(tmp_path / "home"),
        "NBCAST_HEARTBEAT_SECONDS": "0.2",
    }
    subprocess.run(
        [sys.executable, "-m", "nbcast", "publish", str(make_notebook(tmp_path / "hb.ipynb"))],
        env=env,
        check=True,
        capture_output=True,
    )
    commands = {
        "scheduler": ["scheduler", "run", "--name", "hb-scheduler", "--max-sleep", "0.2"],
        "worker": ["worker", "--name", "hb-worker", "--no-warm-kernels", "--concurrency", "1"],
        "delivery-worker": ["delivery-worker", "--name", "hb-delivery", "--poll", "0.2"],
        "oversight": ["oversight", "--name", "hb-oversight", "--interval", "0.2"],
    }
    procs = {
        kind: subprocess.Popen(
            [sys.executable, "-m", "nbcast", *argv],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for kind, argv in commands.items()
    }
    try:
        first = _wait_for_beats(db, set(commands), min_iterations=1)
        second = _wait_for_beats(db, set(commands), min_iterations=first)
        for kind in commands:
            row = second[kind]
            assert row.state == "running"
            assert row.pid == procs[kind].pid
            assert row.version
            assert row.iterations > first[kind].iterations
            assert row.beat_at > first[kind].beat_at
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        errors = {kind: proc.communicate(timeout=120)[1] for kind, proc in procs.items()}
    for kind, proc in procs.items():
        assert proc.returncode == 0, errors[kind][-2000:]
    rows = {row.kind: row for row in beats(db)}
    assert {rows[kind].state for kind in commands} == {"stopped"}
    assert all(rows[kind].stopped_at is not None for kind in commands)
    db.dispose()


def _wait_for_beats(
    db: Database, kinds: set[str], *, min_iterations: int | dict[str, ServiceHeartbeat]
) -> dict[str, ServiceHeartbeat]:
    deadline = time.monotonic() + 120
    while True:
        rows = {row.kind: row for row in beats(db) if row.kind in kinds}
        if set(rows) == kinds:
            if isinstance(min_iterations, int):
                ready = all(r.iterations >= min_iterations for r in rows.values())
            else:
                ready = all(r.iterations > min_iterations[k].iterations for k, r in rows.items())
            if ready:
                return rows
        if time.monotonic() > deadline:
            raise AssertionError(f"heartbeats did not advance: {rows}")
        time.sleep(0.2)
