"""Failures no retry can fix end the run at once, with their reason; the checks behind
them (:mod:`nbcast.executor.preflight`) and the kernelspec check publish warns with."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import sqlalchemy as sa
from jupyter_client.kernelspec import NoSuchKernel

from nbcast.access import Caller
from nbcast.clock import SystemClock
from nbcast.db import Database
from nbcast.definitions.kernelspec_check import kernel_name, missing_kernel
from nbcast.definitions.models import DefinitionVersion
from nbcast.definitions.versions import publish
from nbcast.errors import ParameterValueError
from nbcast.executor.attempt import AttemptJob, execute_attempt
from nbcast.executor.engines.local import LocalEngine
from nbcast.executor.preflight import PermanentFailure, check_attempt, permanent_reason
from nbcast.scheduler.control import run_now
from nbcast.scheduler.models import Run
from nbcast.tenancy.tenants import ensure_tenant
from tests.executor.test_worker import attempts, make_worker, run_state
from tests.notebooks import make_notebook

pytestmark = pytest.mark.timeout(180)


def notebook_dict(kernel: str | None = "python3", parameters: str = "n = 10\n") -> dict[str, Any]:
    nb: dict[str, Any] = {
        "cells": [
            {
                "cell_type": "code",
                "id": "p",
                "metadata": {"tags": ["parameters"]},
                "source": parameters,
                "outputs": [],
                "execution_count": None,
            },
            {
                "cell_type": "code",
                "id": "b",
                "metadata": {},
                "source": "print(n)",
                "outputs": [],
                "execution_count": None,
            },
        ],
        "metadata": {},
        "nbformat": 4,
        "nbformat_minor": 5,
    }
    if kernel is not None:
        nb["metadata"]["kernelspec"] = {"name": kernel, "display_name": kernel}
    return nb


def publish_in(db: Database, tmp_path: Path, tenant: str, name: str, kernel: str) -> None:
    path = make_notebook(
        tmp_path / tenant / f"{name}.ipynb",
        parameters="n = 10\n",
        body="print(n * n)",
        nbcast={"name": name},
    )
    raw = json.loads(path.read_text())
    raw["metadata"]["kernelspec"] = {"name": kernel, "display_name": kernel, "language": "python"}
    path.write_text(json.dumps(raw))
    with db.session() as session:
        ensure_tenant(session, tenant)
    publish(db, path, caller=Caller(tenant=tenant, user="t"))


def poison(db: Database, run_id: int, cause: str) -> None:
    """Make a queued run one that cannot succeed (what another writer could leave)."""
    with db.session() as session:
        run = session.get(Run, run_id)
        assert run is not None
        if cause == "invalid_parameters":  # e.g. written by an older nbcast
            run.parameters = {"n": "ten", "region": "EMEA"}
        elif cause == "invalid_notebook":  # a damaged version row
            session.execute(
                sa.update(DefinitionVersion)
                .where(DefinitionVersion.id == run.version_id)
                .values(notebook_json='{"cells": [')
            )


@pytest.mark.parametrize("cause", ["no_such_kernel", "invalid_parameters", "invalid_notebook"])
def test_a_permanent_failure_fails_alone_after_one_attempt(
    cause: str, db: Database, tmp_path: Path
) -> None:
    kernel = "no-such-kernel" if cause == "no_such_kernel" else "python3"
    publish_in(db, tmp_path, "poisoned", "doomed", kernel)
    publish_in(db, tmp_path, "default", "healthy", "python3")
    doomed = run_now(db, SystemClock(), Caller(tenant="poisoned", user="t"), "doomed", {"n": 3})
    poison(db, doomed, cause)
    healthy = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "healthy", {"n": 4})
    with LocalEngine(capacity=2, pool_size=1) as engine:
        stats = make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, doomed)
    assert (run.state, run.reason, run.attempt) == ("FAILED", cause, 1)
    assert run.error is not None
    assert (run.error["reason"], run.error["retryable"]) == (cause, False)
    assert [a.outcome for a in attempts(db, doomed)] == ["FAILED"]
    assert run_state(db, healthy).state == "SUCCEEDED"
    assert (stats.succeeded, stats.failed) == (1, 1)


def test_the_error_names_what_was_wrong(db: Database, tmp_path: Path) -> None:
    publish_in(db, tmp_path, "default", "params", "python3")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "params", {"n": 3})
    poison(db, run_id, "invalid_parameters")
    with LocalEngine(capacity=1, pool_size=0) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    error = run_state(db, run_id).error
    assert error is not None
    assert error["ename"] == "ParameterValueError"
    assert "n: expected int" in error["evalue"]
    assert "'region' is not declared" in error["evalue"]


# -- execute_attempt and the checks, without a database --------------------------------


def job(tmp_path: Path, notebook_json: str, parameters: dict[str, Any]) -> AttemptJob:
    return AttemptJob(
        run_id=1,
        attempt=1,
        tenant="default",
        definition="d",
        label="nbcast:default/d@manual-1",
        notebook_json=notebook_json,
        parameters=parameters,
        timeout_s=60,
        work_dir=str(tmp_path / "runs"),
        artifacts=str(tmp_path / "artifacts"),
    )


def test_a_kernel_missing_at_execution_is_classified_permanent(tmp_path: Path) -> None:
    outcome = execute_attempt(job(tmp_path, json.dumps(notebook_dict("no-such-kernel")), {}))
    assert (outcome.state.value, outcome.reason, outcome.retryable) == (
        "FAILED",
        "no_such_kernel",
        False,
    )
    assert permanent_reason(NoSuchKernel("gone")) == "no_such_kernel"
    assert permanent_reason(ParameterValueError(("x",))) == "invalid_parameters"
    assert permanent_reason(RuntimeError("kernel died")) is None


def test_a_notebook_without_a_kernelspec_runs_on_python3(tmp_path: Path) -> None:
    """papermill alone refuses such a notebook ("No kernel name found"), every attempt."""
    outcome = execute_attempt(job(tmp_path, json.dumps(notebook_dict(None)), {"n": 2}))
    assert (outcome.state.value, outcome.reason, outcome.retryable) == ("SUCCEEDED", None, True)


@pytest.mark.parametrize(
    ("text", "parameters", "reason"),
    [
        ("not json", {}, "invalid_notebook"),
        ("[]", {}, "invalid_notebook"),
        ('{"nbformat": 4, "cells": "x"}', {}, "invalid_notebook"),
        ('{"nbformat": 9, "nbformat_minor": 0, "cells": []}', {}, "invalid_notebook"),
        (json.dumps(notebook_dict()), {"n": "ten"}, "invalid_parameters"),
        (json.dumps(notebook_dict()), {"other": 1}, "invalid_parameters"),
        (json.dumps(notebook_dict(parameters="n = len([])\n")), {}, "invalid_parameters"),
        (json.dumps(notebook_dict("no-such-kernel")), {}, "no_such_kernel"),
    ],
    ids=[
        "not_json",
        "not_an_object",
        "cells_not_a_list",
        "nbformat_9",
        "wrong_type",
        "undeclared",
        "cell_not_literal",
        "kernel",
    ],
)
def test_check_attempt_refuses(text: str, parameters: dict[str, Any], reason: str) -> None:
    with pytest.raises(PermanentFailure) as caught:
        check_attempt(text, parameters)
    assert caught.value.reason == reason


def test_check_attempt_returns_the_kernel_to_run_on() -> None:
    assert check_attempt(json.dumps(notebook_dict()), {"n": 3}) == ("python3", "python")
    assert check_attempt(json.dumps(notebook_dict(None)), {}) == ("python3", "python")
    assert check_attempt(json.dumps(notebook_dict("Python3")), {}) == ("Python3", "python")


@pytest.mark.parametrize(
    ("notebook", "expected"),
    [
        ({"metadata": {"kernelspec": {"name": "python3"}}}, None),
        ({"metadata": {"kernelspec": {"name": "Python3"}}}, None),  # jupyter lowercases
        ({"metadata": {}}, None),  # no kernelspec: python3
        ({}, None),
        ({"metadata": {"kernelspec": {"name": ""}}}, None),
        ({"metadata": {"kernelspec": {"name": "no-such-kernel"}}}, "no-such-kernel"),
    ],
    ids=["python3", "case", "no_kernelspec", "no_metadata", "empty_name", "missing"],
)
def test_missing_kernel(notebook: dict[str, Any], expected: str | None) -> None:
    assert missing_kernel(notebook) == expected


def test_missing_kernel_finds_a_kernelspec_installed_in_jupyter_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sys

    spec = tmp_path / "kernels" / "team-env"
    spec.mkdir(parents=True)
    (spec / "kernel.json").write_text(
        json.dumps(
            {
                "argv": [sys.executable, "-m", "ipykernel_launcher", "-f", "{connection_file}"],
                "display_name": "Team env",
                "language": "python",
            }
        )
    )
    notebook = {"metadata": {"kernelspec": {"name": "team-env"}}}
    assert missing_kernel(notebook) == "team-env"
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path))
    assert missing_kernel(notebook) is None
    (spec / "kernel.json").write_text("{broken")  # no kernel starts from it either
    assert missing_kernel(notebook) == "team-env"


def test_kernel_name_defaults_to_python3() -> None:
    assert kernel_name({"metadata": {"kernelspec": {"name": "julia-1.10"}}}) == "julia-1.10"
    assert kernel_name({"metadata": {"kernelspec": "nonsense"}}) == "python3"
    assert kernel_name({"metadata": None}) == "python3"


def test_a_notebook_whose_kernelspec_is_named_python_runs(db: Database, tmp_path: Path) -> None:
    """jupyter_client's kernel manager resolves ``python`` to ``python3`` (and papermill
    runs such a notebook), so the check does too, instead of ``no_such_kernel``."""
    assert kernel_name(notebook_dict("python")) == "python3"
    assert missing_kernel(notebook_dict("python")) is None
    publish_in(db, tmp_path, "default", "aliased", "python")
    run_id = run_now(db, SystemClock(), Caller(tenant="default", user="t"), "aliased", {"n": 7})
    with LocalEngine(capacity=1, pool_size=1) as engine:
        make_worker(db, tmp_path, engine).run(exit_when_idle=True)
    run = run_state(db, run_id)
    assert (run.state, run.reason) == ("SUCCEEDED", None), run.error
