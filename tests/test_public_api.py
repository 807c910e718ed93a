"""The public API is what ``__all__`` says it is, and importing nbcast stays cheap.

Also: the kernel-side packages (:mod:`nbcast.warehouse`, :mod:`nbcast.output`) import no
plane, at any depth — they load inside every kernel, and the planes import them, never
the other way round.
"""

from __future__ import annotations

import ast
import importlib
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

NBCAST = Path(__file__).resolve().parents[1] / "nbcast"

PUBLIC_MODULES = [
    "nbcast",
    "nbcast.errors",
    "nbcast.clock",
    "nbcast.config",
    "nbcast.db",
    "nbcast.access",
    "nbcast.limits",
    "nbcast.registry",
    "nbcast.daemon",
    "nbcast.artifacts",
    "nbcast.faults",
    "nbcast.credentials",
    "nbcast.db_roles",
    # the kernel sandbox
    "nbcast.sandbox",
    "nbcast.sandbox.policy",
    "nbcast.sandbox.view",
    "nbcast.sandbox.launcher",
    "nbcast.sandbox.enter",
    "nbcast.sandbox.limits",
    "nbcast.sandbox.support",
    # definitions
    "nbcast.definitions",
    "nbcast.definitions.notebook",
    "nbcast.definitions.parameters",
    "nbcast.definitions.spec",
    "nbcast.definitions.versions",
    "nbcast.definitions.diff",
    "nbcast.definitions.cron",
    # scheduling plane
    "nbcast.definitions.compiler",
    "nbcast.scheduler.preview",
    "nbcast.scheduler.materializer",
    "nbcast.scheduler.policies",
    "nbcast.scheduler.control",
    "nbcast.scheduler.service",
    # execution plane
    "nbcast.executor.queue",
    "nbcast.executor.worker",
    "nbcast.executor.attempt",
    "nbcast.executor.kernels",
    "nbcast.executor.notebook_runner",
    "nbcast.executor.engines.base",
    "nbcast.executor.engines.local",
    # delivery plane
    "nbcast.delivery",
    "nbcast.delivery.ledger",
    "nbcast.delivery.ledger.answers",
    "nbcast.delivery.ledger.compose",
    "nbcast.delivery.ledger.decision",
    "nbcast.delivery.ledger.outcomes",
    "nbcast.delivery.ledger.rows",
    "nbcast.delivery.ledger.sending",
    "nbcast.delivery.queries",
    "nbcast.delivery.commands",
    "nbcast.delivery.tables",
    "nbcast.delivery.intake",
    "nbcast.delivery.rendering",
    "nbcast.delivery.renderers",
    "nbcast.delivery.renderers.base",
    "nbcast.delivery.channels",
    "nbcast.delivery.channels.base",
    "nbcast.delivery.links",
    "nbcast.delivery.signing",
    "nbcast.delivery.unsubscribe",
    "nbcast.delivery.settings",
    "nbcast.delivery.webhook_policy",
    "nbcast.delivery.models",
    # tenancy, oversight, read models
    "nbcast.plugins",
    "nbcast.heartbeats",
    "nbcast.tenancy",
    "nbcast.tenancy.tenants",
    "nbcast.tenancy.models",
    "nbcast.oversight",
    "nbcast.oversight.models",
    "nbcast.oversight.service",
    "nbcast.oversight.sla_alerts",
    "nbcast.views",
    "nbcast.views.definitions",
    "nbcast.views.runs",
    "nbcast.views.run_files",
    "nbcast.scheduler.runs",
    "nbcast.definitions.queries",
    "nbcast.executor.queries",
    "nbcast.executor.leases",
    "nbcast.executor.quotas",
    "nbcast.executor.records",
    "nbcast.executor.failures",
    "nbcast.executor.control",
    "nbcast.executor.kernels.zygote",
    "nbcast.executor.kernels.forked",
    "nbcast.executor.kernels.sandboxed",
    "nbcast.executor.kernels.slot",
    "nbcast.executor.kernels.demand",
    "nbcast.executor.worker_scope",
    "nbcast.tenancy.ceilings",
    "nbcast.tenancy.checkpoints",
    "nbcast.definitions.recipients",
    "nbcast.scheduler.slots",
    "nbcast.definitions.transitions",
    # kernel side
    "nbcast.warehouse",
    "nbcast.warehouse.context",
    "nbcast.warehouse.connections",
    "nbcast.warehouse.caps",
    "nbcast.warehouse.execution",
    "nbcast.warehouse.figures",
    "nbcast.warehouse.rls",
    "nbcast.output",
    "nbcast.output.tables",
    # fakes for users' tests
    "nbcast.testing",
    "nbcast.testing.http",
    "nbcast.testing.smtp",
    "nbcast.testing.slack_api",
    "nbcast.testing.webhook",
    "nbcast.testing.postgres",
    # the command
    "nbcast.cli",
    "nbcast.cli.app",
    "nbcast.cli.output",
    "nbcast.cli.db",
    "nbcast.cli.definitions",
    "nbcast.cli.schedule",
    "nbcast.cli.scheduler",
    "nbcast.cli.runs",
    "nbcast.cli.tenants",
    "nbcast.cli.worker",
    "nbcast.cli.delivery",
]

