"""Reports written to hurt: one tenant's report fails alone and leaks nothing, with
real kernels, the local engine and both databases.

- endless or huge output: the run fails ``output_too_large`` (not retried) with its
  kernel gone and the notebook as far as it was kept; the other tenant's run succeeds;
- a report printing ``os.environ``: no nbcast secret, in pooled, forked (and the
  zygote's own environment) and unpooled kernels;
- a report killing its kernel's parent (the shared zygote): the other tenant's run
  still succeeds, and later runs get a new zygote;
- a notebook whose metadata claims another language than its kernel's: its ``-p``
  values are never written for that language (code injection), the run fails
  ``language_mismatch``;
- NUL and lone surrogates in an exception: the error is stored and visible.

Every run folder is gone afterwards.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from nbcast.access import Caller
from nbcast.artifacts import LocalArtifactStore
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.versions import publish
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.kernels.zygote import default_zygote, shutdown_default_zygote
from nbcast.executor.output_limits import DEFAULT_RUN_BYTES
from nbcast.executor.preflight import PermanentFailure, check_attempt
from nbcast.scheduler.control import run_now
from nbcast.tenancy.tenants import ensure_tenant, set_quota
from tests.executor.test_worker import attempts, make_worker, run_state
from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(300)


def define(
    db: Database,
    tmp_path: Path,
    tenant: str,
    name: str,
    body: str,
    *,
    parameters: str = "n = 10\n",
    metadata: dict[str, Any] | None = None,
) -> None:
    """Publish a report of ``tenant`` whose body cell is ``body``."""
    with db.session() as session:
        ensure_tenant(session, tenant)
    path = make_notebook(
        tmp_path / "defs" / tenant / f"{name}.ipynb",
        parameters=parameters,
        body=body,
        nbcast={"name": name},
    )
    if metadata is not None:
        raw = json.loads(path.read_text())
        raw["metadata"].update(metadata)
        path.write_text(json.dumps(raw))
    publish(db, path, caller=Caller(tenant=tenant, user="t"))


def stored(tmp_path: Path, sha256: str | None) -> bytes:
    assert sha256 is not None
    return LocalArtifactStore(tmp_path / "artifacts").get(sha256)


def printed(tmp_path: Path, sha256: str | None) -> str:
    """Everything the stored notebook's cells printed."""
    notebook = json.loads(stored(tmp_path, sha256))
    return "".join(
        "".join(output.get("text", ""))
        for cell in notebook["cells"]
        for output in cell.get("outputs", [])
        if output.get("output_type") == "stream"
    )


def assert_no_run_folders(tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    assert not runs.exists() or list(runs.iterdir()) == []


# -- output without end ----------------------------------------------------------------

FLOOD = 'while True:\n    print("z" * 100000)'
HUGE = 'print("y" * 150_000_000)'


@pytest.mark.parametrize("body", [FLOOD, HUGE], ids=["endless_prints", "one_huge_print"])
def test_a_report_that_floods_its_output_fails_alone(
    body: str, db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path, "noisy", "flood", body)
    define(db, tmp_path, "default", "fine", "print(n)")
    flood = run_now(db, SystemClock(), Caller(tenant="noisy", user="t"), "flood", {})
    fine = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "fine", {})
    with LocalEngine(capacity=2, pool_size=2) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, flood)
    assert (run.state, run.reason, run.attempt) == ("FAILED", "output_too_large", 1)
    assert run.error is not None
    assert run.error["ename"] == "OutputTooLargeError"
    assert "output" in run.error["evalue"]
    assert run.error["retryable"] is False
    assert [a.outcome for a in attempts(db, flood)] == ["FAILED"]
    # The notebook as far as it was kept, within the limit.
    assert len(stored(tmp_path, run.artifact_sha256)) < DEFAULT_RUN_BYTES + 1024 * 1024
    assert run_state(db, fine).state == "SUCCEEDED"
    assert_no_run_folders(tmp_path)


# -- the environment a report sees ------------------------------------------------------

SECRETS = {
    "NBCAST_SMTP_URL": "smtp://mailer:smtp-pass-0001@mail.example.com:587",
    "NBCAST_WEBHOOK_SECRET": "whsec-secret-0002",
    "NBCAST_SLACK_TOKEN": "xoxb-secret-0003",
    "NBCAST_SIGNING_KEYS": "k1:signing-secret-0004",
    "NBCAST_DATABASE_URL": "postgresql+psycopg://nbcast:db-pass-0005@db.example/nbcast",
    "PGPASSWORD": "pg-pass-0006",
}

