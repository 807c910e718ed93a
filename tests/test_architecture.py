"""The shape the architecture promises, checked on the source (no import runs):

- a one-way stack: every module's layer follows from its package (:data:`LAYERS`), and
  no import runs from a lower layer to a higher one — but the models registration
  (``nbcast.db.import_models`` imports every layer's tables), the one named exception;
- no import cycle among nbcast's modules, function-level imports included (imports
  under ``TYPE_CHECKING`` aside), except the deliberate one between ``nbcast.db`` and
  the planes' model modules (``import_models`` registers the tables);
- no ``from nbcast.x import _private`` between modules;
- no module of ``nbcast/`` over 600 lines (migrations aside);
- the CLI holds no SQL of its own: it reads and writes through the command layer;
- the kernel-side packages (``nbcast.warehouse``, ``nbcast.output``) import no plane.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "nbcast"
MAX_LINES = 600
DELIBERATE = {
    "nbcast.db",
    "nbcast.definitions.models",
    "nbcast.delivery.models",
    "nbcast.executor.models",
    "nbcast.heartbeats",
    "nbcast.oversight.models",
    "nbcast.scheduler.models",
    "nbcast.tenancy.models",
}

LAYERS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # The ground: plumbing every layer may use, and the kernel side (imported inside
    # notebooks: it imports no plane). Top-level modules of ``nbcast`` are here too.
    ("base", ("sandbox", "warehouse", "output", "testing", "migrations")),
    # Who may do what: tenants, members, roles, budgets, ceilings, the audit chain.
    ("tenancy", ("tenancy",)),
    # The planes, in the data's order: definition -> slot/run -> attempt/outbox ->
    # rendition/delivery.
    ("definitions", ("definitions",)),
    ("scheduler", ("scheduler",)),
    ("executor", ("executor",)),
    ("delivery", ("delivery",)),
    # Above the planes: retention, SLA and its alerts, cost, their jobs and service.
    ("oversight", ("oversight",)),
    # Read models across planes: overview, health, metrics, definition and run detail.
    ("views", ("views",)),
    # The faces.
    ("faces", ("server_extension", "cli", "__main__")),
)
"""The stack, from the ground up, and the packages of ``nbcast`` in each layer."""

REGISTRATION = ("nbcast.db", "import_models")
"""The one import allowed to run up the stack: the function that registers every
layer's tables (``Base.metadata``)."""


def _modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


MODULES = _modules()


def _owner(name: str) -> str | None:
    """The module ``name`` is, or is in (``nbcast.a.b.Thing`` → ``nbcast.a.b``)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _imports(module: str) -> list[tuple[str, str, int]]:
    """``(imported module, imported name, line)`` of every runtime import of ``module``
    (parsed once per module)."""
    if module not in _PARSED:
        _PARSED[module] = list(_parse_imports(module))
    return _PARSED[module]


_PARSED: dict[str, list[tuple[str, str, int]]] = {}


def _parse_imports(module: str) -> Iterator[tuple[str, str, int]]:
    path = MODULES[module]
    tree = ast.parse(path.read_text())
    typing_only = {
        id(inner)
        for node in ast.walk(tree)
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
        for inner in ast.walk(node)
    }
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    for node in ast.walk(tree):
        if id(node) in typing_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name, "", node.lineno
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = package.split(".")
                parts = parts[: len(parts) - (node.level - 1)]
                base = ".".join([*parts, *([node.module] if node.module else [])])
            for alias in node.names:
                full = f"{base}.{alias.name}"
                yield (full if full in MODULES else base), alias.name, node.lineno


def _graph() -> dict[str, set[str]]:
    graph: dict[str, set[str]] = {m: set() for m in MODULES}
    for module in MODULES:
        for target, _name, _line in _imports(module):
            owner = _owner(target) if target.startswith("nbcast") else None
            if owner and owner != module:
                graph[module].add(owner)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[set[str]] = []
    counter = 0
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.add(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(component)
    return found


def _layer(module: str) -> int:
    """The index in :data:`LAYERS` of ``module``'s layer (from its package)."""
    parts = module.split(".")
    if len(parts) == 1 or (len(parts) == 2 and MODULES[module].name != "__init__.py"):
        package = "__main__" if parts[-1] == "__main__" else ""
    else:
        package = parts[1]
    for index, (_name, packages) in enumerate(LAYERS):
        if package in packages:
            return index
    if not package:
        return 0
    raise AssertionError(f"{module}: package nbcast.{package} has no layer in LAYERS")


