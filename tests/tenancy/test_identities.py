"""Identities by source (issue 20, item 10) and the check of what belongs to the
installation (item 12), in the command layer, on SQLite and PostgreSQL.

An OS user (the command line's ``NBCAST_USER``) and a jupyter-server user of the same
name are two people: ``root`` and ``jupyter:root``. Only an OS user becomes the first
operator of a fresh home; a server's configured ``admin_users`` are jupyter
identities; a role held by one source is never the other's. Migration 0017 maps the
rows made before sources existed (its docstring), tested here on both back ends from
a database at revision 0016.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from hypothesis import given
from hypothesis import strategies as st

from nbcast.access import JUPYTER_PREFIX, MAX_JUPYTER_NAME, Caller, Source, name_of, source_of
from nbcast.access import identity as identity_of
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.errors import AccessDeniedError, ConfigError, StorageError
from nbcast.tenancy.members import add_member, list_members
from nbcast.tenancy.models import Operator, Tenant, User
from nbcast.tenancy.roles import (
    Role,
    is_operator,
    member,
    readable_tenant,
    require_operator,
    require_role_or_operator,
    seed_operators,
)
from nbcast.tenancy.tenants import ensure_tenant
from tests.command import act_as
from tests.conftest import scratch_pg_database
from tests.members import grant
from tests.notebooks import make_notebook
from tests.oversight.history import table_counts

NOW = datetime(2026, 12, 4, 9, 0, tzinfo=UTC)
CLOCK = FixedClock(NOW)


# -- the identity's text -------------------------------------------------------------


@pytest.mark.parametrize(
    ("source", "name", "expected"),
    [
        pytest.param(Source.os, "root", "root", id="os_bare"),
        pytest.param(Source.jupyter, "root", "jupyter:root", id="jupyter_prefixed"),
        pytest.param(Source.jupyter, "jupyter:x", "jupyter:jupyter:x", id="jupyter_named_so"),
        pytest.param(Source.jupyter, "a" * MAX_JUPYTER_NAME, "jupyter:" + "a" * 120, id="longest"),
        pytest.param(Source.os, "jupyter:root", ConfigError, id="os_posing_as_jupyter"),
        pytest.param(Source.jupyter, "a" * 121, ConfigError, id="jupyter_too_long"),
        pytest.param(Source.jupyter, "", ConfigError, id="jupyter_empty"),
    ],
)
def test_an_identity_carries_its_source(source: Source, name: str, expected: Any) -> None:
    if expected is ConfigError:
        with pytest.raises(ConfigError):
            identity_of(source, name)
        return
    text = identity_of(source, name)
    assert text == expected
    assert len(text) <= 128  # what the users, operators and audit columns hold
    caller = Caller.of(tenant="default", name=name, source=source)
    assert (caller.user, caller.source, caller.name) == (text, source, name)


@given(name=st.text(min_size=1, max_size=MAX_JUPYTER_NAME))
def test_the_two_sources_never_name_the_same_identity(name: str) -> None:
    on_server = identity_of(Source.jupyter, name)
    assert (source_of(on_server), name_of(on_server)) == (Source.jupyter, name)
    if not name.startswith(JUPYTER_PREFIX):
        on_cli = identity_of(Source.os, name)
        assert on_cli != on_server
        assert (source_of(on_cli), name_of(on_cli)) == (Source.os, name)


# -- who becomes an operator -----------------------------------------------------------


def _operators(db: Database) -> set[str]:
    with db.session() as session:
        return set(session.scalars(sa.select(Operator.name)))


def _members(db: Database, tenant: str) -> dict[str, str]:
    with db.session() as session:
        rows = session.execute(
            sa.select(User.name, User.role).join(Tenant).where(Tenant.name == tenant)
        )
        return dict(rows.tuples().all())


def test_a_jupyter_user_acting_first_claims_a_tenant_but_operates_nothing(db: Database) -> None:
    web_root = Caller(tenant="default", user="jupyter:root")
    with db.session() as session:
        assert readable_tenant(session, web_root).name == "default"  # the claim
    assert _operators(db) == set()
    assert _members(db, "default") == {"jupyter:root": "admin"}
    with db.session() as session, pytest.raises(AccessDeniedError, match="not an operator"):
        require_operator(session, web_root, "listing every tenant")
    # The first OS user is the home's first operator (the tenant is claimed already).
    with db.session() as session:
        require_operator(session, Caller(tenant="default", user="root"), "listing tenants", NOW)
    assert _operators(db) == {"root"}


def test_a_servers_owner_is_seeded_and_the_web_user_of_its_name_is_not(db: Database) -> None:
    with db.session() as session:
        seed_operators(session, "root", frozenset({"ops"}), "default", NOW)
    assert _operators(db) == {"root", "jupyter:ops"}
    with db.session() as session:
        assert is_operator(session, "root")
        assert not is_operator(session, "jupyter:root")
        assert not is_operator(session, "ops")  # the OS user ops is not the web's ops
    # The web's root may claim the tenant nobody holds yet, as anyone may: an admin
    # there, no operator.
    web_root = Caller(tenant="default", user="jupyter:root")
    with db.session() as session:
        claimed = member(session, web_root, NOW)
    assert (claimed.role, claimed.operator) == (Role.admin, False)
    with db.session() as session, pytest.raises(AccessDeniedError, match="not an operator"):
        require_operator(session, web_root, "creating a tenant", NOW)
    with db.session() as session, pytest.raises(ConfigError):
        seed_operators(session, "root", frozenset({"x" * 121}), "default", NOW)


def test_a_role_is_held_by_one_source_only(db: Database) -> None:
    boss = Caller(tenant="default", user="boss")
    with db.session() as session:
        require_operator(session, boss, "bootstrapping", NOW)
    add_member(db, CLOCK, boss, "ada", "author")
    add_member(db, CLOCK, boss, "jupyter:bea", "admin")
    with db.session() as session:
        members = {
            m.name: (m.role, m.to_json()["source"]) for m in list_members(session, boss, NOW)
        }
    assert members == {
        "boss": ("admin", "os"),
        "ada": ("author", "os"),
        "jupyter:bea": ("admin", "jupyter"),
    }
    for holder, twin in (("ada", "jupyter:ada"), ("jupyter:bea", "bea"), ("boss", "jupyter:boss")):
        with db.session() as session:
            assert readable_tenant(session, Caller(tenant="default", user=holder))
        with db.session() as session, pytest.raises(AccessDeniedError, match="no role"):
            readable_tenant(session, Caller(tenant="default", user=twin))


# -- what belongs to the installation ---------------------------------------------------

ROLE_OR_OPERATOR = [
    # (tenant, identity, allowed, a member of the tenant afterwards)
    pytest.param("acme", "ada", True, "viewer", id="viewer"),
    pytest.param("acme", "mallory", False, None, id="no_role_in_a_tenant_with_members"),
    pytest.param("acme", "jupyter:ada", False, None, id="the_other_source_of_a_member"),
    pytest.param("nowhere", "ghost", False, None, id="tenant_that_does_not_exist"),
    pytest.param("nowhere", "boss", True, None, id="operator_mapped_to_no_tenant"),
    pytest.param("nowhere", "jupyter:boss", False, None, id="web_user_named_like_the_operator"),
    pytest.param("fresh", "jupyter:newbie", True, "admin", id="tenant_without_members_claimed"),
]


@pytest.mark.parametrize(("tenant", "user", "allowed", "afterwards"), ROLE_OR_OPERATOR)
def test_the_installation_is_for_operators_and_members_of_existing_tenants(
    db: Database, tenant: str, user: str, allowed: bool, afterwards: str | None
) -> None:
    with db.session() as session:
        require_operator(session, Caller(tenant="default", user="boss"), "bootstrapping", NOW)
        ensure_tenant(session, "fresh")
    grant(db, "acme", "ada", "viewer")
    before = table_counts(db)
    caller = Caller(tenant=tenant, user=user)
    if allowed:
        with db.session() as session:
            require_role_or_operator(session, caller, "reading the services' health", NOW)
    else:
        with db.session() as session, pytest.raises(AccessDeniedError) as refused:
            require_role_or_operator(session, caller, "reading the services' health", NOW)
        assert user in str(refused.value)
        assert table_counts(db) == before  # nothing created, claimed or audited
    assert _members(db, tenant).get(user) == afterwards
    with db.session() as session:  # a mapping never creates its tenant
        assert session.scalar(sa.select(Tenant.id).where(Tenant.name == "nowhere")) is None


# -- the command line is an OS user ------------------------------------------------------


def _one_error(code: int, err: str) -> str:
    assert code == 2, err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    return lines[0]


def test_the_command_line_is_always_an_os_user(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    assert act_as(capsys, monkeypatch, "boss", "users", "list")[0] == 0  # boss operates
    code, _out, err = act_as(capsys, monkeypatch, "jupyter:alice", "users", "list")
    assert "jupyter:" in _one_error(code, err)
    notebook = make_notebook(tmp_path / "r.ipynb", nbcast={"name": "r"})
    code, _out, err = act_as(
        capsys, monkeypatch, "boss", "publish", str(notebook), "--author", "jupyter:alice"
    )
    assert "jupyter:" in _one_error(code, err)
    code, _out, err = act_as(capsys, monkeypatch, "boss", "users", "add", "jupyter:" + "x" * 121)
    assert "jupyter:NAME" in _one_error(code, err)
    for name, role in (("jupyter:alice", "author"), ("alice", "viewer")):
        assert act_as(capsys, monkeypatch, "boss", "users", "add", name, "--role", role)[0] == 0
    code, out, _err = act_as(capsys, monkeypatch, "boss", "users", "list", "--json")
    listed = {m["name"]: (m["source"], m["role"]) for m in json.loads(out)}
    assert listed == {
        "boss": ("os", "admin"),
        "alice": ("os", "viewer"),
        "jupyter:alice": ("jupyter", "author"),
    }
    # The OS alice is a viewer whatever the web's alice may do.
    code, _out, err = act_as(capsys, monkeypatch, "alice", "publish", str(notebook))
    assert "viewer" in _one_error(code, err)


# -- migration 0017 ------------------------------------------------------------------------


@pytest.fixture(params=["sqlite", "postgresql"])
def at_0016(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Database]:
    """A new database migrated to revision 0016 (before identities had sources)."""
    if request.param == "sqlite":
        url = f"sqlite:///{tmp_path / 'old.db'}"
        db = Database.open(url, upgrade=False)
        db.upgrade("0016")
        yield db
        db.dispose()
        return
    with scratch_pg_database("nbcast_ids") as url:
        db = Database.open(url, upgrade=False)
        db.upgrade("0016")
        yield db
        db.dispose()


LEGACY_USERS = [
    # (tenant, name, role): made before sources existed
    ("default", "root", "admin"),  # the owner, the first operator
    ("default", "alice", "author"),  # a person who used the server, or the CLI
    ("acme", "alice", "admin"),
    ("acme", "ops", "viewer"),  # an admin_users operator's membership
    ("acme", "jupyter:odd", "viewer"),  # a web user literally called so
    ("acme", "l" * 121, "viewer"),  # too long for a jupyter identity
]
LEGACY_OPERATORS = [("root", "root"), ("ops", "configuration"), ("carol", "root")]


def _legacy(db: Database) -> None:
    with db.engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO tenants (name, created_at) VALUES ('acme', :t)"), {"t": NOW}
        )
        ids = dict(conn.execute(sa.text("SELECT name, id FROM tenants")).tuples().all())
        for tenant, name, role in LEGACY_USERS:
            conn.execute(
                sa.text(
                    "INSERT INTO users (tenant_id, name, email, role, created_at, added_by) "
                    "VALUES (:t, :n, :e, :r, :at, 'root')"
                ),
                {"t": ids[tenant], "n": name, "e": f"{name[:8]}@x.example", "r": role, "at": NOW},
            )
        for name, by in LEGACY_OPERATORS:
            conn.execute(
                sa.text(
                    "INSERT INTO operators (name, granted_at, granted_by) VALUES (:n, :at, :by)"
                ),
                {"n": name, "at": NOW, "by": by},
            )


def _rows(db: Database) -> tuple[set[tuple[str, str, str, str | None]], set[str]]:
    with db.engine.connect() as conn:
        users = conn.execute(
            sa.text(
                "SELECT t.name, u.name, u.role, u.email FROM users u "
                "JOIN tenants t ON t.id = u.tenant_id"
            )
        )
        operators = conn.execute(sa.text("SELECT name FROM operators"))
        return set(users.tuples().all()), set(operators.scalars().all())


def _downgrade(db: Database, revision: str) -> None:
    from alembic import command
    from alembic.config import Config

    from nbcast.db import MIGRATIONS_DIR

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    with db.engine.begin() as conn:
        config.attributes["connection"] = conn
        command.downgrade(config, revision)


def test_the_upgrade_maps_the_old_rows_by_source(at_0016: Database) -> None:
    _legacy(at_0016)
    with at_0016.engine.connect() as conn:
        old_ids = dict(conn.execute(sa.text("SELECT name, id FROM users")).tuples().all())
    at_0016.upgrade("head")
    users, operators = _rows(at_0016)
    long = "l" * 121
    assert operators == {"root", "carol", "jupyter:ops"}
    assert users == {
        # Every old row is an OS identity now, as it was.
        ("default", "root", "admin", "root@x.example"),
        ("default", "alice", "author", "alice@x.example"),
        ("acme", "alice", "admin", "alice@x.example"),
        ("acme", "ops", "viewer", "ops@x.example"),
        ("acme", long, "viewer", "llllllll@x.example"),
        # The web users of those names keep what they could do — not the OS
        # operator root's rows; no copy of a name too long for a jupyter identity.
        ("default", "jupyter:alice", "author", "alice@x.example"),
        ("acme", "jupyter:alice", "admin", "alice@x.example"),
        ("acme", "jupyter:ops", "viewer", "ops@x.example"),
        # A name that already read as a jupyter identity is the web user so called.
        ("acme", "jupyter:jupyter:odd", "viewer", "jupyter:@x.example"),
    }
    with at_0016.engine.connect() as conn:
        kept = dict(conn.execute(sa.text("SELECT name, id FROM users")).tuples().all())
    assert {name: kept[name] for name in ("root", long)} == {
        name: old_ids[name] for name in ("root", long)
    }
    with at_0016.session() as session:
        # The case: the owner's rows are not the web root's.
        with pytest.raises(AccessDeniedError):
            readable_tenant(session, Caller(tenant="default", user="jupyter:root"))
        assert is_operator(session, "root")
        assert not is_operator(session, "jupyter:root")
        assert readable_tenant(session, Caller(tenant="acme", user="jupyter:alice")).name == "acme"
    _downgrade(at_0016, "0016")  # the web rows get their bare names back where free
    users, operators = _rows(at_0016)
    assert operators == {"root", "carol", "ops"}
    assert ("acme", "jupyter:odd", "viewer", "jupyter:@x.example") in users


def test_the_upgrade_stops_on_a_legacy_name_too_long_for_the_prefix(at_0016: Database) -> None:
    name = "jupyter:" + "x" * 113  # 121 characters: "jupyter:" more would not fit
    with at_0016.engine.begin() as conn:
        conn.execute(
            sa.text("INSERT INTO operators (name, granted_at, granted_by) VALUES (:n, :at, 'x')"),
            {"n": name, "at": NOW},
        )
    with pytest.raises(StorageError, match="too long"):
        at_0016.upgrade("head")
    assert at_0016.current_revision() == "0016"
    assert _rows(at_0016)[1] == {name}  # nothing half done
