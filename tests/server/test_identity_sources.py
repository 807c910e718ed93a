"""Identities by source and the installation's own pages, on a live ``nbcast serve``
(issue 20, items 10 and 12).

The server's owner is the OS user ``root`` (``NBCAST_USER``), the home's first
operator; the server also has a *web* user called ``root`` (a token of its own). They
are two people: the web's root is no operator and holds no role until one is given
to ``jupyter:root``. ``admin_users`` makes the web's ``ops`` an operator, not the OS
user ``ops``.

Everything that belongs to the installation rather than a tenant — ``/health``,
``/services/embedded``, ``/schedule/preview``, ``/nbcast/metrics`` and the status
pages — is for operators and people with a role in an existing tenant: a web user
mapped to a tenant nobody created (ghost) and one without a role in hers (mallory)
get 403 and write nothing; a user mapped to a tenant without members still claims it.
A server whose owner would read as a web user, or whose ``admin_users`` names no
acceptable web user, refuses to start.
"""

from __future__ import annotations

import hashlib
import json
import sqlite3
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from nbcast.errors import ConfigError
from nbcast.server_extension.state import ServerOptions, ServerState
from tests.server.live import BIN, LiveServer

USERS = {
    "root": "acme",  # the web user named like the server's owner
    "alice": "acme",  # acme's admin
    "mallory": "acme",  # no role in acme
    "ghost": "nowhere",  # mapped to a tenant nobody created
    "ops": "elsewhere",  # an operator (admin_users), mapped to no existing tenant
    "newbie": "fresh",  # the first person of a tenant without members
}
OWNER = "root"


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LiveServer]:
    folder: Path = tmp_path_factory.mktemp("identities")
    with LiveServer(folder, users=USERS, admins=("ops",), env={"NBCAST_USER": OWNER}) as server:
        with server.client() as owner:  # opens the database: the owner is seeded
            assert owner.get("/nbcast/api/v1/health").status_code == 200
        nbcast(server, OWNER, "tenants", "create", "acme", "--admin", "jupyter:alice")
        nbcast(server, OWNER, "tenants", "create", "fresh")
        yield server


def nbcast(server: LiveServer, user: str, *argv: str, tenant: str = "default") -> str:
    """``nbcast ARGV`` as the OS user ``user``; its stdout (exit status 0 asserted)."""
    done = run_cli(server, user, *argv, tenant=tenant)
    assert done.returncode == 0, (argv, done.stderr)
    return done.stdout


def run_cli(
    server: LiveServer, user: str, *argv: str, tenant: str = "default"
) -> subprocess.CompletedProcess[str]:
    env = {**server.env, "NBCAST_USER": user, "NBCAST_TENANT": tenant}
    return subprocess.run(
        [str(BIN / "nbcast"), *argv], env=env, capture_output=True, text=True, timeout=60
    )


def digest(server: LiveServer) -> str:
    """Every row of every table of the server's database."""
    conn = sqlite3.connect(f"{(server.home / 'nbcast.db').as_uri()}?mode=ro", uri=True)
    try:
        tables = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        rows = {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in sorted(tables)}
    finally:
        conn.close()
    return hashlib.sha256(json.dumps(rows).encode()).hexdigest()


def members(server: LiveServer, tenant: str) -> dict[str, str]:
    """The members of ``tenant`` and their roles, read from the database (acting in it,
    even as an operator, would claim a tenant without members)."""
    conn = sqlite3.connect(f"{(server.home / 'nbcast.db').as_uri()}?mode=ro", uri=True)
    try:
        rows = conn.execute(
            "SELECT u.name, u.role FROM users u JOIN tenants t ON t.id = u.tenant_id "
            "WHERE t.name = ?",
            (tenant,),
        )
        return dict(rows.fetchall())
    finally:
        conn.close()


