"""The permission matrix on the command line: every state-changing command (and the
admin-only reads) run as a viewer, an author, an admin, a stranger and the operator of
one home; exactly the allowed ones succeed, the rest fail with one ``error:`` line,
exit 2, and write nothing (a digest of every table, before and after).

Each case runs on its own copy of one prepared home, so the cases cannot see each
other; the CLI runs in-process (``nbcast.cli.main``), as the installed command does.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest

from nbcast.cli import main
from nbcast.db import Database
from tests.notebooks import make_notebook

VIEWER, AUTHOR, ADMIN, STRANGER, OPERATOR = "vic", "aut", "ada", "eve", "boss"
ROLES = {VIEWER: 1, AUTHOR: 2, ADMIN: 3}
"""Members of tenant acme and their rank; the stranger is globex's admin but nothing in
acme, where every case acts; the operator runs the installation."""

BLOCK = {
    "name": "sales",
    "schedule": {"cron": "0 7 * * *", "timezone": "Europe/Berlin"},
    "subscriptions": [{"channel": "link", "to": "cfo@example.com"}],
}


def _cli(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    home: Path,
    user: str,
    *argv: str,
) -> tuple[int, str, str]:
    monkeypatch.setenv("NBCAST_HOME", str(home))
    monkeypatch.setenv("NBCAST_USER", user)
    monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
    capsys.readouterr()
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def _ok(
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    home: Path,
    user: str,
    *argv: str,
) -> str:
    code, out, err = _cli(capsys, monkeypatch, home, user, *argv)
    assert code == 0, (argv, out, err)
    return out


def _digest(home: Path) -> str:
    """Every row of every table of the home's database."""
    conn = sqlite3.connect(f"{(home / 'nbcast.db').as_uri()}?mode=ro", uri=True)
    try:
        tables = [
            r[0]
            for r in conn.execute(
                "SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name"
            )
        ]
        summary = {t: sorted(map(repr, conn.execute(f'SELECT * FROM "{t}"'))) for t in tables}
    finally:
        conn.close()
    return hashlib.sha256(json.dumps(summary).encode()).hexdigest()


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """A home with tenant acme (admin, author, viewer), tenant globex (the stranger),
    a published scheduled report with a queued run, a finished run and a link; the ids
    the cases need."""
    base = tmp_path_factory.mktemp("permissions")
    home = base / "home"
    with pytest.MonkeyPatch.context() as monkeypatch:
        run = _Runner(monkeypatch, home)
        run(OPERATOR, "tenants", "create", "acme", "--admin", ADMIN)
        run(OPERATOR, "tenants", "create", "globex", "--admin", STRANGER)
        run(ADMIN, "--tenant", "acme", "users", "add", AUTHOR, "--role", "author")
        run(ADMIN, "--tenant", "acme", "users", "add", VIEWER, "--role", "viewer")
        path = make_notebook(base / "sales.ipynb", nbcast=BLOCK)
        run(ADMIN, "--tenant", "acme", "publish", str(path))
        queued = json.loads(run(ADMIN, "--tenant", "acme", "run", "sales", "--json"))["id"]
        finished = json.loads(run(ADMIN, "--tenant", "acme", "run", "sales", "--json"))["id"]
    db = Database.open(f"sqlite:///{home / 'nbcast.db'}")
    now = datetime.now(UTC)
    with db.engine.begin() as conn:
        conn.exec_driver_sql(
            "UPDATE runs SET state = 'FAILED', finished_at = ? WHERE id = ?", (now, finished)
        )
        tenant = conn.exec_driver_sql("SELECT id FROM tenants WHERE name = 'acme'").scalar()
        link = conn.exec_driver_sql(
            "INSERT INTO signed_links (tenant_id, run_id, recipient, sha256, filename, "
            "media_type, key_id, created_at, expires_at) VALUES (?, ?, 'cfo@example.com', ?, "
            "'r.html', 'text/html', 'k', ?, ?) RETURNING id",
            (tenant, finished, "0" * 64, now, datetime(2099, 1, 1, tzinfo=UTC)),
        ).scalar()
    db.dispose()
    changed = make_notebook(base / "sales.ipynb", nbcast={**BLOCK, "description": "v2"})
    return (
        home,
        {
            "queued": str(queued),
            "finished": str(finished),
            "link": str(link),
            "notebook": str(changed),
        },
    )


