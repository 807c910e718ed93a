"""The delivery commands on the embedded database: the worker, the ledger listing,
retries by hand, unsubscribes and signed links — including an email sent to a real
SMTP server configured through the environment."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.queue import RunQueue
from nbcast.scheduler.control import run_now
from nbcast.testing.smtp import smtp_server
from tests.command import run as run_cli
from tests.delivery.plane import executed_notebook
from tests.members import grant
from tests.notebooks import make_notebook


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    """``nbcast ARGV``: exit status and everything it printed."""
    code, out, err = run_cli(capsys, *argv)
    return code, out + err


def _succeeded_run(home: Path, tmp_path: Path, subscriptions: list[dict[str, str]]) -> int:
    """A run of sales that t published and ran; tester (NBCAST_USER), another author,
    works its deliveries on the CLI."""
    db = Database.open(f"sqlite:///{home / 'nbcast.db'}")
    for author in ("t", "tester"):
        grant(db, "default", author)
    path = make_notebook(
        tmp_path / "sales.ipynb",
        nbcast={"name": "sales", "outputs": ["html", "csv"], "subscriptions": subscriptions},
    )
    publish(db, path, caller=Caller(tenant="default", user="t"))
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "sales", {})
    queue = RunQueue(db, SystemClock(), owner="w")
    [lease] = queue.claim(1)
    queue.start(lease)
    sha = LocalArtifactStore(home / "artifacts").put(executed_notebook()).sha256
    queue.succeed(lease, artifact_sha256=sha, duration_s=0.1)
    db.dispose()
    return run_id


def test_delivery_worker_and_ledger_commands(
    nbcast_home: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    run_id = _succeeded_run(
        nbcast_home,
        tmp_path,
        [
            {"channel": "email", "to": "cfo@example.com", "formats": ["csv"]},
            {"channel": "link", "to": "cfo@example.com", "formats": ["csv"]},
            {"channel": "slack", "to": "C0SALES"},  # not configured: fails, clearly
        ],
    )
    with smtp_server() as server:
        monkeypatch.setenv("NBCAST_SMTP_URL", f"smtp://{server.host}:{server.port}")
        monkeypatch.setenv("NBCAST_BASE_URL", "https://reports.example.com")
        code, out = run(capsys, "delivery-worker", "--exit-when-idle", "--poll", "0.1")
        assert code == 0, out
        assert "2 sent" in out
        [mail] = server.messages
    assert mail.rcpt_tos == ("cfo@example.com",)

    code, out = run(capsys, "deliveries", "list", "--run", str(run_id), "--json")
    assert code == 0
    rows = {r["channel"]: r for r in json.loads(out)}
    assert {c: (r["state"], r["reason"]) for c, r in rows.items()} == {
        "email": ("SENT", None),
        "link": ("SENT", None),
        "slack": ("FAILED", "no_channel"),
    }
    [url] = rows["link"]["receipt"]["links"]
    assert url.startswith("https://reports.example.com/nbcast/links/")

    code, out = run(capsys, "deliver", "--retry-failed", str(run_id))
    assert (code, out.strip()) == (0, f"run {run_id}: 1 failed deliveries queued again")

    code, out = run(capsys, "links", "list", "--json")
    [link] = json.loads(out)
    code, out = run(capsys, "links", "revoke", str(link["id"]))
    assert out.strip() == f"link {link['id']}: revoked"
    # A link it cannot revoke (revoked already, or none of that id in the tenant) is an
    # error: one line, exit status 2.
    for link_id in (link["id"], 999_999, 2**63):
        code, out = run(capsys, "links", "revoke", str(link_id))
        assert code == 2, out
        assert out.strip().startswith("error: "), out
        assert len(out.strip().splitlines()) == 1, out
        assert "revoked already" in out

    code, out = run(capsys, "unsubscribe", "--report", "sales", "--to", "cfo@example.com")
    assert (code, out.strip()) == (0, "unsubscribed cfo@example.com from sales (email)")
    code, out = run(capsys, "unsubscribe", "--token", "k1.forged")
    assert code == 2
    assert "error:" in out
