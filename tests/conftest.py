"""Shared fixtures: an isolated nbcast home, and one database fixture over two back ends.

Services: tests that need PostgreSQL (and, later, Ray or Chromium) are skipped with
the reason printed when the service is missing — except under ``CI=true``, where a
missing service fails the run instead, so CI can never pass by skipping.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest
import sqlalchemy as sa

from nbcast.db import Base, Database, import_models
from nbcast.testing.http import free_port
from nbcast.testing.postgres import PostgresUnavailable, scratch_database

PG_ADMIN_URL = os.environ.get(
    "NBCAST_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test"
)
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="session")
def example_lake(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The example lake (``make lake``), generated into a temporary folder if missing."""
    folder = REPO / "notebooks" / "examples" / "lake"
    if not (folder / "orders.parquet").is_file():
        folder = tmp_path_factory.mktemp("lake")
        generator = REPO / "notebooks" / "examples" / "lake" / "generate.py"
        subprocess.run([sys.executable, str(generator), "--out", str(folder), "-q"], check=True)
    return folder


def service_missing(what: str, why: str) -> NoReturn:
    """Skip outside CI; fail in CI (a missing service must not pass silently)."""
    message = f"{what} is not available: {why}"
    if IN_CI:
        pytest.fail(f"CI=true and {message}", pytrace=False)
    pytest.skip(message)


@pytest.fixture(autouse=True)
def nbcast_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own NBCAST_HOME and the embedded database in it."""
    home = tmp_path / "nbcast-home"
    monkeypatch.setenv("NBCAST_HOME", str(home))
    monkeypatch.delenv("NBCAST_DATABASE_URL", raising=False)
    monkeypatch.delenv("NBCAST_TENANT", raising=False)
    monkeypatch.setenv("NBCAST_USER", "tester")
    monkeypatch.setenv("RAY_USAGE_STATS_ENABLED", "0")
    return home


@contextlib.contextmanager
def scratch_pg_database(prefix: str) -> Iterator[str]:
    """A new, empty PostgreSQL database (its URL), dropped afterwards
    (:func:`nbcast.testing.postgres.scratch_database` on ``$NBCAST_TEST_PG_URL``).

    Skips outside CI, fails under ``CI=true``, when PostgreSQL is not reachable.
    """
    with contextlib.ExitStack() as stack:
        try:
            url = stack.enter_context(scratch_database(PG_ADMIN_URL, prefix=prefix))
        except PostgresUnavailable as exc:
            service_missing("PostgreSQL on 127.0.0.1:5432", str(exc))
        yield url


@pytest.fixture(scope="session")
def pg_url() -> Iterator[str]:
    """A fresh PostgreSQL database for this test session, migrated to head."""
    with scratch_pg_database("nbcast_test") as url:
        Database.open(url).dispose()
        yield url


def _reset_postgres(db: Database) -> None:
    import_models()
    tables = [t.name for t in Base.metadata.sorted_tables]
    with db.engine.begin() as conn:
        # The audit log refuses TRUNCATE (its append-only trigger); a test database
        # between tests is the one place where emptying it is right.
        conn.execute(sa.text("SET LOCAL session_replication_role = replica"))
        conn.execute(
            sa.text("TRUNCATE " + ", ".join(f'"{t}"' for t in tables) + " RESTART IDENTITY CASCADE")
        )
        conn.execute(sa.text("INSERT INTO tenants (name, created_at) VALUES ('default', now())"))


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, nbcast_home: Path) -> str:
    """The URL of an empty, migrated nbcast database on each back end in turn."""
    if request.param == "sqlite":
        return f"sqlite:///{nbcast_home / 'nbcast.db'}"
    url: str = request.getfixturevalue("pg_url")
    db = Database.open(url)
    _reset_postgres(db)
    db.dispose()
    return url


@pytest.fixture
def db(db_url: str) -> Iterator[Database]:
    """An open :class:`Database` on each back end in turn (see ``db_url``)."""
    database = Database.open(db_url)
    yield database
    database.dispose()


@pytest.fixture
def use_db(db_url: str, monkeypatch: pytest.MonkeyPatch) -> str:
    """Point the CLI (NBCAST_DATABASE_URL) at the parametrized database."""
    monkeypatch.setenv("NBCAST_DATABASE_URL", db_url)
    return db_url


def _stop_cluster(temp: Path) -> None:
    """Stop this cluster's processes only — those whose command line names its temp
    folder — not ``ray stop --force``, which stops every Ray process on the machine,
    another pytest-xdist worker's cluster included."""
    import signal
    import time

    def pids() -> list[int]:
        listing = subprocess.run(
            ["ps", "-ww", "-eo", "pid=,args="], capture_output=True, text=True, check=False
        ).stdout
        return [
            int(line.split(None, 1)[0])
            for line in listing.splitlines()
            if str(temp) in line and int(line.split(None, 1)[0]) != os.getpid()
        ]

    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + 10
        while pids() and time.monotonic() < deadline:
            time.sleep(0.2)


@pytest.fixture(scope="session")
def ray_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real two-node Ray cluster on this machine, started once per test session.

    ``ray start --head`` (1 CPU, resource ``node_head``) plus a second node joined with
    ``ray start --address`` (1 CPU, resource ``node_second``), temp dir under the
    session's folder, usage stats off. Yields the GCS address workers join with.
    """
    import shutil
    import subprocess
    import sys

    ray = Path(sys.executable).parent / "ray"
    if not ray.exists() or shutil.which("ps") is None:
        service_missing("Ray", "the ray command is not installed")
    temp = Path("/tmp") / f"nbray-{os.getpid()}"  # Ray wants a short socket path
    port = free_port()
    # A test cluster on loopback: no token auth (Ray turns it on by itself once a token
    # file exists in ~/.ray, and then refuses a second node started without it).
    os.environ["RAY_AUTH_MODE"] = "disabled"
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    common = ["--disable-usage-stats", "--num-cpus=1", "--num-gpus=0"]
    head = subprocess.run(
        [
            str(ray),
            "start",
            "--head",
            f"--port={port}",
            f"--temp-dir={temp}",
            "--include-dashboard=false",
            '--resources={"node_head": 1, "nbcast_tenant_default": 4}',
            *common,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    if head.returncode != 0:
        service_missing("Ray", head.stderr.strip().splitlines()[-1] if head.stderr else "?")
    address = f"127.0.0.1:{port}"
    second = subprocess.run(
        [
            str(ray),
            "start",
            f"--address={address}",
            '--resources={"node_second": 1, "nbcast_tenant_default": 4}',
            *common,
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )
    try:
        if second.returncode != 0:
            pytest.fail(f"second Ray node failed: {second.stderr[-500:]}")
        yield address
    finally:
        _stop_cluster(temp)
        shutil.rmtree(temp, ignore_errors=True)
        tmp_path_factory.getbasetemp()
