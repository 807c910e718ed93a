"""The application's PostgreSQL role owns nothing (issue 20, item 5): migrations run as
the owner role (``NBCAST_DATABASE_OWNER_URL``), the services as a role that can do
nbcast's work — publish, claim, run, record, audit, checkpoint — but can neither
switch the audit log's append-only trigger off, nor set ``session_replication_role``,
nor change or delete an audit row or checkpoint, nor grant itself more."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from tests.conftest import PG_ADMIN_URL, service_missing
from tests.notebooks import make_notebook

BIN = Path(sys.executable).parent


class Roles:
    """An owner role, an application role and a database the owner owns."""

    def __init__(self) -> None:
        suffix = f"{os.getpid()}_{uuid.uuid4().hex[:6]}"
        self.owner, self.app, self.database = (
            f"nbcast_owner_{suffix}",
            f"nbcast_app_{suffix}",
            f"nbcast_roles_{suffix}",
        )
        self.admin = sa.create_engine(PG_ADMIN_URL, isolation_level="AUTOCOMMIT")
        try:
            with self.admin.connect() as conn:
                conn.execute(sa.text(f'CREATE ROLE "{self.owner}" LOGIN'))
                conn.execute(sa.text(f'CREATE ROLE "{self.app}" LOGIN'))
                conn.execute(sa.text(f'CREATE DATABASE "{self.database}" OWNER "{self.owner}"'))
        except sa.exc.OperationalError as exc:
            service_missing("PostgreSQL on 127.0.0.1:5432", str(exc.orig).splitlines()[0])

    def url(self, role: str) -> str:
        return (
            sa.engine.make_url(PG_ADMIN_URL)
            .set(username=role, password=None, database=self.database)
            .render_as_string(hide_password=False)
        )

    def drop(self) -> None:
        with self.admin.connect() as conn:
            conn.execute(
                sa.text(
                    "SELECT pg_terminate_backend(pid) FROM pg_stat_activity "
                    "WHERE datname = :d AND pid <> pg_backend_pid()"
                ),
                {"d": self.database},
            )
            conn.execute(sa.text(f'DROP DATABASE IF EXISTS "{self.database}"'))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{self.app}"'))
            conn.execute(sa.text(f'DROP ROLE IF EXISTS "{self.owner}"'))
        self.admin.dispose()


@pytest.fixture
def roles() -> Iterator[Roles]:
    made = Roles()
    try:
        yield made
    finally:
        made.drop()


def nbcast(env: dict[str, str], *argv: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv], env=env, capture_output=True, text=True, timeout=300
    )
    if check:
        assert done.returncode == 0, (argv, done.stdout, done.stderr)
    return done


def environment(roles: Roles, home: Path, *, owner: bool) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("NBCAST_DATABASE")}
    env.update(NBCAST_HOME=str(home), NBCAST_DATABASE_URL=roles.url(roles.app), NBCAST_USER="ops")
    if owner:
        env["NBCAST_DATABASE_OWNER_URL"] = roles.url(roles.owner)
    return env


def refused(engine: sa.Engine, statement: str) -> str:
    """The database's refusal of ``statement`` (an assertion error if it succeeds)."""
    with engine.connect() as conn:
        try:
            conn.execute(sa.text(statement))
        except sa.exc.DBAPIError as exc:
            conn.rollback()
            return str(exc.orig).splitlines()[0]
    raise AssertionError(f"the application role could run: {statement}")


@pytest.mark.postgres
def test_the_application_role_runs_nbcast_and_cannot_rewrite_the_audit_log(
    roles: Roles, tmp_path: Path
) -> None:
    home = tmp_path / "home"
    services = environment(roles, home, owner=False)
    behind = nbcast(services, "runs", "list", check=False)
    assert behind.returncode == 2
    assert "run `nbcast db upgrade` with NBCAST_DATABASE_OWNER_URL" in behind.stderr
    assert len(behind.stderr.strip().splitlines()) == 1
    upgraded = nbcast(environment(roles, home, owner=True), "db", "upgrade")
    assert "-> 0" in upgraded.stdout
    # The services, as the application role only: publish, run, claim, record, audit.
    notebook = make_notebook(tmp_path / "r.ipynb", body="print(region)", nbcast={"name": "r"})
    nbcast(services, "publish", str(notebook))
    nbcast(services, "run", "r")
    nbcast(services, "worker", "--exit-when-idle", "--no-warm-kernels")
    assert "SUCCEEDED" in nbcast(services, "runs", "list").stdout
    nbcast(services, "audit", "checkpoint", "--all-tenants")
    assert nbcast(services, "audit", "verify", "--all-tenants").stdout.startswith(
        "audit log intact"
    )

    app = sa.create_engine(roles.url(roles.app))
    try:
        with app.connect() as conn:
            owned = conn.execute(
                sa.text(
                    "SELECT count(*) FROM pg_class c JOIN pg_roles r ON r.oid = c.relowner "
                    "WHERE r.rolname = current_user"
                )
            ).scalar()
        assert owned == 0  # it owns no table, index, sequence or view
        assert "must be owner" in refused(app, "ALTER TABLE audit_log DISABLE TRIGGER ALL")
        assert "permission denied" in refused(app, "SET session_replication_role = replica")
        for statement in (
            "UPDATE audit_log SET actor = 'mallory'",
            "DELETE FROM audit_log",
            "TRUNCATE audit_log",
            "DELETE FROM audit_checkpoints",
            "UPDATE audit_checkpoints SET signature = ''",
            "UPDATE alembic_version SET version_num = '0001'",
            "DROP TRIGGER audit_log_no_update_delete ON audit_log",
        ):
            answer = refused(app, statement)
            assert "permission denied" in answer or "must be owner" in answer, (statement, answer)
        with app.connect() as conn:  # granting itself more: PostgreSQL grants nothing
            conn.execute(sa.text(f'GRANT UPDATE, DELETE ON audit_log TO "{roles.app}"'))
            conn.commit()
            can = conn.execute(
                sa.text("SELECT has_table_privilege('audit_log', 'UPDATE, DELETE')")
            ).scalar()
        assert can is False
    finally:
        app.dispose()
    assert nbcast(services, "audit", "verify", "--all-tenants").stdout.startswith(
        "audit log intact"
    )
