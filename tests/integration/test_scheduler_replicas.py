"""Crash and replica test: three scheduler processes on PostgreSQL, killed at random.

A simulated month (accelerated clock) of mixed schedules across zones and DST
changes; three ``nbcast scheduler run`` processes share the work, and a driver
SIGKILLs one at random moments (plus crash points inside the materializer's
transaction) and restarts it. At the end every slot of every definition has
exactly one row per audience, none twice, none missing — two of the definitions have
recipient-scoped subscriptions, so their slots fan out into one row per audience.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.db import Database
from nbcast.definitions.audiences import audiences as spec_audiences
from nbcast.definitions.compiler import compile_schedule
from nbcast.definitions.models import ReportDefinition
from nbcast.definitions.spec import parse_spec
from nbcast.definitions.versions import publish
from nbcast.heartbeats import ServiceHeartbeat
from nbcast.scheduler.materializer import initial_watermark
from nbcast.scheduler.models import Run, ScheduleState
from tests.definitions.reads import get_version
from tests.notebooks import make_notebook

pytestmark = [pytest.mark.postgres, pytest.mark.slow]

START = datetime(2026, 10, 20, 0, 0, tzinfo=UTC)
END = datetime(2026, 11, 19, 0, 0, tzinfo=UTC)  # a month across EU and US fall-back
FACTOR = 80_000  # simulated seconds per real second: the month takes ~32 s
SCHEDULES: dict[str, dict[str, Any]] = {
    "every-minute-utc": {"cron": "* * * * *", "overlap": "allow"},
    "five-min-new-york": {"cron": "*/5 * * * *", "timezone": "America/New_York", "overlap": "skip"},
    "hourly-berlin": {
        "cron": "0 * * * *",
        "timezone": "Europe/Berlin",
        "misfire": {"policy": "run_all"},
        "overlap": "buffer_all",
    },
    "hourly-kolkata": {
        "cron": "30 * * * *",
        "timezone": "Asia/Kolkata",
        "misfire": {"policy": "skip", "grace": "1m"},
    },
    "daily-0130-new-york": {
        "cron": "30 1 * * *",
        "timezone": "America/New_York",
        "dst": {"fold": "both"},
    },
    "daily-sydney": {"cron": "0 7 * * 1-5", "timezone": "Australia/Sydney"},
    "daily-london": {"cron": "15 1 * * *", "timezone": "Europe/London", "overlap": "replace"},
    "every-7m": {"every": "7m", "overlap": "buffer_one"},
    "scoped-every-3m": {"every": "3m", "overlap": "skip"},
    "scoped-hourly-berlin": {
        "cron": "0 * * * *",
        "timezone": "Europe/Berlin",
        "misfire": {"policy": "run_all"},
        "overlap": "buffer_all",
    },
}


def _scoped(to: str, region: str) -> dict[str, Any]:
    return {
        "channel": "email",
        "to": to,
        "parameters": {"region": region},
        "row_filter": {"region": region},
    }


SUBSCRIPTIONS: dict[str, list[dict[str, Any]]] = {
    "scoped-every-3m": [
        _scoped("emea@example.com", "EMEA"),
        _scoped("apac@example.com", "APAC"),
        _scoped("amer@example.com", "AMER"),
    ],
    "scoped-hourly-berlin": [
        _scoped("emea@example.com", "EMEA"),
        {"channel": "email", "to": "everyone@example.com"},
    ],
}


def _spawn(env: dict[str, str], name: str, log: Path) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "nbcast",
            "scheduler",
            "run",
            "--name",
            name,
            "--max-sleep",
            "60",
            "--batch",
            "3",
        ],
        env=env,
        stdout=log.open("ab"),
        stderr=subprocess.STDOUT,
    )


def test_three_replicas_killed_at_random_leave_exactly_one_row_per_slot(
    pg_url: str, tmp_path: Path
) -> None:
    from tests.conftest import _reset_postgres

    db = Database.open(pg_url)
    _reset_postgres(db)
    for name, schedule in SCHEDULES.items():
        block = {"name": name, "schedule": schedule, "subscriptions": SUBSCRIPTIONS.get(name, [])}
        path = make_notebook(tmp_path / f"{name}.ipynb", nbcast=block)
        # The CLI below acts as NBCAST_USER (tester): the first to act, so its admin.
        publish(db, path, caller=Caller(tenant="default", user="tester"), now=START)

    epoch = time.time() + 1.0
    env = {
        **os.environ,
        "NBCAST_DATABASE_URL": pg_url,
        "NBCAST_CLOCK": f"accelerated:{START.isoformat()}:{FACTOR}",
        "NBCAST_CLOCK_EPOCH": str(epoch),
        "NBCAST_CRASH_AT": "after_runs_insert:0.02,after_watermark_update:0.02,after_commit:0.02",
        "NBCAST_HOME": str(tmp_path / "home"),
    }
    real_seconds = (END - START).total_seconds() / FACTOR
    rng = random.Random(20261101)
    log = tmp_path / "schedulers.log"
    procs = {f"replica-{i}": _spawn(env, f"replica-{i}", log) for i in range(3)}
    kills = restarts = 0
    try:
        while time.time() < epoch + real_seconds:
            time.sleep(rng.uniform(0.3, 1.5))
            victim = rng.choice(sorted(procs))
            procs[victim].send_signal(signal.SIGKILL)
            procs[victim].wait()
            kills += 1
            for name, proc in procs.items():  # restart the victim and any crash-point deaths
                if proc.poll() is not None:
                    procs[name] = _spawn(env, name, log)
                    restarts += 1
    finally:
        for proc in procs.values():
            proc.send_signal(signal.SIGTERM)
        for proc in procs.values():
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:  # pragma: no cover - reported by the asserts
                proc.kill()
    assert kills >= 10
    assert restarts >= kills

    # Materialize the tail up to END in one clean pass, then check every definition.
    final = subprocess.run(
        [sys.executable, "-m", "nbcast", "scheduler", "tick", "--now", END.isoformat()],
        env={**env, "NBCAST_CRASH_AT": "", "NBCAST_CLOCK": f"fixed:{END.isoformat()}"},
        capture_output=True,
        text=True,
        check=False,
    )
    assert final.returncode == 0, final.stderr

    with db.session() as session:
        states = {
            d: s
            for d, s in session.execute(
                sa.select(ReportDefinition.name, ScheduleState).join(
                    ScheduleState, ScheduleState.definition_id == ReportDefinition.id
                )
            ).all()
        }
        runs = session.execute(
            sa.select(
                ReportDefinition.name, Run.slot_key, Run.audience, Run.state, Run.reason
            ).join(ReportDefinition, ReportDefinition.id == Run.definition_id)
        ).all()
    assert set(states) == set(SCHEDULES)
    by_definition: dict[str, dict[str, list[str]]] = {}
    decided: dict[tuple[str, str], set[tuple[str, str | None]]] = {}
    for name, key, audience, state, reason in runs:
        by_definition.setdefault(name, {}).setdefault(audience, []).append(str(key))
        decided.setdefault((name, str(key)), set()).add((state, reason))
        assert state in ("QUEUED", "SKIPPED", "MISSED")
        assert (state == "QUEUED") == (reason is None)
    # A slot is decided once: all its audiences' rows have the same state and reason.
    assert all(len(outcomes) == 1 for outcomes in decided.values())
    for name in SCHEDULES:
        info = get_version(db, "default", name)
        spec = parse_spec(info.block, info.schema)
        assert spec.schedule is not None
        compiled = compile_schedule(spec.schedule)
        first = initial_watermark(START, spec.schedule)
        # The replicas' clock may have run a little past END before they stopped.
        until = max(END, states[name].watermark)
        expected = [
            s.key
            for s in compiled.slots(
                first + timedelta(microseconds=1), until + timedelta(microseconds=1)
            )
        ]
        audiences = {a.key for a in spec_audiences(spec.subscriptions)}
        assert set(by_definition.get(name, {})) == audiences, f"{name}: audiences differ"
        for audience, got in by_definition[name].items():
            assert len(got) == len(set(got)), f"{name}/{audience!r}: a slot has two rows"
            assert sorted(got) == sorted(expected), f"{name}/{audience!r}: rows differ"
        assert states[name].watermark >= END - timedelta(days=4)
    assert len(by_definition["every-minute-utc"][""]) >= 30 * 24 * 60
    assert len(by_definition["scoped-every-3m"]) == 3
    with db.session() as session:
        replicas = session.execute(
            sa.select(ServiceHeartbeat.name).where(ServiceHeartbeat.kind == "scheduler")
        ).all()
    assert sorted(name for (name,) in replicas) == ["replica-0", "replica-1", "replica-2"]
    db.dispose()
