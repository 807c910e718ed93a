"""Test runs and dry runs of a slot (:mod:`nbcast.scheduler.trial`), on SQLite and
PostgreSQL: a dry run is the scheduler's own row for its slot (one code path), a test
run counts for nothing the schedule decides, and bad requests write nothing."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.audiences import audience_key
from nbcast.definitions.versions import publish
from nbcast.errors import (
    AccessDeniedError,
    ConfigError,
    ParameterValueError,
    ScheduleError,
    UnknownDefinitionError,
)
from nbcast.scheduler.materializer import Materializer
from nbcast.scheduler.models import Run, RunKind, RunState
from nbcast.scheduler.trial import MAX_TEST_ADDRESSES, queue_test_run
from nbcast.tenancy.members import add_member
from nbcast.tenancy.tenants import ensure_tenant
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 9, 0, 0, tzinfo=UTC)  # a Monday
ALICE = Caller(tenant="default", user="t")
PARAMETERS = 'region = "ALL"\nday = "2026-01-01"\ntop_n = 5\n'
YESTERDAY = {"$period": "slot", "steps": [{"days": -1}]}
EMEA = {"region": "EMEA"}
K_EMEA = audience_key({"region": "EMEA", "top_n": 3}, EMEA)
SUBSCRIPTIONS = [
    {"channel": "email", "to": "cfo@example.com"},
    {
        "channel": "email",
        "to": "emea@example.com",
        "parameters": {"region": "EMEA", "top_n": 3},
        "row_filter": EMEA,
    },
]


def define(db: Database, tmp_path: Path, schedule: dict[str, Any] | None = None) -> None:
    block: dict[str, Any] = {
        "name": "sales",
        "parameters": {"day": YESTERDAY, "top_n": 15},
        "subscriptions": SUBSCRIPTIONS,
        "schedule": schedule or {"cron": "0 7 * * 1-5", "timezone": "Europe/Berlin"},
    }
    path = make_notebook(tmp_path / "sales.ipynb", parameters=PARAMETERS, nbcast=block)
    publish(db, path, caller=ALICE, now=T0)


def rows(db: Database, kind: RunKind | None = None) -> list[Run]:
    with db.session() as session:
        query = sa.select(Run).order_by(Run.id)
        if kind is not None:
            query = query.where(Run.kind == kind.value)
        found = list(session.scalars(query))
        session.expunge_all()
        return found


def test_a_dry_run_is_the_scheduler_s_own_row_for_its_slot(db: Database, tmp_path: Path) -> None:
    """One code path: every field the notebook and the warehouse see — version,
    parameters with bindings resolved, audience, row filter, context — is the
    scheduled row's, for each audience; only the kind and ``test`` differ."""
    define(db, tmp_path)
    # Friday 13 March 07:00 Berlin, tried on Monday the 9th, then scheduled.
    tried = queue_test_run(db, FixedClock(T0), ALICE, "sales", {}, slot="2026-03-13T07:00", to=[])
    assert [t.slot_key for t in tried] == ["2026-03-13T07:00"] * 2
    for day in range(9, 14):  # the scheduler keeps up all week
        Materializer(db, FixedClock(datetime(2026, 3, day, 6, 1, tzinfo=UTC))).tick()
    scheduled = {
        r.audience: r for r in rows(db, RunKind.scheduled) if r.slot_key == "2026-03-13T07:00"
    }
    dry = {r.audience: r for r in rows(db, RunKind.test)}
    assert set(dry) == set(scheduled) == {"", K_EMEA}
    for audience, run in dry.items():
        twin = scheduled[audience]
        assert (run.version_id, run.parameters, run.row_filter) == (
            twin.version_id,
            twin.parameters,
            twin.row_filter,
        )
        assert run.context == {**(twin.context or {}), "test": True}
        assert (run.slot_key, run.serial, run.state) == (None, False, RunState.QUEUED.value)
        assert run.test_to == []
    assert dry[""].parameters == {"day": "2026-03-12", "top_n": 15}
    assert dry[K_EMEA].parameters == {"day": "2026-03-12", "top_n": 3, "region": "EMEA"}
    assert dry[K_EMEA].row_filter == EMEA


def test_at_names_the_slot_firing_then_or_next_and_as_picks_one_audience(
    db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path)
    at = datetime(2026, 3, 13, 5, 0, tzinfo=UTC)  # 06:00 Berlin: the 07:00 slot is next
    (only,) = queue_test_run(
        db, FixedClock(T0), ALICE, "sales", {}, at=at, recipient="EMEA@example.com"
    )
    assert (only.slot_key, only.audience) == ("2026-03-13T07:00", K_EMEA)
    (run,) = rows(db, RunKind.test)
    assert run.row_filter == EMEA


