"""SLA monitoring on SQLite and PostgreSQL: one miss per slot not delivered within its
definition's promise — a failed run, a SKIPPED or a MISSED slot, a report sent too
late — recorded once however many scheduler replicas look, audited, alerted to the
owner through a real SMTP server by the real delivery worker; and none for a report
delivered late but within the window.

The first test runs the whole story on an accelerated clock (two scheduler replicas'
governance runners, the materializer, the executor's queue, the delivery worker); the
others pin one rule each on a fixed clock, so they say exactly when things happen.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.clock import AcceleratedClock, Clock, FixedClock
from nbcast.db import Database
from nbcast.definitions.models import ReportDefinition
from nbcast.delivery.channels.email import EmailChannel
from nbcast.delivery.models import Delivery
from nbcast.oversight.jobs import JobRunner
from nbcast.oversight.sla import alert_route
from nbcast.scheduler.control import pause, resume
from nbcast.testing.smtp import FakeSMTPServer, smtp_server
from tests.members import grant
from tests.oversight.sla_world import ALICE, OWNER, RECIPIENT, Services, World, minutes

START = datetime(2026, 11, 2, 6, 58, tzinfo=UTC)
SLOT = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)
DAILY = {"cron": "0 7 * * *"}
EARLY = datetime(2026, 11, 2, 6, 50, tzinfo=UTC)
"""Where the accelerated story starts: ten simulated minutes (5 s) to publish in."""
FACTOR = 120.0
"""Simulated seconds per real second: the accelerated story's 43 minutes take ~22 s."""
PATIENCE = 120.0
"""Real seconds a wait may take before the test gives up (a stuck plane, not a slow one)."""


def _email(server: FakeSMTPServer) -> EmailChannel:
    return EmailChannel(server.host, server.port, sender="nbcast@example.com", timeout=5.0)


def _until(clock: Clock, instant: datetime) -> None:
    """Wait (really) until the accelerated ``clock`` reaches ``instant``."""
    deadline = time.monotonic() + PATIENCE
    while clock.now() < instant:
        assert time.monotonic() < deadline, f"the clock never reached {instant}"
        time.sleep(0.02)


def _settle(worker: Services, done: Callable[[], bool]) -> None:
    """Run the delivery worker's and the alerts' passes until ``done()``."""
    deadline = time.monotonic() + PATIENCE
    while not done():
        assert time.monotonic() < deadline, "the delivery worker did not get there"
        if not worker.step().busy:
            time.sleep(0.02)


def _deliveries(db: Database) -> list[tuple[str, str, str, datetime | None]]:
    with db.session() as session:
        rows = session.execute(
            sa.select(ReportDefinition.name, Delivery.recipient, Delivery.state, Delivery.sent_at)
            .join(ReportDefinition, ReportDefinition.id == Delivery.definition_id)
            .order_by(Delivery.id)
        ).all()
    return [(r[0], r[1], r[2], r[3]) for r in rows]


def _pending_alerts(db: Database) -> int:
    with db.engine.connect() as conn:
        return int(
            conn.execute(
                sa.text("SELECT count(*) FROM sla_misses WHERE alert_state = 'PENDING'")
            ).scalar_one()
        )


def _at_once(jobs: list[Callable[[], Any]]) -> list[Any]:
    """Run ``jobs`` on threads released together; their results (an exception fails)."""
    barrier = threading.Barrier(len(jobs))
    results: list[Any] = [None] * len(jobs)
    errors: list[BaseException] = []

    def run(i: int) -> None:
        barrier.wait()
        try:
            results[i] = jobs[i]()
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    return results


