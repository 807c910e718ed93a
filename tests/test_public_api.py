"""The public API is what ``__all__`` says it is, and importing nbcast stays cheap."""

from __future__ import annotations

import importlib
import subprocess
import sys

import pytest

PUBLIC_MODULES = [
    "nbcast",
    "nbcast.errors",
    "nbcast.clock",
    "nbcast.config",
    "nbcast.db",
    "nbcast.definitions",
    "nbcast.definitions.notebook",
    "nbcast.definitions.parameters",
    "nbcast.definitions.spec",
    "nbcast.definitions.versions",
    "nbcast.definitions.diff",
    "nbcast.definitions.cron",
    "nbcast.scheduler.compiler",
    "nbcast.scheduler.preview",
    "nbcast.scheduler.materializer",
    "nbcast.scheduler.policies",
    "nbcast.scheduler.control",
    "nbcast.scheduler.service",
    "nbcast.executor.queue",
    "nbcast.executor.worker",
    "nbcast.executor.attempt",
    "nbcast.executor.kernels",
    "nbcast.executor.notebook_runner",
    "nbcast.executor.engines.base",
    "nbcast.executor.engines.local",
    "nbcast.warehouse",
    "nbcast.artifacts",
    "nbcast.faults",
    "nbcast.cli",
]


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_in_all_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    exported = getattr(module, "__all__", None)
    assert exported, f"{name} has no __all__"
    for attr in exported:
        value = getattr(module, attr)
        if callable(value) and not attr.startswith("__"):
            assert value.__doc__, f"{name}.{attr} has no docstring"


def test_importing_nbcast_pulls_in_nothing_heavy() -> None:
    # Kernels and Ray workers import nbcast; it must not drag in the database,
    # notebook or data stacks.
    code = (
        "import sys, nbcast; heavy = {'sqlalchemy', 'pandas', 'ray', 'nbformat', "
        "'papermill', 'jsonschema', 'rich', 'click'} & set(sys.modules); print(sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_rfc3987_syntax_is_not_installed() -> None:
    # jsonschema imports it when present, at ~3 s per process (see the Makefile).
    from importlib.util import find_spec

    assert find_spec("rfc3987_syntax") is None