def test_a_test_run_goes_to_the_caller_s_own_address_by_default(
    db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path)
    with db.session() as session:
        ensure_tenant(session, "default")
    add_member(db, FixedClock(T0), ALICE, "jupyter:bob", "author", "bob@example.com")
    bob = Caller(tenant="default", user="jupyter:bob")
    tried = queue_test_run(db, FixedClock(T0), bob, "sales", {"top_n": 7})
    assert [t.to for t in tried] == [("bob@example.com",)] * 2
    runs = rows(db, RunKind.test)
    assert {r.test_to[0] for r in runs if r.test_to} == {"bob@example.com"}
    # A test run without a slot is what a manual run now would be: -p applies, the
    # audience's own values win, the context is a manual one marked test.
    by_audience = {r.audience: r for r in runs}
    assert by_audience[""].parameters["top_n"] == 7
    assert by_audience[K_EMEA].parameters["top_n"] == 3
    assert by_audience[""].context is not None
    assert (by_audience[""].context["kind"], by_audience[""].context["test"]) == ("manual", True)
    # ALICE has no address: the test run goes to no one.
    assert {t.to for t in queue_test_run(db, FixedClock(T0), ALICE, "sales", {})} == {()}


def test_the_overlap_policy_does_not_see_test_runs(db: Database, tmp_path: Path) -> None:
    define(db, tmp_path, {"cron": "0 * * * *", "overlap": "skip"})
    queue_test_run(db, FixedClock(T0), ALICE, "sales", {}, to=[])  # queued, never started
    Materializer(db, FixedClock(T0 + timedelta(hours=1, minutes=1))).tick()
    scheduled = rows(db, RunKind.scheduled)
    assert scheduled
    assert {r.state for r in scheduled} == {RunState.QUEUED.value}


@pytest.mark.parametrize(
    ("options", "error"),
    [
        ({"slot": "2026-03-13T07:00", "parameters": {"top_n": 1}}, ParameterValueError),
        ({"slot": "2026-03-14T07:00"}, ScheduleError),  # a Saturday: no such slot
        ({"slot": "next monday"}, ScheduleError),
        ({"slot": "9999-12-31T23:59"}, ScheduleError),
        ({"slot": "2026-03-13T07:00+05:00"}, ScheduleError),  # a wall time has no offset
        ({"recipient": "nobody@example.com"}, ConfigError),
        ({"to": ["not an address"]}, ConfigError),
        ({"to": [f"a{i}@example.com" for i in range(MAX_TEST_ADDRESSES + 1)]}, ConfigError),
        ({"version": 2}, UnknownDefinitionError),
        ({"name": "nope"}, UnknownDefinitionError),
        ({"caller": Caller(tenant="default", user="eve")}, AccessDeniedError),
    ],
)
def test_a_bad_request_writes_nothing(
    db: Database, tmp_path: Path, options: dict[str, Any], error: type[Exception]
) -> None:
    define(db, tmp_path)
    with db.session() as session:
        ensure_tenant(session, "default")
    add_member(db, FixedClock(T0), ALICE, "eve", "viewer")
    before = len(rows(db))
    options = dict(options)  # shared by both back ends' runs
    with pytest.raises(error):
        queue_test_run(
            db,
            FixedClock(T0),
            options.pop("caller", ALICE),
            options.pop("name", "sales"),
            options.pop("parameters", {}),
            **options,
        )
    assert len(rows(db)) == before


def test_a_slot_the_schedule_skips_is_refused(db: Database, tmp_path: Path) -> None:
    define(
        db, tmp_path, {"cron": "30 2 * * *", "timezone": "America/New_York", "dst": {"gap": "skip"}}
    )
    with pytest.raises(ScheduleError, match="skipped by the schedule"):
        queue_test_run(db, FixedClock(T0), ALICE, "sales", {}, slot="2026-03-08T02:30")
    assert rows(db, RunKind.test) == []


def test_at_moves_past_a_slot_the_schedule_skips(db: Database, tmp_path: Path) -> None:
    schedule = {"cron": "30 2 * * *", "timezone": "America/New_York", "dst": {"gap": "skip"}}
    define(db, tmp_path, schedule)
    at = datetime(2026, 3, 8, 6, 0, tzinfo=UTC)  # 01:00 EST: the 02:30 slot is skipped
    tried = queue_test_run(db, FixedClock(T0), ALICE, "sales", {}, at=at, to=[])
    assert {t.slot_key for t in tried} == {"2026-03-09T02:30"}


def test_a_preview_resolves_bindings_for_a_few_slots_within_a_budget() -> None:
    from nbcast.scheduler.preview import MAX_BOUND_SLOTS, MAX_BUSINESS_DAYS, preview

    rows = preview(
        cron="0 * * * *",
        tz="Europe/Berlin",
        range_from=datetime(2026, 3, 9, tzinfo=UTC),
        range_to=datetime(2026, 3, 10, tzinfo=UTC),
        bindings={"day": YESTERDAY},
    )
    resolved = [r for r in rows if "parameters" in r]
    assert len(resolved) == MAX_BOUND_SLOTS < len(rows)
    assert resolved[0]["parameters"] == {"day": "2026-03-08"}
    costly = {"$period": "slot", "steps": [{"business_days": -2000}] * 6}
    with pytest.raises(ScheduleError, match=f"more than {MAX_BUSINESS_DAYS:,}"):
        preview(
            cron="0 7 * * *",
            tz="UTC",
            range_from=datetime(2026, 3, 9, tzinfo=UTC),
            range_to=datetime(2026, 3, 10, tzinfo=UTC),
            bindings={"day": costly},
        )