@pytest.mark.slow
def test_on_an_accelerated_clock_each_undelivered_slot_is_one_miss_and_one_alert(
    db: Database, tmp_path: Path
) -> None:
    clock = AcceleratedClock(EARLY, FACTOR)
    world = World(db, clock, tmp_path)
    world.publish("failing", DAILY)
    world.publish("late", DAILY)
    world.publish("missed", {**DAILY, "misfire": {"policy": "skip", "grace": "1m"}})
    world.publish("skipped", DAILY)
    world.tick()
    assert pause(db, clock, ALICE, "skipped")
    assert clock.now() < SLOT, "publishing took more than ten simulated minutes"
    _until(clock, SLOT + minutes(2))  # every 07:00 slot is due; "missed" is past its grace
    world.tick()
    assert resume(db, clock, ALICE, "skipped") is not None
    key = "2026-11-02T07:00"
    assert world.runs("failing") == [(key, "QUEUED", None)]
    assert world.runs("missed") == [(key, "MISSED", "misfire")]
    assert world.runs("skipped") == [(key, "SKIPPED", "paused")]
    world.claim()
    world.fail("failing")
    _until(clock, SLOT + minutes(5))
    world.succeed("late")  # five minutes late: still 25 minutes to be delivered

    with smtp_server() as server:
        worker = world.worker({"email": _email(server)})
        _settle(worker, lambda: any(d[2] == "SENT" for d in _deliveries(db)))
        [(name, to, state, sent_at)] = _deliveries(db)
        assert (name, to, state) == ("late", RECIPIENT, "SENT")
        assert sent_at is not None
        # If this fails the machine took 25 simulated minutes (12 s) to deliver one report.
        assert sent_at <= SLOT + minutes(30)

        replicas = [JobRunner(db, clock, owner=f"replica-{i}", daily={}) for i in (1, 2)]
        for replica in replicas:
            replica.step()
        assert world.misses() == []  # no deadline has passed yet
        _until(clock, SLOT + minutes(31))
        summaries = _at_once([r.step for r in replicas])
        assert sum(s["sla"]["misses"] for s in summaries) == 3
        misses = world.misses()
        assert [(m["definition"], m["slot_key"], m["state"]) for m in misses] == [
            ("failing", key, "FAILED"),
            ("missed", key, "MISSED"),
            ("skipped", key, "SKIPPED"),
        ]
        assert [m["reason"] for m in misses] == [
            "FAILED (error): the run did not succeed",
            "MISSED (misfire): the slot had no run",
            "SKIPPED (paused): the slot had no run",
        ]
        assert {(m["alert_state"], m["alert_channel"], m["alert_to"]) for m in misses} == {
            ("PENDING", "email", OWNER)
        }
        assert all(m["deadline"] == SLOT + minutes(30) for m in misses)

        _settle(worker, lambda: _pending_alerts(db) == 0)
        alerts = [m.mail for m in server.messages if m.mail["Subject"].startswith("SLA missed")]
        reports = [m.mail for m in server.messages if not m.mail["Subject"].startswith("SLA")]
        assert sorted(a["Subject"] for a in alerts) == [
            f"SLA missed: {name} — {key}" for name in ("failing", "missed", "skipped")
        ]
        assert {a["To"] for a in alerts} == {OWNER}
        assert [r["To"] for r in reports] == [RECIPIENT]  # late's report, once
        [failing] = [a for a in alerts if "failing" in a["Subject"]]
        body = failing.get_body(("plain",))
        assert body is not None
        text = body.get_content()
        assert "Deadline: 2026-11-02T07:30:00Z (delivered within 30m)" in text
        assert "Reason: FAILED (error): the run did not succeed" in text
        assert "https://reports.example.com/nbcast/runs/" in text
        assert {m["alert_state"] for m in world.misses()} == {"SENT"}

        # More passes of both replicas and of the worker find and send nothing new.
        _until(clock, SLOT + minutes(33))
        _at_once([r.step for r in replicas])
        for _ in range(3):
            worker.step()
        assert len(world.misses()) == 3
        assert len(server.messages) == 4
    entries = world.audited()
    assert [(e["actor"], e["object"], e["slot"], e["state"]) for e in entries] == [
        ("sla-monitor", f"definition:{name}", key, state)
        for name, state in (("failing", "FAILED"), ("missed", "MISSED"), ("skipped", "SKIPPED"))
    ]


@pytest.fixture
def fixed(db: Database, tmp_path: Path) -> World:
    return World(db, FixedClock(START), tmp_path)


def _at(world: World, instant: datetime) -> None:
    clock = world.clock
    assert isinstance(clock, FixedClock)
    clock.set(instant)