class _Runner:
    """Runs the CLI in a module-scoped fixture (no capsys there), reading its output."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, home: Path) -> None:
        self.monkeypatch, self.home = monkeypatch, home

    def __call__(self, user: str, *argv: str) -> str:
        import contextlib
        import io

        self.monkeypatch.setenv("NBCAST_HOME", str(self.home))
        self.monkeypatch.setenv("NBCAST_USER", user)
        self.monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
        out, err = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(list(argv))
        assert code == 0, (argv, out.getvalue(), err.getvalue())
        return out.getvalue()


# (the command, the least role that may run it; "operator" for the operator alone)
CASES = [
    (["publish", "{notebook}"], "author"),
    (["pause", "sales"], "author"),
    (["resume", "sales"], "author"),
    (["backfill", "sales", "--from", "2020-01-01", "--to", "2020-01-03"], "author"),
    (["run", "sales"], "author"),
    (["rerun", "{finished}"], "author"),
    (["cancel", "{queued}"], "author"),
    (["deliver", "--retry-failed", "{finished}"], "author"),
    (["unsubscribe", "--report", "sales", "--to", "cfo@example.com"], "author"),
    (["links", "revoke", "{link}"], "author"),
    (["users", "add", "newbie"], "admin"),
    (["users", "grant", AUTHOR, "viewer"], "admin"),
    (["users", "revoke", VIEWER], "admin"),
    (["tenants", "set-quota", "acme", "--max-concurrent", "2"], "admin"),
    (["retention", "set", "--artifacts-days", "30", "--rows-days", "90"], "admin"),
    (["retention", "apply"], "admin"),
    (["audit", "verify"], "admin"),
    (["audit", "export"], "admin"),
    (["tenants", "create", "initech"], "operator"),
    (["tenants", "list"], "operator"),
    (["users", "grant", AUTHOR, "operator"], "operator"),
]


def _allowed(user: str, needed: str) -> bool:
    if user == OPERATOR:
        return True
    if needed == "operator" or user == STRANGER:
        return False
    return ROLES[user] >= {"author": 2, "admin": 3}[needed]


@pytest.mark.parametrize("user", [VIEWER, AUTHOR, ADMIN, STRANGER, OPERATOR])
@pytest.mark.parametrize(
    ("argv", "needed"), CASES, ids=[" ".join(argv[:2]) + f"-{needed}" for argv, needed in CASES]
)
def test_each_role_may_do_exactly_what_it_allows(
    world: tuple[Path, dict[str, str]],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    user: str,
    argv: list[str],
    needed: str,
) -> None:
    prepared, ids = world
    home = tmp_path / "home"
    shutil.copytree(prepared, home)
    command = [part.format(**ids) for part in argv]
    before = _digest(home)
    code, out, err = _cli(capsys, monkeypatch, home, user, "--tenant", "acme", *command)
    if _allowed(user, needed):
        assert code == 0, (out, err)
        return
    assert code == 2, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: ")
    assert "role" in lines[0] or "operator" in lines[0], lines[0]
    assert _digest(home) == before  # nothing written, not even an audit entry


# -- the same through the REST API ----------------------------------------------------

API = "/nbcast/api/v1"

API_CASES = [
    ("post", "/definitions", "notebook", "author"),
    ("post", "/definitions/sales/pause", None, "author"),
    ("post", "/definitions/sales/resume", None, "author"),
    ("post", "/definitions/sales/runs", {}, "author"),
    (
        "post",
        "/definitions/sales/backfill",
        {"from": "2020-01-01", "until": "2020-01-03"},
        "author",
    ),
    ("post", "/runs/{queued}/cancel", None, "author"),
    ("post", "/runs/{finished}/rerun", None, "author"),
    ("post", "/runs/{finished}/deliveries/retry", None, "author"),
    ("patch", "/tenants/acme/quota", {"max_concurrent_runs": 2}, "admin"),
    ("get", "/audit", None, "admin"),
    ("get", "/audit/verify", None, "admin"),
    ("get", "/tenants", None, "operator"),
]


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_each_role_may_call_exactly_the_routes_it_allows(tmp_path: Path) -> None:
    """Every state-changing route (and the admin-only reads) as each role, in turn: the
    refused calls answer 403 and leave every table as it was; then the least role that
    may make the call makes it (2xx)."""
    from tests.server.live import LiveServer

    users = {u: "acme" for u in (VIEWER, AUTHOR, ADMIN, STRANGER, OPERATOR)}
    # The server's users are jupyter identities: the web's boss operates by
    # configuration (admin_users), not by sharing the OS owner's name.
    with LiveServer(
        tmp_path, users=users, admins=(OPERATOR,), env={"NBCAST_USER": OPERATOR}
    ) as live:
        with live.client() as owner:  # the first request opens the database: boss operates
            assert owner.get(f"{API}/definitions").status_code == 200
        with pytest.MonkeyPatch.context() as monkeypatch:
            run = _Runner(monkeypatch, live.home)
            run(OPERATOR, "tenants", "create", "acme", "--admin", ADMIN)
            for user, role in ((ADMIN, "admin"), (AUTHOR, "author"), (VIEWER, "viewer")):
                run(ADMIN, "--tenant", "acme", "users", "add", f"jupyter:{user}", "--role", role)
            path = make_notebook(tmp_path / "sales.ipynb", nbcast=BLOCK)
            run(ADMIN, "--tenant", "acme", "publish", str(path))
            queued = json.loads(run(ADMIN, "--tenant", "acme", "run", "sales", "--json"))["id"]
            finished = json.loads(run(ADMIN, "--tenant", "acme", "run", "sales", "--json"))["id"]
        db = Database.open(f"sqlite:///{live.home / 'nbcast.db'}")
        with db.engine.begin() as conn:
            conn.exec_driver_sql(
                "UPDATE runs SET state = 'FAILED', finished_at = ? WHERE id = ?",
                (datetime.now(UTC), finished),
            )
        db.dispose()
        v2 = json.loads(
            make_notebook(tmp_path / "two.ipynb", nbcast={**BLOCK, "name": "sales-two"}).read_text()
        )
        clients = {user: live.client(user) for user in users}
        try:
            for method, template, body, needed in API_CASES:
                url = API + template.format(queued=queued, finished=finished)
                payload = {"notebook": v2} if body == "notebook" else body
                allowed = [u for u in (VIEWER, AUTHOR, ADMIN, OPERATOR) if _allowed(u, needed)]
                for user in (STRANGER, VIEWER, AUTHOR, ADMIN):
                    if user in allowed:
                        continue
                    before = _digest(live.home)
                    answer = clients[user].request(method, url, json=payload)
                    assert answer.status_code == 403, (user, method, url, answer.text)
                    assert answer.json()["error"]["code"] == "forbidden", answer.text
                    assert _digest(live.home) == before, (user, method, url)
                answer = clients[allowed[0]].request(method, url, json=payload)
                assert answer.status_code < 300, (allowed[0], method, url, answer.text)
            # The status UI's audit page: the admins' (and the operator's), 403 for others.
            page = clients[ADMIN].get("/nbcast/audit")
            assert page.status_code == 200, page.text
            assert "✓ intact" in page.text
            assert "definition.published" in page.text
            assert "quota.changed" in page.text
            for user in (VIEWER, AUTHOR, STRANGER):
                assert clients[user].get("/nbcast/audit").status_code == 403
        finally:
            for client in clients.values():
                client.close()