SHOW_ENVIRONMENT = """
import json, os
print("ENV", json.dumps(dict(os.environ)))
parent = os.getppid()
print("PARENT", parent)
if parent:
    with open(f"/proc/{parent}/cmdline", "rb") as f:
        zygote = b"zygote_server" in f.read()
    if zygote:
        with open(f"/proc/{parent}/environ", "rb") as f:
            print("ZYGOTE", f.read().decode(errors="replace"))
"""


@pytest.mark.parametrize("sandbox", ["on", "off"])
@pytest.mark.parametrize("kernels", ["forked", "pooled", "unpooled"])
def test_a_report_sees_no_secret_of_the_worker(
    kernels: str, sandbox: str, db: Database, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its environment holds none of nbcast's secrets, however its kernel started. In a
    sandbox its parent is not even there to look at (outside its PID namespace: pid 0);
    without one, a forked kernel's parent is the zygote, whose environment is clean too."""
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("NBCAST_FORKED_KERNELS", "0" if kernels == "pooled" else "1")
    shutdown_default_zygote()  # the zygote starts from this worker's environment
    define(db, tmp_path, "default", "env", SHOW_ENVIRONMENT)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "env", {})
    try:
        with LocalEngine(capacity=1, warm_kernels=kernels != "unpooled", pool_size=1) as engine:
            worker = make_worker(db, tmp_path, engine, sandbox=sandbox == "on")
            worker.run(exit_when_idle=True)
    finally:
        shutdown_default_zygote()
    run = run_state(db, run_id)
    assert run.state == "SUCCEEDED"
    text = printed(tmp_path, run.artifact_sha256)
    parent = int(text.split("PARENT ", 1)[1].split()[0])
    assert (parent == 0) == (sandbox == "on")
    seen = json.loads(text.split("ENV ", 1)[1].splitlines()[0])
    assert not set(SECRETS) & set(seen)
    assert not [k for k in seen if k.startswith("NBCAST_") and k != "NBCAST_RUN_CONTEXT"]
    assert seen["NBCAST_RUN_CONTEXT"].endswith("run-context.json")
    for value in SECRETS.values():
        assert value not in text
    assert ("ZYGOTE" in text) == (kernels == "forked" and sandbox == "off")
    assert_no_run_folders(tmp_path)


# -- a report that kills the zygote -----------------------------------------------------

WAIT_FOR_THE_ZYGOTE_TO_DIE = """
import os, time
flag = {flag!r}
for _ in range(2400):
    if os.path.exists(flag):
        break
    time.sleep(0.05)
zygote = int(open(flag).read())

def state():
    try:
        with open(f"/proc/{{zygote}}/stat") as f:
            raw = f.read()
    except OSError:
        return None
    return raw[raw.rindex(")") + 2]

while state() not in (None, "Z"):
    time.sleep(0.05)
time.sleep(2.5)  # ipykernel's parent poller, had it watched the zygote, checked twice
print("survived the zygote")
"""

KILL_THE_ZYGOTE = """
import os, signal
zygote = os.getppid()
os.kill(zygote, signal.SIGTERM)
with open({flag!r} + ".tmp", "w") as f:
    f.write(str(zygote))
os.replace({flag!r} + ".tmp", {flag!r})
"""


def test_killing_the_zygote_kills_no_other_tenants_report(db: Database, tmp_path: Path) -> None:
    """With the sandbox off (a kernel is then the zygote's child and can signal it; in
    a sandbox the zygote is outside its PID namespace, :mod:`tests.sandbox`), and the two
    reports sharing a folder to meet in."""
    flag = str(tmp_path / "zygote.pid")
    define(db, tmp_path, "patient", "waits", WAIT_FOR_THE_ZYGOTE_TO_DIE.format(flag=flag))
    define(db, tmp_path, "hostile", "kills", KILL_THE_ZYGOTE.format(flag=flag))
    define(db, tmp_path, "patient", "later", "print('later')")
    with db.session() as session:
        set_quota(session, "patient", max_attempts=1)
    waits = run_now(db, SystemClock(), Caller(tenant="patient", user="t"), "waits", {})
    kills = run_now(db, SystemClock(), Caller(tenant="hostile", user="t"), "kills", {})
    with LocalEngine(capacity=2, pool_size=2) as engine:  # both forked from one zygote
        worker = make_worker(db, tmp_path, engine, sandbox=None)
        assert worker.step() == 2
        worker.run(exit_when_idle=True)
    killed = int(Path(flag).read_text())
    assert (run_state(db, kills).state, run_state(db, waits).state) == ("SUCCEEDED", "SUCCEEDED")
    assert run_state(db, waits).attempt == 1
    assert "survived the zygote" in printed(tmp_path, run_state(db, waits).artifact_sha256)
    later = run_now(db, SystemClock(), Caller(tenant="patient", user="t"), "later", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine, sandbox=None).run(exit_when_idle=True)
    assert run_state(db, later).state == "SUCCEEDED"
    assert default_zygote().pid != killed  # replaced
    assert_no_run_folders(tmp_path)


