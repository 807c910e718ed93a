"""A home or a database the user cannot write is one ``error:`` line, exit 2, never a
traceback, and nothing in it is changed (issue 9, finding 11: "``db upgrade`` on a
read-only home").

The suite runs as root, for whom file modes stop nothing, so ``nbcast`` runs here in a
subprocess as the unprivileged ``nobody`` (uid 65534) against homes under a temporary
folder that user can reach (pytest's own temporary folders are root's, 0700). The
other way round — the test not root — it cannot switch users: it is skipped then, with
the reason, except under ``CI=true``, where the suite runs as root and this must run.

``nobody`` must be able to run the interpreter: the venv's own when it can reach it,
else (a venv made from a Python under root's 0700 home, as on the development
machine) the system's Python of the same version, without its own site-packages
(``-S``) and with the venv's added, so it imports the very packages the venv has.
"""

from __future__ import annotations

import os
import shutil
import sqlite3
import stat
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from nbcast.db import Database
from nbcast.tenancy.models import Operator
from tests.conftest import service_missing
from tests.members import grant

pytestmark = pytest.mark.timeout(120)

NOBODY = 65534
OLD_REVISION = "0009"
Runner = Callable[..., subprocess.CompletedProcess[str]]


LAUNCH = (
    "import runpy, site, sys; site.addsitedir(sys.argv.pop(1)); "
    "runpy.run_module('nbcast', run_name='__main__', alter_sys=True)"
)
"""Runs ``python -m nbcast`` on an interpreter started with ``-S``, after adding the
site-packages folder given as its first argument (``.pth`` files included)."""


def interpreters() -> Iterator[list[str]]:
    """Command prefixes that run this checkout's nbcast, the venv's interpreter first."""
    yield [sys.executable, "-m", "nbcast"]
    version = f"{sys.version_info.major}.{sys.version_info.minor}"
    for folder in ("/usr/bin", "/usr/local/bin"):
        other = Path(folder) / f"python{version}"
        if other.is_file() and other.resolve() != Path(sys.executable).resolve():
            yield [str(other), "-S", "-c", LAUNCH, sysconfig.get_paths()["purelib"]]


@pytest.fixture
def base() -> Iterator[Path]:
    """A folder ``nobody`` can traverse (not list), removed afterwards."""
    if os.geteuid() != 0:
        service_missing("running nbcast as another user", "the tests do not run as root")
    parent = Path(tempfile.gettempdir())
    if not stat.S_IMODE(parent.stat().st_mode) & 0o001:
        service_missing("a temporary folder other users can reach", f"{parent} is not")
    folder = Path(tempfile.mkdtemp(prefix="nbcast-readonly-", dir=parent))
    try:
        folder.chmod(0o711)
        yield folder
    finally:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.fixture
def nbcast(base: Path) -> Runner:
    """``nbcast(home, *argv)``: run nbcast as ``nobody`` with ``NBCAST_HOME=home``."""
    tried: list[str] = []
    for prefix in interpreters():
        try:
            probe = as_nobody(base, base / "unused", [*prefix, "--version"])
        except OSError as exc:  # the interpreter itself is out of nobody's reach
            tried.append(f"{prefix[0]}: {exc.strerror}")
            continue
        if probe.returncode == 0 and "nbcast" in probe.stdout:
            return lambda home, *argv: as_nobody(base, home, [*prefix, *argv])
        tried.append(f"{prefix[0]}: {probe.stderr.strip()[-200:]}")
    service_missing("an interpreter user nobody can run nbcast with", "; ".join(tried))


def as_nobody(base: Path, home: Path, argv: list[str]) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NBCAST_HOME": str(home), "HOME": str(base)}
    env.pop("NBCAST_DATABASE_URL", None)
    return subprocess.run(
        argv,
        env=env,
        cwd=base,
        user=NOBODY,
        group=NOBODY,
        extra_groups=[],
        capture_output=True,
        text=True,
        timeout=90,
    )


def assert_one_error_line(done: subprocess.CompletedProcess[str], message: str) -> None:
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "Traceback" not in done.stderr + done.stdout
    assert len(done.stderr.strip().splitlines()) == 1, done.stderr
    assert done.stderr.startswith("error: "), done.stderr
    assert message in done.stderr, done.stderr
    assert done.stdout == ""


def database_of_root(home: Path, revision: str, operator: str | None = None) -> Path:
    """``home`` belongs to nobody (0700); its ``nbcast.db``, at ``revision``, to root
    (0644: nobody may read it, not write it); ``operator`` (at head) already its
    operator and the default tenant's admin, so that reading writes nothing."""
    home.mkdir(mode=0o700)
    path = home / "nbcast.db"
    db = Database.open(f"sqlite:///{path}", upgrade=False)
    db.upgrade(revision)
    if operator is not None:
        with db.session() as session:
            session.add(Operator(name=operator, granted_by="test"))
        grant(db, "default", operator, "admin")
    db.dispose()
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:  # as nbcast leaves it
        assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    finally:
        conn.close()
    for leftover in home.iterdir():  # root's -wal, -shm and migration lock
        if leftover != path:
            leftover.unlink()
    path.chmod(0o644)
    os.chown(home, NOBODY, NOBODY)
    return path


def revision_of(path: Path) -> str:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return str(conn.execute("SELECT version_num FROM alembic_version").fetchone()[0])
    finally:
        conn.close()


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["definitions", "list"]], ids=" ".join)
def test_an_empty_home_of_another_user_that_nobody_may_write(
    base: Path, nbcast: Runner, argv: list[str]
) -> None:
    home = base / "home"
    home.mkdir(mode=0o555)  # root's, read-only for everyone else
    home.chmod(0o555)
    assert_one_error_line(nbcast(home, *argv), "belongs to another user")
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["definitions", "list"]], ids=" ".join)
def test_an_empty_read_only_home_of_ones_own(base: Path, nbcast: Runner, argv: list[str]) -> None:
    home = base / "home"
    home.mkdir()
    os.chown(home, NOBODY, NOBODY)
    home.chmod(0o500)
    done = nbcast(home, *argv)
    assert_one_error_line(done, "cannot open database")
    assert "unable to open database file" in done.stderr
    assert list(home.iterdir()) == []


@pytest.mark.parametrize("argv", [["db", "upgrade"], ["definitions", "list"]], ids=" ".join)
def test_a_read_only_database_that_needs_migrating(
    base: Path, nbcast: Runner, argv: list[str]
) -> None:
    """``definitions list`` migrates on first use, so it needs to write too."""
    path = database_of_root(base / "home", OLD_REVISION)
    before = path.read_bytes()
    done = nbcast(path.parent, *argv)
    assert_one_error_line(done, "readonly database")
    assert path.read_bytes() == before
    assert revision_of(path) == OLD_REVISION


def test_a_read_only_database_at_head_reads_but_refuses_writes(base: Path, nbcast: Runner) -> None:
    path = database_of_root(base / "home", "head", operator=os.environ["NBCAST_USER"])
    before = path.read_bytes()
    upgrade = nbcast(path.parent, "db", "upgrade")  # nothing to do: not an error
    assert upgrade.returncode == 0, upgrade.stderr
    listed = nbcast(path.parent, "tenants", "list")
    assert listed.returncode == 0, listed.stderr
    assert "default" in listed.stdout
    assert_one_error_line(nbcast(path.parent, "tenants", "create", "t2"), "readonly database")
    assert path.read_bytes() == before
    assert (path.stat().st_uid, stat.S_IMODE(path.stat().st_mode)) == (0, 0o644)