def test_a_report_sent_past_its_deadline_is_a_miss_and_one_sent_within_it_none(
    fixed: World,
) -> None:
    fixed.publish("prompt", DAILY)
    fixed.publish("tardy", DAILY)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    fixed.claim()
    _at(fixed, SLOT + minutes(20))
    fixed.succeed("prompt")
    with smtp_server() as server:
        worker = fixed.worker({"email": _email(server)})
        _settle(worker, lambda: len(server.messages) == 1)  # sent at 07:20
        _at(fixed, SLOT + minutes(40))
        fixed.succeed("tardy")
        _settle(worker, lambda: len(server.messages) == 2)  # sent at 07:40
    _at(fixed, SLOT + minutes(45))
    assert fixed.check()["misses"] == 1
    [miss] = fixed.misses()
    assert (miss["definition"], miss["state"]) == ("tardy", "SUCCEEDED")
    assert miss["reason"] == "SENT 10m after the deadline"
    assert fixed.check()["misses"] == 0


def test_the_monitor_waits_for_slots_the_scheduler_has_not_recorded(fixed: World) -> None:
    fixed.publish("sales", DAILY)
    fixed.tick()  # its schedule state: materialized up to the publish instant
    _at(fixed, SLOT + minutes(90))  # the scheduler was down; the 07:00 deadline passed
    fixed.check()
    assert fixed.misses() == []
    mark = fixed.watermark("sales")
    assert mark is None or mark <= START  # never past what was materialized
    fixed.tick()  # the scheduler is back and records the 07:00 slot
    assert fixed.runs("sales") == [("2026-11-02T07:00", "QUEUED", None)]
    assert fixed.check()["misses"] == 1
    [miss] = fixed.misses()
    assert (miss["slot_key"], miss["state"]) == ("2026-11-02T07:00", "QUEUED")
    assert miss["reason"] == "QUEUED at the deadline"
    assert fixed.watermark("sales") == SLOT


def test_a_slot_is_held_to_the_promise_of_the_version_that_made_it(fixed: World) -> None:
    fixed.publish("sales", DAILY, within="2h")
    _at(fixed, SLOT + minutes(1))
    fixed.tick()  # the 07:00 slot pins v1: delivered within 2 h
    fixed.claim()
    fixed.fail("sales")
    _at(fixed, SLOT + minutes(5))
    fixed.publish("sales", DAILY, within="30m")
    _at(fixed, SLOT + minutes(45))
    fixed.tick()  # v2 (30 min) is the scheduled version now
    fixed.check()
    assert fixed.misses() == []  # 07:00 is due at 09:00, not 07:30
    mark = fixed.watermark("sales")
    assert mark is None or mark < SLOT
    _at(fixed, SLOT + minutes(121))
    assert fixed.check()["misses"] == 1
    [miss] = fixed.misses()
    assert miss["deadline"] == SLOT + minutes(120)


def test_a_definition_without_a_promise_is_not_watched(fixed: World) -> None:
    fixed.publish("sales", DAILY, within=None)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(60))
    assert fixed.check() == {"misses": 0, "slots": 0, "definitions": 0, "failed": 0, "more": False}
    assert fixed.watermark("sales") is None


def test_replicas_judging_at_once_record_each_slot_once(fixed: World) -> None:
    names = [f"report-{i}" for i in range(6)]
    for name in names:
        fixed.publish(name, DAILY)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(31))
    summaries = _at_once([fixed.check for _ in range(4)])
    assert sum(s["misses"] for s in summaries) == len(names)
    assert [m["definition"] for m in fixed.misses()] == names
    assert sorted(e["object"] for e in fixed.audited()) == [f"definition:{n}" for n in names]


def test_a_pass_is_bounded_and_the_next_one_goes_on(fixed: World) -> None:
    fixed.publish("often", {"every": "1m"}, within="1m")
    _at(fixed, START + minutes(30))
    fixed.tick()
    slots = len(fixed.runs("often"))
    assert slots >= 25
    _at(fixed, START + minutes(40))
    passes = []
    while True:
        summary = fixed.check(max_slots=10, per_definition=10)
        passes.append(summary["slots"])
        if not summary["more"]:
            break
        assert len(passes) < 10
    assert max(passes) <= 10
    assert len(fixed.misses()) == slots  # none judged twice, none skipped
    assert sum(passes) == slots


def test_a_pass_out_of_time_leaves_the_other_definitions_to_the_next(fixed: World) -> None:
    names = [f"report-{i}" for i in range(3)]
    for name in names:
        fixed.publish(name, DAILY)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(31))
    passes = []
    while True:
        summary = fixed.check(max_seconds=0.0)  # out of time after the first definition
        passes.append(summary["definitions"])
        if not summary["more"]:
            break
        assert len(passes) < 10
    assert passes == [1, 1, 1]
    assert [m["definition"] for m in fixed.misses()] == names