def _registration_lines() -> range:
    module, function = REGISTRATION
    tree = ast.parse(MODULES[module].read_text())
    for node in tree.body:
        if isinstance(node, ast.FunctionDef) and node.name == function:
            return range(node.lineno, (node.end_lineno or node.lineno) + 1)
    raise AssertionError(f"{module}.{function} is gone: update REGISTRATION")


def test_every_package_has_a_layer() -> None:
    for module in MODULES:
        _layer(module)


def test_no_import_runs_up_the_stack_but_the_models_registration() -> None:
    registration = _registration_lines()
    upward = []
    for module in sorted(MODULES):
        for target, name, line in _imports(module):
            owner = _owner(target) if target.startswith("nbcast") else None
            if not owner or owner == module or _layer(owner) <= _layer(module):
                continue
            if module == REGISTRATION[0] and line in registration:
                continue
            upward.append(
                f"{module}:{line} ({LAYERS[_layer(module)][0]}) imports {name or owner} "
                f"from {owner} ({LAYERS[_layer(owner)][0]})"
            )
    assert upward == []


def test_the_registration_imports_models_only() -> None:
    registration = _registration_lines()
    imported = {t for t, _n, line in _imports(REGISTRATION[0]) if line in registration}
    assert imported == DELIBERATE - {REGISTRATION[0]}


def test_no_import_cycle_but_the_models_registration() -> None:
    cycles = _cycles(_graph())
    assert [sorted(c) for c in cycles if c != DELIBERATE] == []


def test_no_module_imports_another_modules_private_names() -> None:
    reach_ins = [
        f"{module}:{line} imports {name} from {target}"
        for module in MODULES
        for target, name, line in _imports(module)
        if target.startswith("nbcast") and name.startswith("_") and not name.startswith("__")
    ]
    assert reach_ins == []


def test_no_module_is_over_600_lines() -> None:
    long = {
        str(path.relative_to(ROOT)): n
        for path in PACKAGE.rglob("*.py")
        if "migrations" not in path.parts and (n := len(path.read_text().splitlines())) > MAX_LINES
    }
    assert long == {}


@pytest.mark.parametrize("module", sorted(m for m in MODULES if m.startswith("nbcast.cli")))
def test_the_cli_holds_no_sql(module: str) -> None:
    source = MODULES[module].read_text()
    for word in ("sa.select(", "sa.update(", "sa.insert(", "sa.delete(", "sa.text(", ".execute("):
        assert word not in source, f"{module} uses {word}"


@pytest.mark.parametrize("package", ["nbcast.warehouse", "nbcast.output"])
def test_the_kernel_side_packages_import_no_plane(package: str) -> None:
    planes = ("definitions", "scheduler", "executor", "delivery", "governance", "server_extension")
    for module in (m for m in MODULES if m == package or m.startswith(package + ".")):
        for target, _name, line in _imports(module):
            owner = _owner(target) or ""
            assert not any(owner.startswith(f"nbcast.{p}") for p in planes), (
                f"{module}:{line} imports {target}"
            )


def _state_literals() -> set[str]:
    """Every value of the planes' state enums (runs, attempts, deliveries, renditions)."""
    from nbcast.delivery.models import AttemptOutcome, DeliveryState, RenditionState
    from nbcast.executor.models import Outcome
    from nbcast.scheduler.models import RunState

    enums = (RunState, Outcome, DeliveryState, AttemptOutcome, RenditionState)
    return {member.value for enum in enums for member in enum}


def _enum_members(tree: ast.Module) -> set[int]:
    """The ids of the constants that define an enum's members (``X = "X"`` in a class
    body), the one place a state may be spelled."""
    defined: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            for statement in node.body:
                if isinstance(statement, ast.Assign) and isinstance(statement.value, ast.Constant):
                    defined.add(id(statement.value))
    return defined


def test_states_are_spelled_by_their_enums() -> None:
    """A state compared or passed as a bare string (``state == "FAILED"``) is how a
    renamed state silently stops matching; Python code names the enum member (SQL text
    is left alone: a string that merely contains a state is not a literal of one)."""
    states = _state_literals()
    found = []
    for name, path in MODULES.items():
        if ".migrations." in name:
            continue
        tree = ast.parse(path.read_text())
        members = _enum_members(tree)
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and node.value in states
                and id(node) not in members
            ):
                found.append(f"{name}:{node.lineno} {node.value!r}")
    assert found == []


def test_only_the_definitions_plane_parses_the_nbcast_block() -> None:
    """Every other layer takes a compiled version (:mod:`nbcast.definitions.compiled`)."""
    outside = [
        f"{module}:{line}"
        for module in MODULES
        if not module.startswith("nbcast.definitions")
        for target, name, line in _imports(module)
        if name == "parse_spec" or target.endswith(".parse_spec")
    ]
    assert outside == []
