"""The engine registry is the one list of engine names: ``nbcast worker --engine``
accepts any registered engine (a plug-in's too) and names them all when refused."""

from __future__ import annotations

import re
import signal
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.cli import main
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import ConfigError
from nbcast.executor.attempt import AttemptJob, AttemptReport
from nbcast.executor.engines import check_engine_name, engines, open_engine
from nbcast.executor.engines.base import Engine, Resources
from nbcast.executor.models import RunAttempt
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run, RunState
from tests.notebooks import make_notebook


class InstantEngine(Engine):
    """A plug-in engine that 'runs' every attempt at once, successfully."""

    name = "instant"

    def __init__(self, capacity: int = 1) -> None:
        self.capacity = capacity
        self._done: list[tuple[int, int, AttemptReport]] = []

    def submit(self, job: AttemptJob, resources: Resources) -> None:
        outcome = AttemptReport(state=RunState.SUCCEEDED, duration_s=0.01, host="instant-host")
        self._done.append((job.run_id, job.attempt, outcome))

    def poll(self) -> list[tuple[int, int, AttemptReport]]:
        done, self._done = self._done, []
        return done

    def cancel(self, run_id: int, attempt: int) -> None:
        """Nothing runs long enough to be cancelled."""

    def close(self) -> None:
        """Nothing to stop."""


@pytest.fixture
def plugin(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """``instant`` registered for this test only; the signal handlers that the
    worker's supervisor installs are put back afterwards."""
    monkeypatch.setattr(engines, "_factories", dict(engines._factories))
    engines.register("instant", InstantEngine)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGINT)}
    yield
    for signum, handler in handlers.items():
        signal.signal(signum, handler)


def test_an_unknown_engine_is_one_line_naming_the_known_ones(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["worker", "--engine", "kubernetes", "--exit-when-idle"]) == 2
    _, err = capsys.readouterr()
    known = ", ".join(engines.names())  # built-ins and any installed plug-in
    assert {"local", "ray"} <= set(engines.names())
    assert err.count("\n") == 1
    assert f"unknown engine 'kubernetes' (known: {known})" in err
    with pytest.raises(ConfigError, match=re.escape(f"unknown engine 'x' (known: {known})")):
        check_engine_name("x")


def test_a_registered_plugin_engine_runs_a_worker(
    plugin: None,
    db: Database,
    use_db: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert check_engine_name("instant") == "instant"
    publish(
        db,
        make_notebook(tmp_path / "r.ipynb", nbcast={"name": "r"}),
        caller=Caller(tenant="default", user="t"),
    )
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "r", {})
    code = main(["worker", "--engine", "instant", "--concurrency", "3", "--exit-when-idle"])
    assert code == 0
    assert "worker done: 1 succeeded" in capsys.readouterr().out
    with db.session() as session:
        run = session.get(Run, run_id)
        attempt = session.scalar(sa.select(RunAttempt).where(RunAttempt.run_id == run_id))
    assert run is not None
    assert run.state == "SUCCEEDED"
    assert attempt is not None
    assert (attempt.engine, attempt.host) == ("instant", "instant-host")


def test_a_factory_that_is_not_an_engine_class_gets_the_capacity(
    plugin: None, db: Database
) -> None:
    engines.register("made", lambda capacity: InstantEngine(capacity * 10))
    engine = open_engine(db, "made", capacity=2, address="ignored")
    assert isinstance(engine, InstantEngine)
    assert engine.capacity == 20
    built_in = open_engine(db, "local", capacity=1, warm_kernels=False)
    with built_in:
        assert (built_in.name, built_in.capacity) == ("local", 1)
