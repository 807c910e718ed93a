"""A report cannot speak to nbcast's database as nbcast (issue 20: "write to the
database", on PostgreSQL). A private PostgreSQL that asks every connection for a
password (this machine's shared one trusts 127.0.0.1, so any local process gets in as
any role: that is what the README warns about) holds nbcast's database; the worker gets
its URL — password included — from a ``0600`` file (``NBCAST_DATABASE_URL_FILE``), the
owner's too for ``nbcast db upgrade``. A report then finds neither file, no password in
its environment, and no way in as nbcast's roles or the superuser: its connection
attempt fails in the kernel and the run records that failure."""

from __future__ import annotations

import os
import secrets
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import sqlalchemy as sa

from nbcast.testing.http import free_port
from tests.conftest import service_missing
from tests.notebooks import make_notebook

BIN = Path(sys.executable).parent

PROBE = """
import os, psycopg
found = []  # nbcast's database URLs, from any process's environment or the files it names
for pid in os.listdir("/proc"):
    if not pid.isdigit():
        continue
    try:
        items = open(f"/proc/{pid}/environ", "rb").read().split(b"\\0")
    except OSError:
        continue
    for item in items:
        name, _, value = item.decode(errors="replace").partition("=")
        if name == "NBCAST_DATABASE_URL":
            found.append(value)
        elif name in ("NBCAST_DATABASE_URL_FILE", "NBCAST_DATABASE_OWNER_URL_FILE"):
            try:
                found.append(open(value).read().strip())
            except OSError:
                pass
tries = [url.replace("postgresql+psycopg://", "postgresql://") for url in found]
tries += [f"postgresql://{role}@127.0.0.1:{port}/nbcast" for role in ("nbcast_app", "postgres")]
refused = []
for url in tries:
    try:
        psycopg.connect(url, connect_timeout=5).close()
    except psycopg.OperationalError as exc:
        refused.append(str(exc).strip().splitlines()[-1])
        continue
    print("CONNECTED", url.split("@")[0].split("//")[1].split(":")[0])
    raise SystemExit(0)
raise PermissionError("nbcast's database refused every try: " + "; ".join(refused))
"""


class PrivatePostgres:
    """A PostgreSQL of the test's own, password authentication only (FIELD-NOTES)."""

    def __init__(self, folder: Path) -> None:
        binaries = subprocess.run(
            ["pg_config", "--bindir"], capture_output=True, text=True, check=False
        ).stdout.strip()
        self.bin = Path(binaries) if binaries else Path("/nonexistent")
        if not (self.bin / "initdb").exists() or shutil.which("runuser") is None:
            service_missing("a private PostgreSQL", "initdb or runuser is not installed")
        self.folder = folder
        self.port = free_port()
        self.superpass = secrets.token_hex(12)
        folder.mkdir(mode=0o755)
        shutil.chown(folder, "postgres", "postgres")
        pwfile = folder / "pw"
        pwfile.write_text(self.superpass)
        shutil.chown(pwfile, "postgres", "postgres")
        self._as_postgres(
            "initdb", "-D", str(folder / "data"), "-A", "scram-sha-256", "-U", "postgres",
            f"--pwfile={pwfile}",
        )  # fmt: skip
        self._as_postgres(
            "pg_ctl", "-D", str(folder / "data"), "-l", str(folder / "log"), "-w",
            "-o", f"-p {self.port} -k {folder} -c listen_addresses=127.0.0.1", "start",
        )  # fmt: skip

    def _as_postgres(self, program: str, *args: str) -> None:
        done = subprocess.run(
            ["runuser", "-u", "postgres", "--", str(self.bin / program), *args],
            capture_output=True,
            text=True,
            timeout=120,
        )
        if done.returncode != 0:
            raise RuntimeError(f"{program}: {done.stderr or done.stdout}")

    def url(self, role: str, password: str, database: str = "nbcast") -> str:
        return f"postgresql+psycopg://{role}:{password}@127.0.0.1:{self.port}/{database}"

    def stop(self) -> None:
        self._as_postgres("pg_ctl", "-D", str(self.folder / "data"), "-m", "immediate", "stop")


@pytest.fixture
def postgres() -> Iterator[PrivatePostgres]:
    # Not under pytest's temporary folder: the postgres user could not reach it.
    root = Path(tempfile.mkdtemp(prefix="nbpg-"))
    root.chmod(0o755)
    try:
        server = PrivatePostgres(root / "pg")
        try:
            yield server
        finally:
            server.stop()
    finally:
        shutil.rmtree(root, ignore_errors=True)


def secret_file(path: Path, text: str) -> Path:
    path.write_text(text)
    path.chmod(0o600)
    return path


@pytest.mark.postgres
@pytest.mark.parametrize("sandbox", ["on", "off"])
def test_a_report_cannot_reach_nbcasts_database_as_nbcast(
    postgres: PrivatePostgres, tmp_path: Path, sandbox: str
) -> None:
    """With ``--sandbox off`` (the control: the kernel runs as the worker's user, root
    here) the same report finds the URL file through the worker's environment and gets
    in: the probe is not vacuous."""
    owner_pass, app_pass = secrets.token_hex(12), secrets.token_hex(12)
    admin = sa.create_engine(
        postgres.url("postgres", postgres.superpass, "postgres"), isolation_level="AUTOCOMMIT"
    )
    with admin.connect() as conn:
        conn.execute(sa.text(f"CREATE ROLE nbcast_owner LOGIN PASSWORD '{owner_pass}'"))
        conn.execute(sa.text(f"CREATE ROLE nbcast_app LOGIN PASSWORD '{app_pass}'"))
        conn.execute(sa.text("CREATE DATABASE nbcast OWNER nbcast_owner"))
    admin.dispose()
    secrets_dir = tmp_path / "secrets"
    secrets_dir.mkdir(mode=0o700)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("NBCAST_DATABASE", "PG"))}
    env.update(
        NBCAST_HOME=str(tmp_path / "home"),
        NBCAST_USER="ops",
        NBCAST_DATABASE_URL_FILE=str(
            secret_file(secrets_dir / "app-url", postgres.url("nbcast_app", app_pass))
        ),
    )
    owner = secret_file(secrets_dir / "owner-url", postgres.url("nbcast_owner", owner_pass))

    def nbcast(*argv: str, **extra: str) -> subprocess.CompletedProcess[str]:
        done = subprocess.run(
            [str(BIN / "nbcast"), *argv],
            env={**env, **extra},
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert done.returncode == 0, (argv, done.stderr)
        return done

    nbcast("db", "upgrade", NBCAST_DATABASE_OWNER_URL_FILE=str(owner))
    notebook = make_notebook(
        tmp_path / "probe.ipynb", parameters="port = 0\n", body=PROBE, nbcast={"name": "probe"}
    )
    nbcast("publish", str(notebook))
    nbcast("tenants", "set-quota", "default", "--max-attempts", "1")
    nbcast("run", "probe", "-p", f"port={postgres.port}")
    nbcast("worker", "--exit-when-idle", "--sandbox", sandbox)
    shown = nbcast("runs", "show", "1", "--json").stdout
    assert app_pass not in shown
    assert owner_pass not in shown
    if sandbox == "off":
        assert '"state": "SUCCEEDED"' in shown
        return
    assert '"state": "FAILED"' in shown
    assert "PermissionError" in shown
    assert "password authentication failed" in shown or "no password supplied" in shown