# -- a notebook that lies about its language --------------------------------------------


def test_parameters_are_never_written_for_a_language_the_kernel_does_not_run(
    db: Database, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    exploit = "\\'" + f'"+__import__("os").system("touch {marker}")#'
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "bash"}}
    define(db, tmp_path, "default", "liar", "print(s)", parameters='s = ""\n', metadata=metadata)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "liar", {"s": exploit})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    assert not marker.exists()
    run = run_state(db, run_id)
    assert (run.state, run.reason, run.attempt) == ("FAILED", "language_mismatch", 1)
    assert run.error is not None
    assert "'bash'" in run.error["evalue"]
    assert "'python'" in run.error["evalue"]


@pytest.mark.parametrize(
    "metadata",
    [
        {"kernelspec": {"name": "python3", "display_name": "P", "language": "bash"}},
        {"kernelspec": {"name": "python3", "display_name": "P"}, "language_info": {"name": "R"}},
    ],
    ids=["kernelspec", "language_info"],
)
def test_check_attempt_refuses_a_declared_language_the_kernel_does_not_run(
    metadata: dict[str, Any],
) -> None:
    notebook = {"cells": [], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}
    with pytest.raises(PermanentFailure) as caught:
        check_attempt(json.dumps(notebook), {})
    assert caught.value.reason == "language_mismatch"


def test_check_attempt_takes_the_language_from_the_installed_kernel() -> None:
    notebook = {
        "cells": [],
        "metadata": {"kernelspec": {"name": "python3", "display_name": "P", "language": "Python"}},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    assert check_attempt(json.dumps(notebook), {}) == ("python3", "python")


def test_a_truthful_notebook_gets_its_parameters_in_its_kernels_language(
    db: Database, tmp_path: Path
) -> None:
    marker = tmp_path / "injected"
    exploit = "\\'" + f'"+__import__("os").system("touch {marker}")#'
    define(db, tmp_path, "default", "honest", "print(s)", parameters='s = ""\n')
    run_id = run_now(
        db, SystemClock(), Caller(tenant="default", user="t"), "honest", {"s": exploit}
    )
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    assert not marker.exists()
    run = run_state(db, run_id)
    assert run.state == "SUCCEEDED"
    assert exploit in printed(tmp_path, run.artifact_sha256)  # a string, printed as is


# -- text the database cannot store -----------------------------------------------------

UNSTORABLE = {
    "nul_and_surrogate": ('raise ValueError("a" + chr(0) + "b" + chr(0xD800))', "ValueError"),
    "long_nul_exit": ("import sys\nsys.exit(chr(0) * 100000)", "SystemExit"),
}


@pytest.mark.parametrize(("body", "ename"), UNSTORABLE.values(), ids=UNSTORABLE)
def test_an_error_the_database_could_not_store_is_recorded_and_visible(
    body: str, ename: str, db: Database, tmp_path: Path
) -> None:
    define(db, tmp_path, "default", "odd", body)
    with db.session() as session:
        set_quota(session, "default", max_attempts=1)
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "odd", {})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.reason) == ("FAILED", "notebook_error")  # not lease_expired
    assert run.error is not None
    assert run.error["ename"] == ename
    evalue = run.error["evalue"]
    assert "\x00" not in evalue
    if ename == "ValueError":
        assert evalue == "a\\0b\ufffd"
    else:
        assert evalue.startswith("\\0\\0")
        assert len(evalue) <= 4000
    [attempt] = attempts(db, run_id)
    assert attempt.error is not None
    assert attempt.error["ename"] == ename
    assert all("\x00" not in line for line in attempt.error["traceback"])
    assert_no_run_folders(tmp_path)
