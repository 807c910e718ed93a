"""The database layer, run on SQLite and on PostgreSQL by one parametrized fixture."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.config import load_settings
from nbcast.db import Base, Database, import_models
from nbcast.errors import StorageError
from nbcast.tenancy.models import Tenant, User
from nbcast.tenancy.tenants import ensure_tenant, ensure_user


def test_migrations_create_the_tables_and_the_default_tenant(db: Database) -> None:
    names = set(sa.inspect(db.engine).get_table_names())
    assert {
        "tenants",
        "users",
        "report_definitions",
        "definition_versions",
        "alembic_version",
    } <= names
    assert db.current_revision() == db.head_revision()
    with db.session() as session:
        assert session.scalars(sa.select(Tenant.name)).all() == ["default"]


def test_every_tenant_owned_table_carries_tenant_id(db: Database) -> None:
    inspector = sa.inspect(db.engine)
    for table in inspector.get_table_names():
        # The installation's own rows: its tenants, its services, its operators.
        if table in (
            "tenants",
            "alembic_version",
            "service_heartbeats",
            "operators",
            "governance_jobs",
        ):
            continue
        assert "tenant_id" in {c["name"] for c in inspector.get_columns(table)}, table


def test_the_migrations_build_the_schema_the_models_describe(db: Database) -> None:
    """Alembic's comparison of the migrated database with the models finds nothing:
    no table, column, index or constraint of one is missing from the other."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext

    import_models()
    with db.engine.connect() as conn:
        context = MigrationContext.configure(
            conn, opts={"compare_type": False, "compare_server_default": False}
        )
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def test_head_revision_agrees_with_alembic() -> None:
    from alembic.config import Config
    from alembic.script import ScriptDirectory

    from nbcast.db import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    assert Database.head_revision() == ScriptDirectory.from_config(config).get_current_head()


def test_instants_round_trip_as_aware_utc(db: Database) -> None:
    local = datetime(2026, 11, 1, 1, 30, tzinfo=timezone(timedelta(hours=-4)))
    with db.session() as session:
        tenant = Tenant(name="acme", created_at=local)
        session.add(tenant)
    with db.session() as session:
        stored = session.scalar(sa.select(Tenant.created_at).where(Tenant.name == "acme"))
    assert stored == local
    assert stored is not None
    assert stored.tzinfo is not None
    assert stored.utcoffset() == timedelta(0)
    assert stored == datetime(2026, 11, 1, 5, 30, tzinfo=UTC)


def test_naive_datetimes_are_refused_and_nothing_is_written(db: Database) -> None:
    with pytest.raises(sa.exc.StatementError) as info, db.session() as session:
        session.add(Tenant(name="naive", created_at=datetime(2026, 1, 1)))
        session.flush()
    assert isinstance(info.value.orig, StorageError)
    with db.session() as session:
        assert session.scalar(sa.select(sa.func.count()).select_from(Tenant)) == 1


def test_unique_names_per_tenant(db: Database) -> None:
    with db.session() as session:
        acme = ensure_tenant(session, "acme")
        default = ensure_tenant(session, "default")
        ensure_user(session, acme, "ana")
        ensure_user(session, default, "ana")  # same name, other tenant: fine
        assert ensure_user(session, acme, "ana").tenant_id == acme.id
    with pytest.raises(sa.exc.IntegrityError), db.session() as session:
        session.add(User(tenant_id=1, name="ana"))
        session.flush()


def test_a_failed_transaction_writes_nothing(db: Database) -> None:
    with pytest.raises(RuntimeError), db.session() as session:
        ensure_tenant(session, "ghost")
        raise RuntimeError("abort")
    with db.session() as session:
        assert session.scalar(sa.select(Tenant).where(Tenant.name == "ghost")) is None


def test_concurrent_opens_migrate_once(db_url: str) -> None:
    # The fixture migrated already; drop to empty and let four threads race.
    db = Database(db_url)
    import_models()
    with db.engine.begin() as conn:
        Base.metadata.drop_all(conn)
        conn.execute(sa.text("DROP TABLE IF EXISTS alembic_version"))
    db.dispose()
    failures: list[BaseException] = []

    def opener() -> None:
        try:
            Database.open(db_url).dispose()
        except BaseException as exc:  # pragma: no cover - reported below
            failures.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    db = Database.open(db_url)
    with db.session() as session:
        assert session.scalars(sa.select(Tenant.name)).all() == ["default"]
    db.dispose()


def test_sqlite_uses_wal(nbcast_home: Path) -> None:
    db = Database.open(load_settings().database_url)
    with db.engine.connect() as conn:
        assert conn.exec_driver_sql("PRAGMA journal_mode").scalar() == "wal"
        assert conn.exec_driver_sql("PRAGMA foreign_keys").scalar() == 1
    assert (nbcast_home / "nbcast.db").exists()


def test_unreachable_database_is_a_storage_error() -> None:
    with pytest.raises(StorageError, match="cannot open database"):
        Database.open(
            "postgresql+psycopg://nobody@127.0.0.1:1/none", connect_args={"connect_timeout": 2}
        )


def test_opening_a_database_again_keeps_this_process_locks(nbcast_home: Path) -> None:
    """Checking a database file must never open it with a plain file handle: closing
    any handle of a file drops every POSIX lock the process holds on it. In WAL mode
    each open connection holds a shared lock on the database file; without it, another
    process that closes its last connection believes it is the last one and deletes
    the write-ahead log under this process — the demo once corrupted its database so."""
    import sqlite3
    import subprocess
    import sys

    path = nbcast_home / "nbcast.db"
    Database.open(f"sqlite:///{path}").dispose()
    held = sqlite3.connect(path)
    held.execute("SELECT count(*) FROM tenants").fetchall()  # open, with its shared lock
    try:
        Database.open(f"sqlite:///{path}").dispose()  # checks the file meanwhile
        writer = (
            "import sqlite3, sys\n"
            "c = sqlite3.connect(sys.argv[1], isolation_level=None)\n"
            "c.execute('PRAGMA user_version = 7')\n"
            "c.close()\n"
        )
        subprocess.run([sys.executable, "-c", writer, str(path)], check=True)
        # The other process was not the last one: the log it wrote to is still there.
        assert (nbcast_home / "nbcast.db-wal").exists()
        assert held.execute("PRAGMA user_version").fetchone() == (7,)
    finally:
        held.close()
