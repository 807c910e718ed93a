"""Shared fixtures: an isolated nbcast home, and one database fixture over two back ends.

Services: tests that need PostgreSQL (and, later, Ray or Chromium) are skipped with
the reason printed when the service is missing — except under ``CI=true``, where a
missing service fails the run instead, so CI can never pass by skipping.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.db import Base, Database, _import_models

PG_ADMIN_URL = os.environ.get(
    "NBCAST_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parents[1]


def service_missing(what: str, why: str) -> None:
    """Skip outside CI; fail in CI (a missing service must not pass silently)."""
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def nbcast_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own NBCAST_HOME and the embedded database in it."""
    home = tmp_path / "nbcast-home"
    monkeypatch.setenv("NBCAST_HOME", str(home))
    monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
    monkeypatch.delenv("NBCAST_TENANT", raising=False)
    monkeypatch.setenv("NBCAST_USER", "tester")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    return home


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
    name = f"nbcast_test_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    try:
        with admin.connect() as conn:
            conn.execute(sa.text(f'CREATE DATABASE "{name}"'))
    except sa.exc.OperationalError as exc:
        admin.dispose()
        service_missing("PostgreSQL on 127.0.0.1:5432", str(exc.orig).splitlines()[0])
    url = sa.engine.make_url(PG_ADMIN_URL).set(database=name).render_as_string(hide_password=False)
    Database.open(url).dispose()
    yield url
    with admin.connect() as conn:
        conn.execute(
            sa.text("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE datname = :n"),
            {"n": name},
        )
        conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{name}"'))
    admin.dispose()


def _reset_postgres(db: Database) -> None:
    _import_models()
    tables = [t.name for t in Base.metadata.sorted_tables]
    with db.engine.begin() as conn:
        conn.execute(
            sa.text("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE")
        )
        conn.execute(sa.text("INSERT INTO tenants (name, created_at) VALUES ('default', now())"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, nbcast_home: Path) -> str:
    """The URL of an empty, migrated nbcast database on each back end in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{nbcast_home / 'nbcast.db'}"
    url: str = request.getfixturevalue("pg_url")
    db = Database.open(url)
    _reset_postgres(db)
    db.dispose()
    return url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """An open :class:`Database` on each back end in turn (see ``db_url``)."""
    database = Database.open(db_url)
    yield database
    database.dispose()


@pytest.fixture
def use_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the CLI (NBCAST_DATABASE_URL) at the parametrized database."""
    monkeypatch.setenv("NBCAST_DATABASE_URL", db_url)
    return db_url
