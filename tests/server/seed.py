"""Real runs and deliveries in a live server's database, for the API tests.

Everything goes through nbcast's own command layer and services against the server's
``NBCAST_HOME``: notebooks published, manual runs queued, a real ``nbcast worker
--exit-when-idle`` executing them in a kernel, a real ``nbcast delivery-worker
--exit-when-idle`` rendering and delivering. Alice (tenant acme) gets a report that
succeeds (HTML and CSV, a signed link that is sent and a Slack message that fails: no
Slack is configured) and one whose second cell raises; bob (tenant globex) gets a
report of his own, so his tenant exists and has objects too. Both are authors in
their tenants (granted in the database before anything acts, so neither becomes the
home's operator nor claims a tenant).
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.config import load_settings
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import set_quota
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.live import BIN, LiveServer

__all__ = ["ALICE", "BOB", "Seeded", "database", "seed"]

ALICE = Caller(tenant="acme", user="jupyter:alice")
BOB = Caller(tenant="globex", user="jupyter:bob")

FAILING_BODY = 'total = 1\nraise ValueError("no sales today")\n'


@dataclass(frozen=True)
class Seeded:
    """What :func:`seed` made."""

    succeeded: int
    """Alice's run of ``sales`` that succeeded and was delivered."""
    failed: int
    """Alice's run of ``broken`` whose cell raised."""
    bob_run: int
    """Bob's succeeded run."""


def database(server: LiveServer) -> Database:
    """The server's database (opened by this process, migrated)."""
    return Database.open(load_settings(server.env).database_url)


def seed(server: LiveServer, folder: Path) -> Seeded:
    """Publish, run and deliver (module docstring)."""
    db = database(server)
    try:
        sales = make_notebook(
            folder / "sales.ipynb",
            body="import pandas as pd\nimport nbcast.output\nprint(region)\n"
            "nbcast.output.table(pd.DataFrame({'region': [region], 'sales': [42]}), 'sales')",
            nbcast={
                "name": "sales",
                "outputs": ["html", "csv"],
                "subscriptions": [
                    {"channel": "link", "to": "cfo@example.com", "formats": ["html"]},
                    {"channel": "slack", "to": "C0SALES"},
                ],
            },
        )
        broken = make_notebook(
            folder / "broken.ipynb", body=FAILING_BODY, nbcast={"name": "broken"}
        )
        theirs = make_notebook(folder / "theirs.ipynb", nbcast={"name": "globex-report"})
        for caller in (ALICE, BOB):
            grant(db, caller.tenant, caller.user, "author")
        with db.session() as session:
            for tenant in ("acme", "globex"):
                set_quota(session, tenant, max_attempts=1)
        publish(db, sales, caller=ALICE, environ=server.env)
        publish(db, broken, caller=ALICE, environ=server.env)
        publish(db, theirs, caller=BOB, environ=server.env)
        clock = SystemClock()
        succeeded = run_now(db, clock, ALICE, "sales", {"region": "APAC"})
        failed = run_now(db, clock, ALICE, "broken", {})
        bob_run = run_now(db, clock, BOB, "globex-report", {})
    finally:
        db.dispose()
    _service(server, "worker", "--exit-when-idle", "--concurrency", "3")
    _service(server, "delivery-worker", "--exit-when-idle", "--poll", "0.1")
    return Seeded(succeeded=succeeded, failed=failed, bob_run=bob_run)


def _service(server: LiveServer, *argv: str) -> None:
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv],
        env=server.env,
        capture_output=True,
        text=True,
        timeout=180,
        cwd=server.folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
