"""Recipient-scoped fan-out: a slot becomes one row per audience, on SQLite and
PostgreSQL — scheduled, resumed, backfilled, manual and rerun — decided once per slot,
with overlap counted per audience; definitions without scoped subscriptions are as
before (one row, audience "")."""

from __future__ import annotations

import threading
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given, settings
from hypothesis import strategies as st

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.audiences import BASE, audience_key
from nbcast.definitions.compiler import Slot, SlotStatus
from nbcast.definitions.versions import publish
from nbcast.errors import ScheduleError
from nbcast.scheduler import control
from nbcast.scheduler import materializer as materializer_module
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import CancelRequest, Run, RunKind, RunState
from nbcast.scheduler.policies import Decision
from nbcast.scheduler.slots import Plan, PlanCache, slot_rows
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 9, 0, 0, tzinfo=UTC)  # a Monday
ALICE = Caller(tenant="default", user="t")
EMEA = {"region": "EMEA"}
APAC = {"region": "APAC"}
K_EMEA = audience_key(EMEA, EMEA)
K_APAC = audience_key(APAC, APAC)
PARAMETERS = 'region = "ALL"\nday = "2026-01-01"\ntop_n = 5\n'


def scoped(to: str, region: str, **extra: Any) -> dict[str, Any]:
    """A subscription of ``to`` scoped to ``region`` (parameters and row filter)."""
    return {
        "channel": "email",
        "to": to,
        "parameters": {"region": region, **extra},
        "row_filter": {"region": region},
    }


THREE = [
    scoped("emea@example.com", "EMEA"),
    scoped("apac@example.com", "APAC"),
    {"channel": "email", "to": "everyone@example.com"},
]


def define(
    db: Database,
    tmp_path: Path,
    name: str,
    schedule: dict[str, Any] | None,
    subscriptions: list[dict[str, Any]],
    **extra: Any,
) -> None:
    block: dict[str, Any] = {
        "name": name,
        "parameters": {"region": "ALL", "day": "2026-01-01"},
        "subscriptions": subscriptions,
        **extra,
    }
    if schedule is not None:
        block["schedule"] = schedule
    path = make_notebook(tmp_path / f"{name}.ipynb", parameters=PARAMETERS, nbcast=block)
    publish(db, path, caller=ALICE, now=T0)


def runs(db: Database) -> list[Run]:
    with db.session() as session:
        found = session.scalars(sa.select(Run).order_by(Run.fire_at, Run.audience, Run.id)).all()
        session.expunge_all()
        return list(found)


def by_slot(db: Database) -> dict[str | None, dict[str, tuple[str, str | None]]]:
    """slot key -> audience -> (state, reason)."""
    result: dict[str | None, dict[str, tuple[str, str | None]]] = {}
    for run in runs(db):
        slot = result.setdefault(run.slot_key, {})
        assert run.audience not in slot, f"slot {run.slot_key} has two {run.audience!r} rows"
        slot[run.audience] = (run.state, run.reason)
    return result


def set_state(db: Database, audience: str, state: RunState, slot_key: str | None = None) -> None:
    """Move runs of ``audience`` on (as the executor would)."""
    with db.session() as session:
        query = sa.update(Run).where(Run.audience == audience).values(state=state.value)
        if slot_key is not None:
            query = query.where(Run.slot_key == slot_key)
        session.execute(query)


# --- the scheduler --------------------------------------------------------------------