def test_a_definition_the_database_refuses_does_not_stop_the_others(fixed: World) -> None:
    fixed.publish("poison", DAILY)
    fixed.publish("healthy", DAILY)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(31))
    db = fixed.db
    with db.engine.connect() as conn:
        poison = conn.execute(
            sa.text("SELECT id FROM report_definitions WHERE name = 'poison'")
        ).scalar_one()
    _refuse_misses_of(db, poison)
    try:
        summary = fixed.check()
        assert (summary["failed"], summary["misses"]) == (1, 1)
        assert [m["definition"] for m in fixed.misses()] == ["healthy"]
        assert fixed.watermark("poison") is None  # its transaction rolled back whole
    finally:
        _allow_misses(db)
    assert fixed.check()["misses"] == 1  # judged again, once the database takes it
    assert [m["definition"] for m in fixed.misses()] == ["healthy", "poison"]


def _refuse_misses_of(db: Database, definition_id: int) -> None:
    """A trigger that makes the database refuse one definition's misses."""
    with db.engine.begin() as conn:
        if db.dialect == "postgresql":
            conn.execute(
                sa.text(
                    "CREATE FUNCTION test_refuse_miss() RETURNS trigger AS $$ BEGIN"
                    f" IF NEW.definition_id = {int(definition_id)} THEN"
                    " RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END"
                    " $$ LANGUAGE plpgsql"
                )
            )
            conn.execute(
                sa.text(
                    "CREATE TRIGGER test_refuse_miss BEFORE INSERT ON sla_misses"
                    " FOR EACH ROW EXECUTE FUNCTION test_refuse_miss()"
                )
            )
        else:
            conn.execute(
                sa.text(
                    "CREATE TRIGGER test_refuse_miss BEFORE INSERT ON sla_misses"
                    f" WHEN NEW.definition_id = {int(definition_id)}"
                    " BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                )
            )


def _allow_misses(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            sa.text(
                "DROP TRIGGER IF EXISTS test_refuse_miss ON sla_misses"
                if db.dialect == "postgresql"
                else "DROP TRIGGER IF EXISTS test_refuse_miss"
            )
        )
        if db.dialect == "postgresql":
            conn.execute(sa.text("DROP FUNCTION IF EXISTS test_refuse_miss()"))


def test_an_owner_without_an_address_and_no_fallback_gets_no_alert(fixed: World) -> None:
    fixed.publish("sales", DAILY, email=None)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(31))
    fixed.check()
    [miss] = fixed.misses()
    assert (miss["alert_state"], miss["alert_to"]) == ("NONE", None)
    with smtp_server() as server:
        worker = fixed.worker({"email": _email(server)})
        for _ in range(3):
            worker.step()
        assert server.messages == []


def test_without_the_owners_address_the_fallback_recipient_is_alerted(fixed: World) -> None:
    fixed.publish("sales", DAILY, email=None)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    _at(fixed, SLOT + minutes(31))
    fixed.check({"NBCAST_SLA_TO": "oncall@example.com"})
    [miss] = fixed.misses()
    assert (miss["alert_state"], miss["alert_channel"], miss["alert_to"]) == (
        "PENDING",
        "email",
        "oncall@example.com",
    )


@pytest.mark.parametrize(
    ("environ", "owner", "route"),
    [
        pytest.param({}, OWNER, ("email", OWNER), id="owner_by_email"),
        pytest.param(
            {"NBCAST_SLA_TO": "ops@example.com"}, OWNER, ("email", OWNER), id="owner_first"
        ),
        pytest.param(
            {"NBCAST_SLA_TO": "ops@example.com"}, None, ("email", "ops@example.com"), id="fallback"
        ),
        pytest.param({}, None, ("email", None), id="nobody"),
        pytest.param(
            {"NBCAST_SLA_CHANNEL": "slack", "NBCAST_SLA_TO": "#oncall"},
            OWNER,
            ("slack", "#oncall"),
            id="slack_takes_no_address",
        ),
        pytest.param(
            {"NBCAST_SLA_CHANNEL": "webhook"}, OWNER, ("webhook", None), id="webhook_nobody"
        ),
        pytest.param(
            {"NBCAST_SLA_CHANNEL": "carrier-pigeon"},
            OWNER,
            ("carrier-pigeon", None),
            id="unknown_channel",
        ),
    ],
)
def test_where_an_alert_goes(
    environ: dict[str, str], owner: str | None, route: tuple[str, str | None]
) -> None:
    assert alert_route(environ, owner) == route


