"""``nbcast runs show`` and ``runs list`` over the executor's queries, on SQLite and
PostgreSQL: why a run failed (its cell and line), tenant scope, and keyset pages."""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from nbcast.access import Caller
from nbcast.artifacts import open_store
from nbcast.clock import FixedClock, SystemClock
from nbcast.config import load_settings
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.delivery.models import Delivery, Rendition
from nbcast.errors import ConfigError, NotFoundError, UnknownDefinitionError
from nbcast.executor.queries import list_runs
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.tenants import set_quota
from nbcast.views.runs import get_run
from tests.command import run as cli
from tests.members import grant
from tests.notebooks import make_notebook
from tests.workers import work_until_idle

T0 = datetime(2026, 6, 1, 9, 0, tzinfo=UTC)
DEFAULT = Caller(tenant="default", user="ana")

# Cell 0 is the parameters cell; no parameters are passed, so papermill injects no
# cell and the cell that raises is cell 3 of the executed notebook, at its line 2.
CELLS = [
    {"cell_type": "code", "id": f"c{i}", "metadata": {}, "source": src, "outputs": []}
    | {"execution_count": None}
    for i, src in enumerate(("x = 1", "y = 0", "z = x\nz / y\nprint('never')"), 1)
]


@pytest.fixture(autouse=True)
def people(db: Database) -> None:
    """t publishes and runs reports in tenant default; ana reads them through the
    queries, tester (NBCAST_USER) through the CLI."""
    grant(db, "default", "t")
    for reader in ("ana", "tester"):
        grant(db, "default", reader, "viewer")


@pytest.fixture
def failed_run(db: Database, use_db: str, tmp_path: Path) -> int:
    """A run of a notebook that raises ZeroDivisionError in cell 3, executed (once) by a
    real worker with the local engine, its notebook in the CLI's artifact store."""
    path = make_notebook(tmp_path / "divide.ipynb", parameters="n = 1\n", body="x = 0")
    notebook = json.loads(path.read_text())
    notebook["cells"] = notebook["cells"][:1] + CELLS
    notebook["metadata"]["nbcast"] = {"name": "divide"}
    path.write_text(json.dumps(notebook))
    publish(db, path, caller=Caller(tenant="default", user="t"))
    with db.session() as session:
        set_quota(session, "default", max_attempts=1)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "divide", {})
    settings = load_settings()
    work_until_idle(
        db, artifacts=settings.artifacts_dir, work_dir=tmp_path / "runs", name="show-worker"
    )
    return run_id