def test_each_slot_becomes_one_row_per_audience(db: Database, tmp_path: Path) -> None:
    schedule = {"cron": "0 * * * *", "overlap": "allow", "misfire": {"policy": "run_all"}}
    define(db, tmp_path, "sales", schedule, THREE)
    clock = FixedClock(T0 + timedelta(hours=3, minutes=1))
    result = Materializer(db, clock).tick()
    assert (result.slots, result.inserted) == (3, 9)
    slots = by_slot(db)
    assert sorted(str(k) for k in slots) == [
        "2026-03-09T01:00",
        "2026-03-09T02:00",
        "2026-03-09T03:00",
    ]
    for audiences in slots.values():
        assert audiences == {k: ("QUEUED", None) for k in (BASE, K_APAC, K_EMEA)}
    every = runs(db)
    scope = {r.audience: (r.row_filter, r.parameters["region"]) for r in every}
    assert scope == {BASE: (None, "ALL"), K_EMEA: (EMEA, "EMEA"), K_APAC: (APAC, "APAC")}
    # One slot's rows share everything but their scope: same context, same not_before.
    first = [r for r in every if r.slot_key == "2026-03-09T01:00"]
    assert len({(r.fire_at, r.not_before, r.kind, r.serial, str(r.context)) for r in first}) == 1
    Materializer(db, clock).tick()  # nothing new
    assert len(runs(db)) == 9


def test_a_definition_without_scoped_subscriptions_has_one_base_row_per_slot(
    db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path, "plain", {"cron": "0 * * * *", "overlap": "allow"}, THREE[2:])
    define(db, tmp_path, "nobody", {"cron": "0 * * * *", "overlap": "allow"}, [])
    Materializer(db, FixedClock(T0 + timedelta(hours=2, minutes=1))).tick()
    every = runs(db)
    assert len(every) == 4
    assert {(r.audience, r.row_filter) for r in every} == {("", None)}
    assert {r.parameters["region"] for r in every} == {"ALL"}


def test_only_scoped_subscriptions_have_no_base_run(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "allow"}, THREE[:2])
    Materializer(db, FixedClock(T0 + timedelta(hours=1, minutes=1))).tick()
    assert by_slot(db) == {"2026-03-09T01:00": {K_APAC: ("QUEUED", None), K_EMEA: ("QUEUED", None)}}


def test_two_subscriptions_with_one_scope_share_a_run(db: Database, tmp_path: Path) -> None:
    subs = [scoped("a@example.com", "EMEA"), scoped("b@example.com", "EMEA")]
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "allow"}, subs)
    Materializer(db, FixedClock(T0 + timedelta(hours=1, minutes=1))).tick()
    assert by_slot(db) == {"2026-03-09T01:00": {K_EMEA: ("QUEUED", None)}}


def test_an_audiences_bindings_are_resolved_for_each_slot(db: Database, tmp_path: Path) -> None:
    binding = {"$period": "slot", "steps": [{"days": -1}]}
    subs = [scoped("a@example.com", "EMEA", day=binding), THREE[2]]
    define(db, tmp_path, "sales", {"cron": "0 7 * * *", "overlap": "allow"}, subs)
    Materializer(db, FixedClock(T0 + timedelta(days=2))).tick()
    scoped_key = audience_key({"region": "EMEA", "day": binding}, EMEA)
    got = {(r.slot_key, r.audience): r.parameters["day"] for r in runs(db)}
    assert got == {
        ("2026-03-09T07:00", ""): "2026-01-01",
        ("2026-03-09T07:00", scoped_key): "2026-03-08",
        ("2026-03-10T07:00", ""): "2026-01-01",
        ("2026-03-10T07:00", scoped_key): "2026-03-09",
    }


def test_a_missed_slot_is_missed_for_every_audience(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "allow"}, THREE)
    Materializer(db, FixedClock(T0 + timedelta(hours=3, minutes=30))).tick()  # run_latest
    assert {k: set(v.values()) for k, v in by_slot(db).items()} == {
        "2026-03-09T01:00": {("MISSED", "superseded")},
        "2026-03-09T02:00": {("MISSED", "superseded")},
        "2026-03-09T03:00": {("QUEUED", None)},
    }
    assert all(len(v) == 3 for v in by_slot(db).values())


# --- overlap with several audiences -----------------------------------------------------