def _cli(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    from nbcast.cli import main

    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_sla_list_shows_any_member_the_misses(
    fixed: World, use_db: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fixed.publish("sales", {"every": "1h"})
    fixed.publish("kpi", DAILY)
    _at(fixed, SLOT + minutes(121))
    fixed.tick()
    _at(fixed, SLOT + minutes(200))
    assert fixed.check()["misses"] == 4  # sales at 07:00, 08:00 and 09:00, kpi at 07:00
    grant(fixed.db, "default", "tester", "viewer")
    code, out, _ = _cli(capsys, "sla", "list", "--json")
    assert code == 0
    listed = json.loads(out)
    assert sorted((m["definition"], m["slot"], m["state"]) for m in listed) == [
        ("kpi", "2026-11-02T07:00", "QUEUED"),
        ("sales", "2026-11-02T07:00:00Z", "MISSED"),
        ("sales", "2026-11-02T08:00:00Z", "MISSED"),
        ("sales", "2026-11-02T09:00:00Z", "QUEUED"),
    ]
    assert [m["fire_at"] for m in listed] == sorted((m["fire_at"] for m in listed), reverse=True)
    [kpi] = [m for m in listed if m["definition"] == "kpi"]
    assert kpi["reason"] == "QUEUED at the deadline"
    assert kpi["alert"] == {
        "state": "PENDING",
        "channel": "email",
        "to": OWNER,
        "attempts": 0,
        "alerted_at": None,
        "error": None,
    }
    code, out, _ = _cli(capsys, "sla", "list", "--definition", "kpi", "--json")
    assert [m["slot"] for m in json.loads(out)] == ["2026-11-02T07:00"]
    pages: list[int] = []
    after: list[str] = []
    while True:
        code, out, err = _cli(capsys, "sla", "list", "--limit", "3", "--json", *after)
        assert code == 0
        pages += [m["id"] for m in json.loads(out)]
        if "--after " not in err:
            break
        after = ["--after", err.split("--after ")[1].strip()]
    assert pages == [m["id"] for m in listed]  # every miss once, in order
    code, out, _ = _cli(capsys, "sla", "list", "--from", "2026-11-02T07:30:00Z")
    assert code == 0
    assert "sales" in out
    assert "kpi" not in out
    code, _, err = _cli(capsys, "sla", "list", "--definition", "nope")
    assert code == 2
    assert "no definition named 'nope'" in err
    code, _, err = _cli(capsys, "sla", "list", "--from", "2026-11-03", "--to", "2026-11-02")
    assert code == 2
    monkeypatch.setenv("NBCAST_USER", "mallory")  # no role in the tenant
    code, _, err = _cli(capsys, "sla", "list")
    assert code == 2
    assert "'mallory' has no role in tenant default" in err


def test_a_slot_of_several_audiences_is_kept_only_when_each_was_delivered(fixed: World) -> None:
    scoped = [
        {"channel": "email", "to": "emea@example.com", "parameters": {"region": "EMEA"}},
        {"channel": "email", "to": "apac@example.com", "parameters": {"region": "APAC"}},
    ]
    fixed.publish("regions", DAILY, subscriptions=scoped)
    fixed.publish("everywhere", DAILY, subscriptions=scoped)
    _at(fixed, SLOT + minutes(1))
    fixed.tick()
    assert len(fixed.runs("regions")) == 2  # one row per audience
    done: set[str] = set()
    while True:  # a definition's audiences run one at a time
        fresh = {k: v for k, v in fixed.claim().items() if k not in done}
        if not fresh:
            break
        for key, lease in fresh.items():
            done.add(key)
            if lease.definition == "everywhere" or lease.parameters["region"] == "EMEA":
                fixed.succeed(key)  # regions' APAC run is left running: never delivered
    with smtp_server() as server:
        worker = fixed.worker({"email": _email(server)})
        _settle(worker, lambda: len(server.messages) == 3)
    _at(fixed, SLOT + minutes(31))
    assert fixed.check()["misses"] == 1
    [miss] = fixed.misses()
    assert (miss["definition"], miss["state"]) == ("regions", "RUNNING")
    assert miss["reason"].startswith("audience ")
    assert miss["reason"].endswith(" of 2: RUNNING at the deadline")
