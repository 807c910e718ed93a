"""The definitions queries: scoped to the caller's tenant, keyset-paginated, and
telling the scheduler's view (next fire, pause, failure) and the last run."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.definitions.queries import get_version
from nbcast.definitions.versions import publish
from nbcast.errors import ConfigError, UnknownDefinitionError
from nbcast.scheduler.materializer import Materializer
from nbcast.tenancy.tenants import ensure_tenant
from nbcast.views.definitions import get_definition, list_definitions
from tests.notebooks import make_notebook

T0 = datetime(2026, 3, 7, tzinfo=UTC)
DEFAULT = Caller(tenant="default", user="t")
OTHER = Caller(tenant="other", user="t")


def _publish(db: Database, tmp_path: Path, name: str, tenant: str = "default") -> None:
    path = make_notebook(
        tmp_path / tenant / f"{name}.ipynb",
        nbcast={"name": name, "schedule": {"cron": "0 * * * *", "timezone": "Europe/Berlin"}},
    )
    publish(db, path, caller=Caller(tenant=tenant, user="t"), now=T0)


def test_pages_walk_every_definition_once(db: Database, tmp_path: Path) -> None:
    names = [f"report-{i:02d}" for i in range(23)]
    for name in reversed(names):
        _publish(db, tmp_path, name)
    seen: list[str] = []
    after = None
    with db.session() as session:
        while True:
            page = list_definitions(session, DEFAULT, limit=5, after=after)
            seen += [d.name for d in page.items]
            assert len(page.items) <= 5
            if page.next_after is None:
                break
            after = page.next_after
    assert seen == names
    with db.session() as session, pytest.raises(ConfigError, match="cursor"):
        list_definitions(session, DEFAULT, after="not-a-cursor")
    with db.session() as session, pytest.raises(ConfigError, match="limit"):
        list_definitions(session, DEFAULT, limit=10_000)


def test_another_tenants_definition_is_not_found(db: Database, tmp_path: Path) -> None:
    with db.session() as session:
        ensure_tenant(session, "other")
    _publish(db, tmp_path, "mine")
    _publish(db, tmp_path, "theirs", tenant="other")
    with db.session() as session:
        assert [d.name for d in list_definitions(session, DEFAULT).items] == ["mine"]
        assert [d.name for d in list_definitions(session, OTHER).items] == ["theirs"]
        for query in (get_definition, get_version):
            with pytest.raises(UnknownDefinitionError):
                query(session, DEFAULT, "theirs")


def test_records_carry_the_schedulers_view_and_the_last_run(db: Database, tmp_path: Path) -> None:
    _publish(db, tmp_path, "hourly")
    clock = FixedClock(T0 + timedelta(hours=2, minutes=1))
    Materializer(db, clock).tick()
    with db.session() as session:
        record = get_definition(session, DEFAULT, "hourly")
    assert record.schedule == "0 * * * * (Europe/Berlin)"
    assert record.timezone == "Europe/Berlin"
    assert record.next_fire_at == T0 + timedelta(hours=3)
    # One pass at 02:01: 01:00 was missed (superseded), 02:00 is queued and the newest.
    assert record.last_run is not None
    assert record.last_run.state == "QUEUED"
    assert record.last_run.fire_at == T0 + timedelta(hours=2)
    data = record.to_json()
    assert data["next_fire_at"] == "2026-03-07T03:00:00Z"
    assert data["last_run"] == {
        "state": "QUEUED",
        "reason": None,
        "fire_at": "2026-03-07T02:00:00Z",
    }