def test_overlap_skip_waits_for_every_audience(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *"}, THREE[:2])
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    clock.advance(timedelta(hours=1, minutes=1))
    materializer.tick()
    set_state(db, K_EMEA, RunState.SUCCEEDED)  # APAC's run of 01:00 is still queued
    clock.advance(timedelta(hours=1))
    materializer.tick()
    set_state(db, K_APAC, RunState.SUCCEEDED, "2026-03-09T01:00")
    clock.advance(timedelta(hours=1))
    materializer.tick()
    slots = by_slot(db)
    assert slots["2026-03-09T01:00"] == {K_APAC: ("SUCCEEDED", None), K_EMEA: ("SUCCEEDED", None)}
    assert slots["2026-03-09T02:00"] == {
        K_APAC: ("SKIPPED", "overlap"),
        K_EMEA: ("SKIPPED", "overlap"),
    }
    assert slots["2026-03-09T03:00"] == {K_APAC: ("QUEUED", None), K_EMEA: ("QUEUED", None)}


def test_buffer_one_keeps_one_slot_pending_for_all_audiences(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "buffer_one"}, THREE)
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    clock.advance(timedelta(hours=1, minutes=1))
    materializer.tick()
    for audience in (BASE, K_APAC, K_EMEA):  # every audience's 01:00 run is under way
        set_state(db, audience, RunState.RUNNING)
    for _ in range(2):
        clock.advance(timedelta(hours=1))
        materializer.tick()
    slots = by_slot(db)
    assert set(slots["2026-03-09T02:00"].values()) == {("QUEUED", None)}
    assert set(slots["2026-03-09T03:00"].values()) == {("SKIPPED", "overlap")}
    assert all(len(v) == 3 for v in slots.values())


def test_replace_cancels_the_active_runs_of_every_audience(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "replace"}, THREE[:2])
    clock = FixedClock(T0)
    materializer = Materializer(db, clock)
    for _ in range(2):
        clock.advance(timedelta(hours=1, minutes=1))
        materializer.tick()
    with db.session() as session:
        cancelled = set(
            session.execute(
                sa.select(Run.slot_key, Run.audience).join(
                    CancelRequest, CancelRequest.run_id == Run.id
                )
            ).tuples()
        )
    assert cancelled == {("2026-03-09T01:00", K_APAC), ("2026-03-09T01:00", K_EMEA)}
    assert set(by_slot(db)["2026-03-09T02:00"].values()) == {("QUEUED", None)}