KERNEL_SIDE = ("nbcast/warehouse", "nbcast/output")
PLANES = ("definitions", "scheduler", "executor", "delivery", "governance")
HEAVY = (
    "sqlalchemy",
    "pandas",
    "numpy",
    "duckdb",
    "IPython",
    "ray",
    "nbformat",
    "papermill",
    "jsonschema",
    "rich",
    "click",
    "aiosmtpd",
)


@pytest.mark.parametrize("name", PUBLIC_MODULES)
def test_every_name_in_all_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    exported = getattr(module, "__all__", None)
    # Declared even when empty: a plane's package that only documents its modules, or a
    # CLI area module whose surface is its commands, says so with ``__all__ = []``.
    assert isinstance(exported, list | tuple), f"{name} has no __all__"
    for attr in exported:
        assert hasattr(module, attr), f"{name}.__all__ names {attr}, which does not exist"
        value = getattr(module, attr)
        if callable(value) and not attr.startswith("__"):
            assert value.__doc__, f"{name}.{attr} has no docstring"


def test_importing_nbcast_pulls_in_nothing_heavy() -> None:
    # Kernels and Ray workers import nbcast, nbcast.warehouse and nbcast.output; they
    # must not drag in the database, notebook or data stacks.
    code = (
        "import sys, nbcast, nbcast.warehouse, nbcast.output, nbcast.testing; "
        f"heavy = {set(HEAVY)!r} & {{m.split('.')[0] for m in sys.modules}}; "
        "print(sorted(heavy))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def test_joining_a_sandbox_needs_the_standard_library_only() -> None:
    # The zygote imports nbcast.sandbox.enter before anything else, and forks kernels
    # from that state: nothing but the standard library (and nbcast's package roots).
    code = (
        "import sys; before = set(sys.modules); import nbcast.sandbox.enter; "
        "print(sorted(m for m in set(sys.modules) - before "
        "if m.split('.')[0] not in sys.stdlib_module_names "
        "and m not in ('nbcast', 'nbcast.errors', 'nbcast.sandbox', 'nbcast.sandbox.enter')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


def _nbcast_imports(path: Path) -> list[tuple[int, str]]:
    """Every ``nbcast…`` module a file imports, at module level or inside a function."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{alias.name}") for alias in node.names]
    return [(line, name) for line, name in found if name.split(".")[0] == "nbcast"]


@pytest.mark.parametrize("folder", KERNEL_SIDE)
def test_the_kernel_side_packages_import_no_plane(folder: str) -> None:
    files = sorted((NBCAST.parent / folder).rglob("*.py"))
    assert files
    reaching = [
        f"{path.relative_to(NBCAST.parent)}:{line} imports {name}"
        for path in files
        for line, name in _nbcast_imports(path)
        if name.split(".")[1:2] and name.split(".")[1] in PLANES
    ]
    assert reaching == []


def test_importing_the_kernel_side_loads_no_plane_module() -> None:
    code = (
        "import sys, nbcast.warehouse, nbcast.output, nbcast.output.tables; "
        "import nbcast.warehouse.execution; "
        f"print(sorted(m for m in sys.modules if m.split('.')[:2] in "
        f"[['nbcast', p] for p in {PLANES!r}]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "[]"


# Runtime dependencies nbcast needs without importing them by name.
NOT_IMPORTED = {
    "jupyter-server": "the server extension (an ExtensionApp) builds on it",
    "psycopg": "the driver SQLAlchemy loads for postgresql+psycopg:// URLs",
    "matplotlib": "preloaded into every kernel by name; the example reports plot with it",
    "tzdata": "the IANA zones, read as package data (importlib.resources)",
    "jupyterlab": "`jupyter lab` serves the server extension and nbcast's prebuilt lab extension",
}
IMPORT_NAMES = {"slack-sdk": "slack_sdk", "beautifulsoup4": "bs4"}


def _runtime_dependencies() -> list[str]:
    project = tomllib.loads((NBCAST.parent / "pyproject.toml").read_text())["project"]
    return [
        re.split(r"[\s\[<>=!~;]", spec, maxsplit=1)[0].lower() for spec in project["dependencies"]
    ]


def test_every_runtime_dependency_is_imported_by_nbcast() -> None:
    imported: set[str] = set()
    for path in NBCAST.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                imported |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                imported.add(node.module.split(".")[0])
    dependencies = _runtime_dependencies()
    unused = [
        name
        for name in dependencies
        if name not in NOT_IMPORTED
        and IMPORT_NAMES.get(name, name.replace("-", "_")) not in imported
    ]
    assert unused == [], "runtime dependencies nothing imports (a test-only one goes to dev)"
    assert set(NOT_IMPORTED) <= set(dependencies)


def test_the_fakes_dependencies_are_an_extra() -> None:
    project = tomllib.loads((NBCAST.parent / "pyproject.toml").read_text())["project"]
    extras = project["optional-dependencies"]
    assert any(spec.startswith("aiosmtpd") for spec in extras["testing"])
    assert "nbcast[testing]" in extras["dev"]
    assert not any(name in ("aiosmtpd", "croniter") for name in _runtime_dependencies())


def test_rfc3987_syntax_is_not_installed() -> None:
    # jsonschema imports it when present, at ~3 s per process (see the Makefile).
    from importlib.util import find_spec

    assert find_spec("rfc3987_syntax") is None