def test_a_failing_cell_is_shown_with_its_line(
    failed_run: int, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = cli(capsys, "runs", "show", str(failed_run), "--json")
    assert code == 0, err
    shown = json.loads(out)
    assert (shown["id"], shown["definition"], shown["state"]) == (failed_run, "divide", "FAILED")
    assert (shown["tenant"], shown["kind"], shown["version"]) == ("default", "manual", 1)
    assert shown["reason"] == "notebook_error"
    why = {"ename": "ZeroDivisionError", "cell_index": 3, "line_number": 2, "source_line": "z / y"}
    assert {k: shown["error"][k] for k in why} == why
    [attempt] = shown["attempts"]
    assert (attempt["attempt"], attempt["outcome"], attempt["engine"]) == (1, "FAILED", "local")
    assert attempt["worker"] == "show-worker"
    assert attempt["duration_s"] > 0
    assert {k: attempt["error"][k] for k in why} == why
    assert attempt["error"]["evalue"] == "division by zero"
    assert shown["notebook_sha256"] == attempt["artifact_sha256"]
    assert len(shown["notebook_sha256"]) == 64
    assert (shown["renditions"], shown["deliveries"]) == ([], [])

    code, out, err = cli(capsys, "runs", "show", str(failed_run))
    assert code == 0, err
    assert f"run {failed_run}: divide v1, FAILED (notebook_error)" in out
    assert "ZeroDivisionError: division by zero" in out
    assert "cell 3, line 2: z / y" in out
    assert "show-worker" in out


def test_without_the_notebook_the_line_comes_from_the_traceback(
    failed_run: int, db: Database
) -> None:
    with db.session() as session:
        detail = get_run(session, DEFAULT, failed_run)  # no artifact store
    assert detail.error is not None
    assert (detail.error.cell_index, detail.error.line_number) == (3, 2)
    assert detail.error.source_line == "z / y"


def test_another_tenants_run_is_not_found(
    db: Database, use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    grant(db, "other", "t")
    grant(db, "other", "bo", "viewer")
    path = make_notebook(tmp_path / "theirs.ipynb", nbcast={"name": "theirs"})
    publish(db, path, caller=Caller(tenant="other", user="t"))
    theirs = run_now(db, SystemClock(), Caller(tenant="other", user="t"), "theirs", {})
    with db.session() as session:
        with pytest.raises(NotFoundError, match=f"no run {theirs} in tenant 'default'"):
            get_run(session, DEFAULT, theirs)
        assert get_run(session, Caller(tenant="other", user="bo"), theirs).id == theirs
        assert list_runs(session, DEFAULT).items == []
    code, out, err = cli(capsys, "runs", "show", str(theirs))
    assert (code, out) == (2, "")
    assert err == f"error: no run {theirs} in tenant 'default'\n"
    for hostile in ("0", "-5", str(2**70)):
        code, _, err = cli(capsys, "runs", "show", hostile)
        assert code == 2
        assert err.startswith("error: ")


def add_runs(db: Database) -> list[Run]:
    """23 runs of one definition, by (fire time, id): four per fire time (ties broken
    by id), three kinds, two states."""
    added: list[Run] = []
    with db.session() as session:
        for i in range(23):
            run = Run(
                tenant_id=1,
                definition_id=1,
                version_id=1,
                version=1,
                kind=("scheduled", "backfill", "manual")[i % 3],
                slot_key=None if i % 3 == 2 else f"slot-{i}",
                fire_at=T0 + timedelta(hours=(22 - i) // 4),  # ids not in fire order
                state="QUEUED" if i % 2 else "SUCCEEDED",
                parameters={"i": i},
                serial=False,
                not_before=T0,
                created_at=T0,
            )
            session.add(run)
            session.flush()
            added.append(run)
    return sorted(added, key=lambda r: (r.fire_at, r.id))


@pytest.fixture
def many_runs(db: Database, tmp_path: Path) -> list[Run]:
    path = make_notebook(tmp_path / "paged.ipynb", nbcast={"name": "paged"})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    return add_runs(db)


def walk(db: Database, **filters: Any) -> list[int]:
    """Every page of ``list_runs`` with ``filters``, following ``next_after``."""
    seen: list[int] = []
    after = None
    with db.session() as session:
        while True:
            page = list_runs(session, DEFAULT, after=after, **filters)
            seen.extend(r.id for r in page.items)
            after = page.next_after
            if after is None:
                return seen
            assert len(page.items) == filters["limit"]  # only the last page is short


@pytest.mark.parametrize("size", [1, 4, 5, 22, 23, 50])
def test_pages_walk_every_run_once_in_order(many_runs: list[Run], db: Database, size: int) -> None:
    ids = [r.id for r in many_runs]
    assert ids != sorted(ids)  # fire order is not id order: the key is (fire_at, id)
    assert walk(db, limit=size) == ids
    assert walk(db, limit=size, order="desc") == ids[::-1]
    queued = [r.id for r in many_runs if r.state == "QUEUED"]
    assert walk(db, limit=size, state="queued") == queued
    assert len(queued) == 11


def test_filters_and_bad_filters(many_runs: list[Run], db: Database) -> None:
    with db.session() as session:
        backfills = list_runs(session, DEFAULT, kind="backfill", limit=100).items
        assert [r.id for r in backfills] == [r.id for r in many_runs if r.kind == "backfill"]
        window = list_runs(
            session, DEFAULT, since=T0 + timedelta(hours=1), until=T0 + timedelta(hours=3)
        ).items
        assert [r.id for r in window] == [
            r.id
            for r in many_runs
            if T0 + timedelta(hours=1) <= r.fire_at < T0 + timedelta(hours=3)
        ]
        assert len(window) == 8
        assert list_runs(session, DEFAULT, definition="paged", limit=1).next_after is not None
        for bad, error, text in [
            ({"state": "DONE"}, ConfigError, "unknown run state 'DONE' (one of QUEUED|"),
            ({"kind": "cron"}, ConfigError, "unknown run kind 'cron' (one of scheduled|"),
            ({"definition": "nope"}, UnknownDefinitionError, "no definition named 'nope'"),
            ({"after": "garbage"}, ConfigError, "not a cursor"),
            ({"limit": 0}, ConfigError, "limit must be"),
            ({"since": T0, "until": T0}, ConfigError, "since must be before until"),
            ({"since": datetime(2026, 1, 1)}, ConfigError, "since needs a UTC offset"),
        ]:
            with pytest.raises(error, match=re.escape(text)):
                list_runs(session, DEFAULT, **bad)


def test_the_cli_pages_with_limit_and_after(
    many_runs: list[Run], use_db: str, capsys: pytest.CaptureFixture[str]
) -> None:
    ids = [r.id for r in many_runs]
    code, out, err = cli(capsys, "runs", "list", "--json")
    assert (code, err) == (0, "")
    assert [r["id"] for r in json.loads(out)] == ids  # every run, as before
    seen: list[int] = []
    argv = ["runs", "list", "--json", "--limit", "10"]
    while True:
        code, out, err = cli(capsys, *argv)
        assert code == 0, err
        seen += [r["id"] for r in json.loads(out)]
        if not err:
            break
        cursor = err.strip().rsplit(" ", 1)[1]
        argv = ["runs", "list", "--json", "--limit", "10", "--after", cursor]
    assert seen == ids
    code, out, _ = cli(capsys, "runs", "list", "--kind", "manual", "--order", "desc", "--json")
    assert [r["id"] for r in json.loads(out)] == [
        r.id for r in many_runs[::-1] if r.kind == "manual"
    ]
    window = ["--since", "2026-06-01T10:00:00Z", "--until", "2026-06-01T11:00Z", "--json"]
    code, out, _ = cli(capsys, "runs", "list", *window)
    hour = T0 + timedelta(hours=1)
    assert [r["id"] for r in json.loads(out)] == [r.id for r in many_runs if r.fire_at == hour]
    code, _, err = cli(capsys, "runs", "list", "--state", "DONE")
    assert code == 2
    assert err.startswith("error: unknown run state 'DONE'")
    assert err.count("\n") == 1


def test_a_manual_run_is_listed_with_its_keys(db: Database, tmp_path: Path) -> None:
    path = make_notebook(tmp_path / "keys.ipynb", nbcast={"name": "keys"})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    run_id = run_now(db, FixedClock(T0), Caller(tenant="default", user="t"), "keys", {})
    with db.session() as session:
        [record] = list_runs(session, DEFAULT).items
    assert record.id == run_id
    assert set(record.to_json()) == {
        "id",
        "definition",
        "slot_key",
        "kind",
        "state",
        "reason",
        "fire_at",
        "version",
        "parameters",
        "created_at",
        "attempt",
        "artifact_sha256",
        "started_at",
        "finished_at",
        "context",
        "rerun_of",
        "test_to",
    }
    context = record.to_json()["context"]
    assert context["kind"] == "manual"
    assert context["nominal"] == T0.isoformat()  # no schedule: UTC, the instant asked for
    assert context["interval_start"] == context["interval_end"] == T0.isoformat()
    assert record.to_json()["fire_at"] == "2026-06-01T09:00:00Z"


def test_an_artifact_store_that_lacks_the_notebook_is_no_error(
    failed_run: int, db: Database, tmp_path: Path
) -> None:
    with db.session() as session:
        detail = get_run(session, DEFAULT, failed_run, artifacts=open_store(tmp_path / "empty"))
    assert detail.error is not None
    assert detail.error.source_line == "z / y"  # from the traceback


def test_renditions_and_deliveries_are_shown(
    db: Database, use_db: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = make_notebook(tmp_path / "sent.ipynb", nbcast={"name": "sent"})
    publish(db, path, caller=Caller(tenant="default", user="t"), now=T0)
    run_id = run_now(db, FixedClock(T0), Caller(tenant="default", user="t"), "sent", {})
    with db.session() as session:
        session.add_all(
            [
                Rendition(
                    tenant_id=1,
                    run_id=run_id,
                    format="html",
                    state="DONE",
                    sha256="a" * 64,
                    filename="sent.html",
                ),
                Rendition(
                    tenant_id=1,
                    run_id=run_id,
                    format="pdf",
                    state="FAILED",
                    error={"ename": "RenderError", "evalue": "no fonts"},
                ),
                Delivery(
                    tenant_id=1,
                    run_id=run_id,
                    definition_id=1,
                    channel="email",
                    recipient="cfo@example.com",
                    formats=["html"],
                    fire_at=T0,
                    state="SENT",
                    attempt=2,
                    not_before=T0,
                    sent_at=T0 + timedelta(minutes=3),
                ),
                Delivery(
                    tenant_id=1,
                    run_id=run_id,
                    definition_id=1,
                    channel="slack",
                    recipient="#sales",
                    formats=["pdf"],
                    fire_at=T0,
                    state="SUPPRESSED",
                    reason="superseded",
                    not_before=T0,
                ),
            ]
        )
    code, out, err = cli(capsys, "runs", "show", str(run_id), "--json")
    assert code == 0, err
    shown = json.loads(out)
    rendition_keys = ("format", "variant", "state", "sha256", "filename", "error")
    delivery_keys = ("channel", "recipient", "state", "reason", "attempts", "sent_at")
    assert [{k: r[k] for k in rendition_keys} for r in shown["renditions"]] == [
        {
            "format": "html",
            "variant": "",
            "state": "DONE",
            "sha256": "a" * 64,
            "filename": "sent.html",
            "error": None,
        },
        {
            "format": "pdf",
            "variant": "",
            "state": "FAILED",
            "sha256": None,
            "filename": None,
            "error": {"ename": "RenderError", "evalue": "no fonts"},
        },
    ]
    assert [{k: d[k] for k in delivery_keys} for d in shown["deliveries"]] == [
        {
            "channel": "email",
            "recipient": "cfo@example.com",
            "state": "SENT",
            "reason": None,
            "attempts": 2,
            "sent_at": "2026-06-01T09:03:00Z",
        },
        {
            "channel": "slack",
            "recipient": "#sales",
            "state": "SUPPRESSED",
            "reason": "superseded",
            "attempts": 0,
            "sent_at": None,
        },
    ]
    code, out, _ = cli(capsys, "runs", "show", str(run_id))
    assert "RenderError: no fonts" in out
    assert "cfo@example.com" in out
    assert "superseded" in out