def test_a_pass_is_bounded_in_rows_whatever_the_audiences(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(materializer_module, "MAX_SLOTS_PER_PASS", 4)
    define(
        db,
        tmp_path,
        "sales",
        {"cron": "* * * * *", "overlap": "allow", "misfire": {"policy": "run_all"}},
        THREE[:2],
    )
    materializer = Materializer(db, FixedClock(T0 + timedelta(minutes=7)))
    first = materializer.tick()
    assert (first.slots, first.inserted) == (2, 4)  # 4 rows: 2 slots x 2 audiences
    while materializer.tick().slots:
        pass
    slots = by_slot(db)
    assert len(slots) == 7
    assert all(len(v) == 2 for v in slots.values())


# --- pause, backfill, manual runs, reruns ----------------------------------------------


def test_resume_records_paused_slots_for_every_audience(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 * * * *", "overlap": "allow"}, THREE[:2])
    clock = FixedClock(T0 + timedelta(minutes=30))
    Materializer(db, clock).tick()
    control.pause(db, clock, ALICE, "sales")
    clock.advance(timedelta(hours=2))
    control.resume(db, clock, ALICE, "sales")
    assert by_slot(db) == {
        key: {K_APAC: ("SKIPPED", "paused"), K_EMEA: ("SKIPPED", "paused")}
        for key in ("2026-03-09T01:00", "2026-03-09T02:00")
    }


def test_backfill_fans_out_and_counts_rows(
    db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    define(db, tmp_path, "sales", {"cron": "0 7 * * *", "overlap": "allow"}, THREE)
    clock = FixedClock(T0 + timedelta(days=3))
    Materializer(db, clock).tick()  # 03-09, 03-10 and 03-11 exist
    start, end = datetime(2026, 3, 5, tzinfo=UTC), datetime(2026, 3, 11, tzinfo=UTC)
    result = control.backfill(db, clock, ALICE, "sales", start, end)
    assert (result.slots, result.inserted) == (6, 12)  # 4 new slots x 3 audiences
    slots = by_slot(db)
    assert all(len(v) == 3 for v in slots.values())
    with db.session() as session:
        kinds = Counter(session.execute(sa.select(Run.kind)).scalars())
    assert kinds == Counter({"backfill": 12, "scheduled": 9})
    # The bound is on rows: 6 slots of 3 audiences are 18 runs.
    monkeypatch.setattr(control, "MAX_BACKFILL_SLOTS", 17)
    with pytest.raises(ScheduleError, match=r"more than 5 slots \(3 audiences each\)"):
        control.backfill(db, clock, ALICE, "sales", start, end)


def test_a_manual_run_is_one_run_per_audience(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 7 * * *"}, THREE)
    clock = FixedClock(T0)
    ids = control.run_now_all(db, clock, ALICE, "sales", {"top_n": 3, "region": "AMER"})
    assert len(ids) == 3
    assert control.run_now(db, clock, ALICE, "sales", {}) == max(ids) + 1  # the base's id
    with db.session() as session:
        made = session.scalars(sa.select(Run).where(Run.id.in_(ids)).order_by(Run.id)).all()
        got = [(r.kind, r.slot_key, r.audience, r.row_filter, r.parameters) for r in made]
    # The base first; -p values override the version's; an audience's own override both.
    assert got[0] == (
        "manual",
        None,
        BASE,
        None,
        {"region": "AMER", "day": "2026-01-01", "top_n": 3},
    )
    assert sorted(got[1:], key=lambda r: r[2]) == sorted(
        [
            ("manual", None, K_APAC, APAC, {"region": "APAC", "day": "2026-01-01", "top_n": 3}),
            ("manual", None, K_EMEA, EMEA, {"region": "EMEA", "day": "2026-01-01", "top_n": 3}),
        ],
        key=lambda r: r[2],
    )


def test_a_rerun_keeps_its_audience_and_row_filter(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, "sales", {"cron": "0 7 * * *"}, THREE)
    clock = FixedClock(T0)
    ids = control.run_now_all(db, clock, ALICE, "sales", {})
    with db.session() as session:
        emea = session.scalar(sa.select(Run.id).where(Run.audience == K_EMEA))
        session.execute(sa.update(Run).values(state=RunState.SUCCEEDED.value))
    assert emea in ids
    rerun = control.rerun_run(db, clock, ALICE, emea)
    with db.session() as session:
        again = session.get(Run, rerun)
        assert again is not None
        assert (again.kind, again.audience, again.row_filter) == ("rerun", K_EMEA, EMEA)
        assert again.parameters["region"] == "EMEA"


def test_concurrent_materializers_leave_one_row_per_slot_and_audience(
    db: Database, tmp_path: Path
) -> None:
    for i in range(8):
        define(
            db,
            tmp_path,
            f"m{i}",
            {"cron": "* * * * *", "overlap": "allow", "misfire": {"policy": "run_all"}},
            THREE[: 1 + i % 3],
        )
    clock = FixedClock(T0 + timedelta(hours=1))
    errors: list[BaseException] = []

    def work() -> None:
        try:
            Materializer(db, clock, batch=2).tick()
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work) for _ in range(1 if db.dialect == "sqlite" else 3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    with db.session() as session:
        counts = session.execute(
            sa.select(
                Run.definition_id,
                Run.audience,
                sa.func.count(),
                sa.func.count(sa.distinct(Run.slot_key)),
            ).group_by(Run.definition_id, Run.audience)
        ).all()
    audiences_of = Counter(definition for definition, _, _, _ in counts)
    assert sorted(audiences_of.values()) == sorted(1 + i % 3 for i in range(8))
    assert all(total == distinct == 60 for _, _, total, distinct in counts)


# --- the pure parts ---------------------------------------------------------------------


def test_the_plan_cache_carries_the_versions_audiences() -> None:
    schema = [
        {"name": "region", "default": "ALL", "type": "str"},
        {"name": "day", "default": "2026-01-01", "type": "str"},
    ]
    block = {
        "schedule": {"cron": "0 7 * * *"},
        "subscriptions": [
            scoped("emea@example.com", "EMEA"),
            {"channel": "email", "to": "b@example.com"},
        ],
    }
    plan = PlanCache().plan(1, 1, 1, block, schema)
    assert plan.error is None, plan.error
    assert [(a.key, a.row_filter, a.subscriptions) for a in plan.audiences] == [
        (BASE, {}, (1,)),
        (K_EMEA, EMEA, (0,)),
    ]
    assert plan.parameters_of(plan.audiences[1]) == {"region": "EMEA"}
    assert not plan.bound
    block["subscriptions"][0]["parameters"]["day"] = {"$period": "slot"}  # type: ignore[index]
    assert PlanCache().plan(2, 1, 1, block, schema).bound


def _slot(minutes: int) -> Slot:
    fire = T0 + timedelta(minutes=minutes)
    return Slot(
        key=fire.strftime("%Y-%m-%dT%H:%M"),
        wall=fire.replace(tzinfo=None),
        local=fire,
        fire_at=fire,
        status=SlotStatus.scheduled,
        reason=None,
    )


@settings(max_examples=60, deadline=None)
@given(
    regions=st.lists(st.sampled_from(["EMEA", "APAC", "AMER", "LATAM"]), max_size=4),
    base=st.booleans(),
    states=st.lists(
        st.sampled_from([RunState.QUEUED, RunState.SKIPPED, RunState.MISSED]),
        min_size=1,
        max_size=6,
    ),
)
def test_slot_rows_are_one_per_slot_and_audience(
    regions: list[str], base: bool, states: list[RunState]
) -> None:
    scopes = sorted({audience_key({"region": r}, {"region": r}): r for r in regions}.items())
    from nbcast.definitions.compiled import CompiledVersion
    from nbcast.definitions.spec import ReportSpec, Subscription

    subscriptions = [
        Subscription(
            channel="email", to=f"{r}@x", parameters={"region": r}, row_filter={"region": r}
        )
        for r in regions
    ]
    if base or not regions:
        subscriptions.append(Subscription(channel="email", to="all@x"))
    spec = ReportSpec(parameters={"region": "ALL"}, subscriptions=tuple(subscriptions))
    plan = Plan(1, 1, 1, CompiledVersion(spec, ()))
    audiences = plan.audiences
    assert [a.key for a in audiences] == ([BASE] if base or not regions else []) + [
        k for k, _ in scopes
    ]
    decisions = [Decision(_slot(60 * i), state) for i, state in enumerate(states)]
    made = slot_rows(7, plan, decisions, RunKind.scheduled, T0)
    keys = [(row["slot_key"], row["audience"]) for row in made]
    assert len(keys) == len(set(keys)) == len(states) * len(audiences)
    for d in decisions:
        mine = [row for row in made if row["slot_key"] == d.slot.key]
        assert {row["state"] for row in mine} == {d.state.value}  # decided once per slot
        for row in mine:
            expected = {"region": dict(scopes).get(row["audience"], "ALL")}
            assert row["parameters"] == expected
            assert row["row_filter"] == (None if row["audience"] == BASE else expected)


def test_the_cli_queues_and_names_one_manual_run_per_audience(
    use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import json

    from nbcast.cli import main

    db = Database.open(use_db)
    path = make_notebook(
        tmp_path / "sales.ipynb",
        parameters=PARAMETERS,
        nbcast={"name": "sales", "subscriptions": THREE},
    )
    publish(db, path, caller=Caller(tenant="default", user="tester"), now=T0)  # the CLI's user
    assert main(["run", "sales", "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["id"] == shown["ids"][0]
    assert len(shown["ids"]) == 3
    assert main(["run", "sales"]) == 0
    assert capsys.readouterr().out.strip().endswith("of sales, one per audience")
    with db.session() as session:
        audiences = Counter(session.scalars(sa.select(Run.audience)))
    db.dispose()
    assert audiences == Counter({BASE: 2, K_APAC: 2, K_EMEA: 2})
