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

TEST_PLUGINS = Path(sys.prefix) / "test-plugins"
"""Where ``make install`` puts the tests' plug-in (``tests/plugin``): beside the
environment, not in it, so only the tests see it — this process through ``sys.path``,
the processes they start (servers, workers, the CLI) through ``PYTHONPATH``."""
if TEST_PLUGINS.is_dir() and str(TEST_PLUGINS) not in sys.path:
    sys.path.insert(0, str(TEST_PLUGINS))
    os.environ["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(TEST_PLUGINS), os.environ.get("PYTHONPATH", "")) if p
    )

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


PROCESS_TESTS = (
    # folders whose every test starts a jupyter server, a sandbox or services
    "server/",
    "sandbox/",
    "integration/",
    "labextension/",
    "oversight/test_oversight_service.py",
    # files whose tests run kernels, papermill, renders in children or nbcast services
    "executor/test_output_limits.py",
    "executor/test_hostile_reports.py",
    "executor/test_zygote.py",
    "executor/test_worker_scope.py",
    "executor/test_notebook_runner.py",
    "executor/test_early_exit.py",
    "executor/test_worker.py",
    "executor/test_fd_hygiene.py",
    "executor/test_permanent_failures.py",
    "executor/test_runs_show.py",
    "executor/test_kernels.py",
    "executor/test_worker_isolation.py",
    "executor/test_demand.py",
    "delivery/test_render_determinism.py",
    "delivery/test_pdf_fit.py",
    "delivery/test_slow_receivers.py",
    "delivery/test_webhook_links.py",
    "definitions/test_kernelspec_warning.py",
    "tenancy/test_budgets.py",
    "test_file_modes.py",
    "test_credentials.py",
    "test_readonly_home.py",
    "test_examples.py",
    "test_logs.py",
    "test_daemon.py",
    "test_deploy_units.py",
    "test_hostile_cli.py",
)
"""Where the ``kernels`` marker goes: tests that start kernels, papermill runs, a
jupyter server or nbcast service processes (left out of ``make test-fast``)."""


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark what a test needs, so ``make test-fast`` can leave it out (``-m "not
    postgres and not ray and not chromium and not kernels and not slow"``): the
    PostgreSQL side of every two-back-end fixture (a ``"postgresql"`` parameter) and
    every ``pg_url`` user is ``postgres``, every ``ray_cluster`` user ``ray``, and the tests of
    :data:`PROCESS_TESTS` ``kernels``."""
    tests = Path(__file__).resolve().parent
    for item in items:
        where = item.path.resolve().relative_to(tests).as_posix()
        if any(where == p or (p.endswith("/") and where.startswith(p)) for p in PROCESS_TESTS):
            item.add_marker(pytest.mark.kernels)
        names = set(getattr(item, "fixturenames", ()))
        callspec = getattr(item, "callspec", None)
        params = callspec.params if callspec is not None else {}
        if "postgresql" in params.values() or "pg_url" in names:
            item.add_marker(pytest.mark.postgres)
        if "ray_cluster" in names:
            item.add_marker(pytest.mark.ray)


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


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """An empty nbcast database migrated to head, once per test process: a test's own
    database is a copy of it (migrating takes about a second; copying, milliseconds)."""
    path = tmp_path_factory.mktemp("template") / "nbcast.db"
    Database.open(f"sqlite:///{path}").dispose()
    return path


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request: pytest.FixtureRequest, nbcast_home: Path) -> str:
    """The URL of an empty, migrated nbcast database on each back end in turn."""
    if request.param == "sqlite":
        import shutil

        template: Path = request.getfixturevalue("sqlite_template")
        nbcast_home.mkdir(mode=0o700, parents=True, exist_ok=True)
        target = nbcast_home / "nbcast.db"
        if not target.exists():
            shutil.copyfile(template, target)
            target.chmod(0o600)
        return f"sqlite:///{target}"
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
    # Warm kernels in the cluster's workers end 3 s after their last attempt (not 60),
    # so a test that stops its worker sees every sandbox gone soon after.
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "NBCAST_RAY_WARM_IDLE_S": "3"}
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