def test_the_os_owner_and_the_web_user_root_are_two_people(live: LiveServer) -> None:
    api = "/nbcast/api/v1"
    quota = f"{api}/tenants/acme/quota"
    with live.client() as owner, live.client("root") as web_root, live.client("ops") as ops:
        assert owner.get(f"{api}/tenants").status_code == 200  # the owner's own token
        # The web's root shares a name with the owner and nothing else.
        before = digest(live)
        for method, path, body in (
            ("GET", f"{api}/tenants", None),
            ("GET", f"{api}/health", None),
            ("PATCH", quota, {"max_concurrent_runs": 9}),
        ):
            answer = web_root.request(method, path, json=body)
            assert answer.status_code == 403, (path, answer.text)
            assert answer.json()["error"]["code"] == "forbidden"
        assert digest(live) == before
        # A role given to the web's root is theirs alone: a viewer, not an operator.
        nbcast(live, OWNER, "users", "add", "jupyter:root", "--role", "viewer", tenant="acme")
        assert web_root.get(f"{api}/health").status_code == 200
        assert web_root.get(f"{api}/tenants").status_code == 403
        assert web_root.patch(quota, json={"max_concurrent_runs": 9}).status_code == 403
        # admin_users names the web's ops; the OS user ops operates nothing.
        assert ops.get(f"{api}/tenants").status_code == 200
    refused = run_cli(live, "ops", "tenants", "list")
    assert refused.returncode == 2
    assert refused.stderr.startswith("error: 'ops' is not an operator"), refused.stderr
    assert members(live, "acme") == {"jupyter:alice": "admin", "jupyter:root": "viewer"}


INSTALLATION = [
    # (path, what a member of an existing tenant and an operator get)
    ("/nbcast/api/v1/health", 200),
    ("/nbcast/api/v1/services/embedded", 200),
    ("/nbcast/api/v1/schedule/preview?cron=0+7+*+*+*&from=2026-01-05&until=2026-01-07", 200),
    ("/nbcast/metrics", 200),
    ("/nbcast/", 200),
    ("/nbcast/definitions", 200),
    ("/nbcast/definitions/nothing", 404),
    ("/nbcast/runs/1", 404),
    ("/nbcast/runs/1/notebook.html", 404),
]
REFUSALS = [
    pytest.param("ghost", path, allowed, id=f"ghost {path.split('?')[0]}")
    for path, allowed in INSTALLATION
] + [
    pytest.param("mallory", path, allowed, id=f"mallory {path.split('?')[0]}")
    for path, allowed in INSTALLATION
    if "/api/" in path or path.endswith("metrics")  # the pages refused her already
]


@pytest.mark.parametrize(("stranger", "path", "allowed"), REFUSALS)
def test_users_without_a_role_see_nothing_installation_wide(
    live: LiveServer, stranger: str, path: str, allowed: int
) -> None:
    before = digest(live)
    with live.client(stranger) as client:
        answer = client.get(path)
    assert answer.status_code == 403, answer.text[:300]
    if path.startswith("/nbcast/api/") or path == "/nbcast/metrics":
        assert answer.json()["error"]["code"] == "forbidden"
    assert "Traceback" not in answer.text
    for leak in ("nbcast_up", "scheduler", "alive", "sla-count", "07:00"):
        assert leak not in answer.text
    assert digest(live) == before  # no tenant created, nothing claimed or recorded
    # A member of an existing tenant, and an operator mapped to no tenant, may.
    for user in ("alice", "ops"):
        with live.client(user) as client:
            assert client.get(path).status_code == allowed, (user, path)


def test_a_tenant_without_members_is_claimed_by_its_first_person(live: LiveServer) -> None:
    assert members(live, "fresh") == {}
    with live.client("newbie") as newbie:
        assert newbie.get("/nbcast/api/v1/health").status_code == 200
    assert members(live, "fresh") == {"jupyter:newbie": "admin"}


@pytest.mark.parametrize(
    ("owner", "admins"),
    [
        pytest.param("jupyter:root", ("ops",), id="owner_posing_as_a_web_user"),
        pytest.param("root", ("x" * 121,), id="admin_name_too_long"),
    ],
)
def test_a_server_refuses_at_start_an_owner_or_admin_it_cannot_name(
    tmp_path: Path, owner: str, admins: tuple[str, ...]
) -> None:
    env = {"NBCAST_HOME": str(tmp_path / "home"), "NBCAST_USER": owner}
    with pytest.raises(ConfigError):
        ServerState.create(env, ServerOptions(admin_users=frozenset(admins)))
    # The same server with an OS owner and a web admin it can name starts.
    env["NBCAST_USER"] = "root"
    assert ServerState.create(env, ServerOptions(admin_users=frozenset({"ops"})))
