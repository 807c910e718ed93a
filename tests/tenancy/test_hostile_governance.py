"""The governance commands under hostile input and at once (a hostile review's
findings): the "last admin" and "last operator" guards hold when two people act at the
same moment on PostgreSQL; names and addresses carry no terminal escapes; a refused
export creates no file; a plot is never written through a planted link; dates and
quotas from outside are bounded — each refusal one ``error:`` line, exit 2, nothing
written."""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa

from nbcast.access import Caller
from nbcast.clock import FixedClock
from nbcast.db import Database
from nbcast.errors import ConflictError
from nbcast.tenancy.members import revoke_operator, set_role
from nbcast.tenancy.models import Operator, User
from tests.command import act_as
from tests.members import grant
from tests.oversight.history import table_counts

NOW = datetime(2026, 11, 2, 7, 0, tzinfo=UTC)


def _at_once(jobs: list[Callable[[], Any]]) -> list[BaseException | None]:
    """Run ``jobs`` on threads released together; what each raised (None: nothing)."""
    barrier = threading.Barrier(len(jobs))
    raised: list[BaseException | None] = [None] * len(jobs)

    def run(index: int) -> None:
        barrier.wait()
        try:
            jobs[index]()
        except BaseException as exc:  # recorded, judged by the test
            raised[index] = exc

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(jobs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return raised


def _admins(db: Database) -> int:
    with db.session() as session:
        return int(
            session.scalar(sa.select(sa.func.count()).select_from(User).where(User.role == "admin"))
            or 0
        )


def test_two_admins_demoting_each_other_at_once_leave_one(db: Database) -> None:
    clock = FixedClock(NOW)
    for _ in range(8):  # each round a fresh pair; a lost race shows within a few
        grant(db, "default", "a1", "admin")
        grant(db, "default", "a2", "admin")
        with db.session() as session:
            session.execute(sa.delete(User).where(User.name.not_in(["a1", "a2"])))
        raised = _at_once(
            [
                lambda: set_role(db, clock, Caller(tenant="default", user="a1"), "a2", "viewer"),
                lambda: set_role(db, clock, Caller(tenant="default", user="a2"), "a1", "viewer"),
            ]
        )
        assert _admins(db) == 1
        assert sum(e is None for e in raised) == 1  # one demotion, the other refused
        refused = next(e for e in raised if e is not None)
        assert "admin" in str(refused)


def test_two_operators_revoking_each_other_at_once_leave_one(db: Database) -> None:
    clock = FixedClock(NOW)
    grant(db, "default", "o1", "admin")
    grant(db, "default", "o2", "admin")
    for _ in range(8):
        with db.session() as session:
            session.execute(sa.delete(Operator))
            session.add_all(
                [
                    Operator(name="o1", granted_at=NOW, granted_by="test"),
                    Operator(name="o2", granted_at=NOW, granted_by="test"),
                ]
            )
        raised = _at_once(
            [
                lambda: revoke_operator(db, clock, Caller(tenant="default", user="o1"), "o2"),
                lambda: revoke_operator(db, clock, Caller(tenant="default", user="o2"), "o1"),
            ]
        )
        with db.session() as session:
            left = session.scalars(sa.select(Operator.name)).all()
        assert len(left) == 1
        assert sum(e is None for e in raised) == 1
        refused = next(e for e in raised if e is not None)
        assert isinstance(refused, ConflictError) or "operator" in str(refused)


def _refused(result: tuple[int, str, str]) -> str:
    code, out, err = result
    assert code == 2, (code, out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("error: "), err
    assert "\x1b" not in err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def members(db: Database, use_db: str) -> Database:
    grant(db, "default", "ada", "admin")
    grant(db, "default", "val", "viewer")
    with db.session() as session:
        session.add(Operator(name="ada", granted_at=NOW, granted_by="test"))
    return db


HUGE = "1" + "0" * 400


@pytest.mark.parametrize(
    "argv",
    [
        pytest.param(["users", "add", "\udcff\udcfe"], id="name_not_utf8"),
        pytest.param(["users", "grant", "\udcff", "admin"], id="grant_not_utf8"),
        pytest.param(["sla", "list", "--definition", "\udcff"], id="definition_not_utf8"),
        pytest.param(
            ["users", "add", "okname", "--email", "\udcff@b.example"], id="email_not_utf8"
        ),
        pytest.param(["users", "add", "dave", "--email", "a\x1b]0;pwned\x07@b.example"], id="esc"),
        pytest.param(["users", "add", "e\u202eve"], id="bidi_override"),
        pytest.param(["users", "grant", "nobody", "operator"], id="operator_nobody_is"),
        pytest.param(["tenants", "create", "newt", "--admin", " spaced"], id="admin_spaced"),
        pytest.param(["tenants", "create", "newt", "--max-concurrent", "1" + "0" * 400], id="huge"),
        pytest.param(
            ["tenants", "set-quota", "default", "--budget-bytes", "1" + "0" * 400], id="huge_q"
        ),
        pytest.param(
            ["cost", "report", "--from", "9999-12-30", "--to", "9999-12-31"], id="year_9999"
        ),
        pytest.param(["users", "add", "x", "--role", "r" * 5000], id="long_choice_clipped"),
    ],
)
def test_hostile_governance_input_is_one_line_and_writes_nothing(
    members: Database,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    argv: list[str],
) -> None:
    tables = table_counts(members)
    line = _refused(act_as(capsys, monkeypatch, "ada", *argv))
    assert len(line) <= 400
    assert table_counts(members) == tables


def test_a_refused_export_creates_no_file(
    members: Database,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = tmp_path / "trail.jsonl"
    line = _refused(act_as(capsys, monkeypatch, "val", "audit", "export", "-o", str(target)))
    assert "admin" in line
    assert not target.exists()


def test_a_plot_is_never_written_through_a_planted_link(
    members: Database,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    link = tmp_path / "chart.png"
    link.symlink_to(victim)
    argv = ["cost", "report", "--from", "2026-10-01", "--to", "2026-10-09", "--plot", str(link)]
    _refused(act_as(capsys, monkeypatch, "val", *argv))
    assert victim.read_text() == "keep me"
    fresh = tmp_path / "fresh.png"
    code, _, err = act_as(capsys, monkeypatch, "val", *argv[:-1], str(fresh))
    assert code == 0, err
    assert fresh.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert os.stat(fresh).st_mode & 0o777 == 0o600
