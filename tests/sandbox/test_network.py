"""A tenant's network setting (issue 20, item 1): with ``none`` its reports reach no
port of the machine — PostgreSQL's included — yet still query their warehouse through
the unix socket their connection names, which the sandbox shows read-only: the README's
way of allowing a tenant its warehouse and nothing else. Only an operator changes it."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock, SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.errors import AccessDeniedError
from nbcast.executor.engines.local import LocalEngine
from nbcast.scheduler.control import run_now
from nbcast.tenancy.models import AuditEntry, Tenant
from nbcast.tenancy.tenants import create_tenant, set_network
from tests.conftest import PG_ADMIN_URL
from tests.executor.test_worker import make_worker, run_state
from tests.notebooks import make_notebook

SOCKET_FOLDER = "/var/run/postgresql"
REPORT = """
import socket
from nbcast import warehouse
print("ANSWER", warehouse.query("SELECT 41 + 1 AS answer", connection="pg")["answer"][0])
try:
    socket.create_connection(("127.0.0.1", 5432), timeout=2).close()
    print("TCP reached")
except OSError as exc:
    print("TCP refused", type(exc).__name__)
"""


def socket_url() -> str:
    database = sa.engine.make_url(PG_ADMIN_URL).database
    return f"postgresql+psycopg://postgres@/{database}?host={SOCKET_FOLDER}"


@pytest.mark.postgres
@pytest.mark.parametrize("network", ["none", "host"])
def test_network_none_reaches_the_warehouse_through_its_socket_only(
    db: Database, tmp_path: Path, network: str
) -> None:
    clock = FixedClock(datetime(2026, 12, 3, tzinfo=UTC))
    operator = Caller(tenant="default", user="boss")
    with db.session() as session:  # boss: the home's first person, its operator
        from nbcast.tenancy.roles import seed_operators

        seed_operators(session, "boss", frozenset(), "default", clock.now())
    create_tenant(db, clock, operator, "walled", admin="ada")
    set_network(db, clock, operator, "walled", network)
    with db.session() as session:
        tenant = session.scalars(sa.select(Tenant).where(Tenant.name == "walled")).one()
        tenant.warehouse = {"connections": {"pg": {"kind": "sqlalchemy", "url": socket_url()}}}
        tenant.max_attempts = 1
    author = Caller(tenant="walled", user="ada")
    publish(
        db, make_notebook(tmp_path / "w.ipynb", body=REPORT, nbcast={"name": "w"}), caller=author
    )
    run_id = run_now(db, SystemClock(), author, "w", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert run.state == "SUCCEEDED", run.error
    from tests.executor.test_hostile_reports import printed

    text = printed(tmp_path, run.artifact_sha256)
    assert "ANSWER 42" in text
    expected = "TCP refused ConnectionRefusedError" if network == "none" else "TCP reached"
    assert expected in text


def test_only_an_operator_changes_a_tenants_network(db: Database) -> None:
    from nbcast.tenancy.roles import seed_operators

    clock = FixedClock(datetime(2026, 12, 3, tzinfo=UTC))
    with db.session() as session:
        seed_operators(session, "boss", frozenset(), "default", clock.now())
    create_tenant(db, clock, Caller(tenant="default", user="boss"), "walled", admin="ada")
    with pytest.raises(AccessDeniedError):
        set_network(db, clock, Caller(tenant="walled", user="ada"), "walled", "host")
    record = set_network(db, clock, Caller(tenant="default", user="boss"), "walled", "none")
    assert record.network == "none"
    with db.session() as session:
        actions = session.scalars(sa.select(AuditEntry.action)).all()
    assert "network.changed" in actions
