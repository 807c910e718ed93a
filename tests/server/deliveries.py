"""A real report delivered against a live server's database: signed links and an
email with its one-click unsubscribe header, for the link and unsubscribe tests.

Everything goes through nbcast itself with the server's environment (its
``NBCAST_HOME`` and ``NBCAST_BASE_URL``): the notebook is published, a manual run
queued, a real ``nbcast worker --exit-when-idle`` executes it in a kernel, and a real
``nbcast delivery-worker --exit-when-idle`` renders it and delivers it — a link
per format and an email to the local SMTP server of :mod:`nbcast.testing.smtp`.
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
from nbcast.delivery.queries import DeliveryRecord, deliveries_of_run
from nbcast.scheduler.control import run_now
from nbcast.testing.smtp import smtp_server
from tests.members import grant
from tests.notebooks import make_notebook
from tests.server.live import BIN, LiveServer

__all__ = ["ALICE", "RECIPIENT", "Delivered", "database", "deliver", "run_again"]

ALICE = Caller(tenant="acme", user="jupyter:alice")
RECIPIENT = "cfo@example.com"
FORMATS = ["html", "csv", "xlsx", "pdf"]

BODY = (
    "import pandas as pd\nimport nbcast.output\nprint(region)\n"
    "nbcast.output.table(pd.DataFrame({'region': [region], 'sales': [42]}), 'sales')"
)


@dataclass(frozen=True)
class Delivered:
    """What :func:`deliver` made."""

    run_id: int
    links: list[str]
    """The signed link URLs the link channel sent (one per format)."""
    unsubscribe_url: str
    """The ``List-Unsubscribe`` URL of the email that was sent."""
    one_click: str
    """Its ``List-Unsubscribe-Post`` header."""


def database(server: LiveServer) -> Database:
    """The server's database (opened by this process, migrated)."""
    return Database.open(load_settings(server.env).database_url)


def deliver(
    server: LiveServer, folder: Path, name: str = "sales", formats: list[str] = FORMATS
) -> Delivered:
    """Publish ``name`` for alice (an author in tenant acme), run it and deliver it: a
    link per format of ``formats`` and an email with the CSV."""
    notebook = make_notebook(
        folder / f"{name}.ipynb",
        body=BODY,
        nbcast={
            "name": name,
            "outputs": sorted({*formats, "csv"}),
            "subscriptions": [
                {"channel": "link", "to": RECIPIENT, "formats": formats},
                {"channel": "email", "to": RECIPIENT, "formats": ["csv"]},
            ],
        },
    )
    db = database(server)
    try:
        grant(db, ALICE.tenant, ALICE.user)
        publish(db, notebook, caller=ALICE, environ=server.env)
    finally:
        db.dispose()
    run_id, rows, mails = run_again(server, name)
    by_channel = {r.channel: r for r in rows}
    assert by_channel["link"].state == "SENT", by_channel["link"]
    assert by_channel["email"].state == "SENT", by_channel["email"]
    [mail] = mails
    header = str(mail["List-Unsubscribe"])
    return Delivered(
        run_id=run_id,
        links=list((by_channel["link"].receipt or {})["links"]),
        unsubscribe_url=header.strip().removeprefix("<").removesuffix(">"),
        one_click=str(mail["List-Unsubscribe-Post"]),
    )


def run_again(server: LiveServer, name: str) -> tuple[int, list[DeliveryRecord], list]:  # type: ignore[type-arg]
    """Queue a run of ``name``, execute and deliver it; its ledger rows and the
    emails that arrived."""
    db = database(server)
    try:
        run_id = run_now(db, SystemClock(), ALICE, name, {"region": "APAC"})
    finally:
        db.dispose()
    _service(server, {}, "worker", "--exit-when-idle", "--concurrency", "1", "--no-warm-kernels")
    with smtp_server() as smtp:
        env = {"NBCAST_SMTP_URL": f"smtp://{smtp.host}:{smtp.port}"}
        _service(server, env, "delivery-worker", "--exit-when-idle", "--poll", "0.1")
        mails = [m.mail for m in smtp.messages]
    db = database(server)
    try:
        with db.session() as session:
            rows = deliveries_of_run(session, ALICE, run_id)
    finally:
        db.dispose()
    return run_id, rows, mails


def _service(server: LiveServer, env: dict[str, str], *argv: str) -> None:
    done = subprocess.run(
        [str(BIN / "nbcast"), *argv],
        env={**server.env, "NBCAST_TENANT": "acme", **env},
        capture_output=True,
        text=True,
        timeout=180,
        cwd=server.folder,
    )
    assert done.returncode == 0, done.stdout + done.stderr
