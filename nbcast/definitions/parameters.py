"""The parameter schema a notebook declares, and validation of parameter values.

The schema comes from the code cell tagged ``parameters`` (papermill's convention).
Each statement there must assign one literal default to one name::

    region = "EMEA"          # sales region
    top_n: int = 10
    ratio: float = 1         # annotated: a float parameter, whose default is 1
    thresholds = {"warn": 0.1, "fail": 0.25}

Allowed defaults: ``str``, ``int``, ``float``, ``bool``, ``None``, and lists and
dicts (string keys) of those. Anything else — a call, an import, a name, arithmetic,
unpacking — is refused with the line it is on. An annotation, when present, must be
one of the bare names ``int``, ``float``, ``str``, ``bool``, ``list`` or ``dict``
(Python evaluates a module-level annotation when the cell runs, so anything more
would be code); it sets the parameter's type, and the default must fit it (or be
``None``). A trailing comment becomes the parameter's help text — for a default
written over several lines, the comment on its last line, as papermill reads it.

Values are validated before any run is queued (:func:`validate_parameters`): only
declared names, names matching ``^[A-Za-z_][A-Za-z0-9_]*$``, and JSON values
compatible with the default's type. That is what keeps papermill's
injected-parameters cell from ever containing code: names are identifiers, values
are JSON data rendered by papermill's translators. There is no raw parameter.
"""

from __future__ import annotations

import ast
import dataclasses
import io
import json
import math
import re
import tokenize
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from nbcast.definitions.allowed import Allowed, check_rule, compatible, parse_allowed
from nbcast.definitions.bindings import is_binding, parse_binding
from nbcast.errors import MetadataError, ParametersCellError, ParameterValueError
from nbcast.limits import MAX_PARAMETERS, MAX_PARAMETERS_CELL_CHARS, clip, json_problem
from nbcast.records import internal

__all__ = [
    "Parameter",
    "parse_assignment",
    "parse_assignments",
    "parse_parameters_cell",
    "schema_from_json",
    "schema_to_json",
    "validate_parameters",
    "with_allowed",
]

NAME_PATTERN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,127}", re.ASCII)
_ANNOTATIONS = {
    "int": "int",
    "float": "float",
    "str": "str",
    "bool": "bool",
    "list": "list",
    "dict": "dict",
}
_TYPE_NAMES = {
    bool: "bool",
    int: "int",
    float: "float",
    str: "str",
    list: "list",
    dict: "dict",
    type(None): "null",
}


@dataclass(frozen=True, kw_only=True)
class Parameter:
    """One declared parameter: its name, JSON type, literal default, help and line."""

    name: str
    type: str
    """Its JSON type (``integer``, ``number``, ``string``, ``boolean``, ``array``,
    ``object``), from the literal default's."""
    default: Any
    """The default as written in the cell (a JSON value)."""
    help: str = ""
    """The comment at the end of its line."""
    line: int = internal(default=0)
    allowed: Allowed | None = None
    """The values it accepts — choices, bounds, a pattern (:mod:`nbcast.definitions.allowed`);
    None: any value of its type."""

    def to_json(self) -> dict[str, Any]:
        """The JSON form (without its line)."""
        return {
            "name": self.name,
            "type": self.type,
            "default": self.default,
            "help": self.help,
            "allowed": self.allowed.to_json() if self.allowed is not None else None,
        }


def _is_json_literal(value: Any) -> bool:
    if value is None or isinstance(value, (bool, int, str)):
        return True
    if isinstance(value, float):
        return math.isfinite(value)
    if isinstance(value, list):
        return all(_is_json_literal(v) for v in value)
    if isinstance(value, dict):
        return all(isinstance(k, str) and _is_json_literal(v) for k, v in value.items())
    return False


def _comments(source: str) -> dict[int, str]:
    comments: dict[int, str] = {}
    try:
        for tok in tokenize.generate_tokens(io.StringIO(source).readline):
            if tok.type == tokenize.COMMENT:
                comments[tok.start[0]] = tok.string.lstrip("#").strip()
    except (tokenize.TokenError, SyntaxError):
        pass
    return comments


def parse_parameters_cell(source: str) -> tuple[Parameter, ...]:
    """Derive the parameter schema from the source of the ``parameters`` cell (at most
    :data:`~nbcast.limits.MAX_PARAMETERS_CELL_CHARS` characters)."""
    if len(source) > MAX_PARAMETERS_CELL_CHARS:
        raise ParametersCellError(
            f"the cell is {len(source):,} characters, over the limit of "
            f"{MAX_PARAMETERS_CELL_CHARS:,} (a parameters cell holds a few assignments)"
        )
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ParametersCellError(f"syntax error: {clip(exc.msg)}", exc.lineno) from None
    except (RecursionError, MemoryError, ValueError):
        raise ParametersCellError("the cell is nested too deeply or too large to read") from None
    lines = source.splitlines()
    comments = _comments(source)
    params: dict[str, Parameter] = {}
    imports_literal = False
    for node in tree.body:
        text = clip(lines[node.lineno - 1].strip() if node.lineno <= len(lines) else "", 60)[1:-1]
        annotation: str | None = None
        choices: list[Any] | None = None
        if _imports_literal(node):
            imports_literal = True  # `from typing import Literal`, for Literal[...]
            continue
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value_node = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value_node = node.target, node.value
            annotation, choices = _annotation(node.annotation, text, node.lineno)
        else:
            raise ParametersCellError(
                f"`{text}` is not an assignment of a literal default", node.lineno
            )
        if not isinstance(target, ast.Name):
            raise ParametersCellError(f"`{text}` must assign to a single name", node.lineno)
        try:
            value = ast.literal_eval(value_node)
        except (ValueError, SyntaxError, TypeError, RecursionError, MemoryError):
            value = _NOT_LITERAL
        if value is _NOT_LITERAL or not _is_json_literal(value):
            raise ParametersCellError(
                f"`{text}` is not a literal default (allowed: str, int, float, bool, None, "
                "and lists/dicts of those)",
                node.lineno,
            )
        name = target.id
        if not NAME_PATTERN.fullmatch(name):
            raise ParametersCellError(f"`{clip(name)}` is not a parameter name", node.lineno)
        if name in params:
            raise ParametersCellError(f"`{name}` is assigned twice", node.lineno)
        problem = json_problem(value, name)
        if problem:
            raise ParametersCellError(problem, node.lineno)
        kind = _TYPE_NAMES[type(value)]
        if annotation is not None and value is not None:
            if not compatible(annotation, value):
                raise ParametersCellError(
                    f"`{name}` is annotated {annotation} but its default is {kind}", node.lineno
                )
            kind = annotation
        if len(params) >= MAX_PARAMETERS:
            raise ParametersCellError(f"more than {MAX_PARAMETERS} parameters", node.lineno)
        end = node.end_lineno or node.lineno
        parameter = Parameter(
            name=name,
            type=kind,
            default=value,
            help=comments.get(end) or comments.get(node.lineno, ""),
            line=node.lineno,
        )
        if choices is not None:
            if not imports_literal:
                raise ParametersCellError(
                    f"`{text}`: add `from typing import Literal` before it (Python "
                    "evaluates the annotation when the cell runs)",
                    node.lineno,
                )
            try:
                rule = check_rule(name, kind, value, {"choices": choices}, name)
            except MetadataError as exc:
                raise ParametersCellError(f"`{text}`: {exc}", node.lineno) from None
            parameter = dataclasses.replace(parameter, allowed=rule)
        params[name] = parameter
    return tuple(params.values())


def _literal_item(node: ast.expr) -> Any:
    """A ``Literal[...]`` item's value: a constant, or a negated number; else
    :data:`_NOT_LITERAL`."""
    if isinstance(node, ast.Constant):
        return node.value
    if (
        isinstance(node, ast.UnaryOp)
        and isinstance(node.op, ast.USub)
        and isinstance(node.operand, ast.Constant)
        and isinstance(node.operand.value, int | float)
        and not isinstance(node.operand.value, bool)
    ):
        return -node.operand.value
    return _NOT_LITERAL


def _imports_literal(node: ast.stmt) -> bool:
    return (
        isinstance(node, ast.ImportFrom)
        and node.module == "typing"
        and node.level == 0
        and [(a.name, a.asname) for a in node.names] == [("Literal", None)]
    )


def _annotation(node: ast.expr, text: str, line: int) -> tuple[str, list[Any] | None]:
    """The type an annotation names, and for ``Literal[...]`` its choices; anything but
    a bare allowed name or a ``Literal`` of literals is refused."""
    if isinstance(node, ast.Name) and node.id in _ANNOTATIONS:
        return _ANNOTATIONS[node.id], None
    if (
        isinstance(node, ast.Subscript)
        and isinstance(node.value, ast.Name)
        and node.value.id == "Literal"
    ):
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        values = [_literal_item(i) for i in items]
        if items and all(v is not _NOT_LITERAL for v in values):
            choices = values
            kinds = {_TYPE_NAMES.get(type(c)) for c in choices}
            if kinds <= {"int", "float"} and kinds:
                return ("int" if kinds == {"int"} else "float"), choices
            if len(kinds) == 1 and kinds <= {"str", "bool"}:
                return str(kinds.pop()), choices
    allowed = ", ".join(_ANNOTATIONS)
    raise ParametersCellError(
        f"`{text}`: an annotation must be one of the bare names {allowed}, or "
        "Literal[...] of str, int, float or bool literals",
        line,
    )


_NOT_LITERAL = object()


def validate_parameters(
    schema: Iterable[Parameter], values: Mapping[str, Any], *, bindings: bool = False
) -> dict[str, Any]:
    """Check ``values`` against ``schema``; return them, or raise :class:`ParameterValueError`.

    With ``bindings``, a value may be a slot binding
    (:mod:`nbcast.definitions.bindings`) for a parameter whose default is a string or
    ``None``: it is checked, not resolved. Every problem is reported at once, so a
    user fixes them in one go.
    """
    declared = {p.name: p for p in schema}
    problems: list[tuple[str, str]] = []  # (the parameter's name, the problem)
    if len(values) > MAX_PARAMETERS:
        raise ParameterValueError((f"more than {MAX_PARAMETERS} parameter values",))
    for name, value in values.items():
        if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
            problems.append(("", f"{clip(name)} is not a valid parameter name"))
            continue
        param = declared.get(name)
        if param is None:
            known = clip(", ".join(declared) or "none", 200)[1:-1]
            problems.append(
                (name, f"{name!r} is not declared in the parameters cell (declared: {known})")
            )
            continue
        problem = json_problem(value, name)
        if problem:
            problems.append((name, problem))
        elif bindings and is_binding(value):
            try:
                parse_binding(value, name)
            except MetadataError as exc:  # names the binding's own field: name.steps[0]
                problems.append((exc.field, str(exc)))
                continue
            if param.type not in ("str", "null"):
                problems.append(
                    (
                        name,
                        f"{name}: a binding gives a string, but the default "
                        f"{clip(param.default)} is {param.type}",
                    )
                )
            elif param.allowed is not None and param.allowed.choices is not None:
                problems.append((name, f"{name}: a binding cannot be one of its choices"))
        elif not _is_json_literal(value):
            problems.append((name, f"{name}: {type(value).__name__} is not a JSON value"))
        elif not compatible(param.type, value):
            problems.append(
                (
                    name,
                    f"{name}: expected {param.type} like the default {clip(param.default)}, "
                    f"got {type(value).__name__} {clip(value)}",
                )
            )
        elif param.allowed is not None and (refused := param.allowed.problem(name, value)):
            problems.append((name, refused))
    if problems:
        kept = problems[:20]
        raise ParameterValueError(tuple(p for _, p in kept), tuple(n for n, _ in kept))
    return dict(values)


def parse_assignment(text: str) -> tuple[str, Any]:
    """Parse a command-line ``key=value``: the value as JSON if it parses, else a string."""
    name, sep, raw = text.partition("=")
    if not sep:
        raise ParameterValueError((f"{clip(text)} is not key=value",))
    try:
        value = json.loads(raw, object_pairs_hook=unique_keys)
    except RecursionError:
        raise ParameterValueError(
            (f"{name.strip()}: nested too deeply",), (name.strip(),)
        ) from None
    except ValueError:
        value = raw
    return name.strip(), value


def unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object's pairs as a dict, refusing a key given twice (``json.loads``
    would silently keep the last one)."""
    result: dict[str, Any] = {}
    for key, value in pairs:
        if key in result:
            raise ParameterValueError((f"the key {clip(key)} is given twice",))
        result[key] = value
    return result


def parse_assignments(texts: Iterable[str]) -> dict[str, Any]:
    """Several ``key=value`` (``-p`` options); a name given twice is refused, since
    silently keeping one of them would run something the user did not ask for."""
    values: dict[str, Any] = {}
    for text in texts:
        name, value = parse_assignment(text)
        if name in values:
            raise ParameterValueError((f"{clip(name)} is given twice",), (name,))
        values[name] = value
    return values


def schema_to_json(schema: Iterable[Parameter]) -> list[dict[str, Any]]:
    """The schema as stored in a version row."""
    return [asdict(p) for p in schema]


def schema_from_json(rows: Iterable[Mapping[str, Any]]) -> tuple[Parameter, ...]:
    """A stored schema back as :class:`Parameter` records."""
    return tuple(
        Parameter(**{**row, "allowed": Allowed.from_json(row.get("allowed"))}) for row in rows
    )


def with_allowed(schema: Iterable[Parameter], block: Any) -> tuple[Parameter, ...]:
    """``schema`` with the rules of ``block``'s ``allowed`` (replacing an annotation's,
    :mod:`nbcast.definitions.allowed`); ``schema`` itself when the block has none."""
    parameters = tuple(schema)
    if not isinstance(block, Mapping) or "allowed" not in block:
        return parameters
    declared = {p.name: (p.type, p.default) for p in parameters}
    rules = parse_allowed(block["allowed"], declared)
    return tuple(
        dataclasses.replace(p, allowed=rules[p.name]) if p.name in rules else p for p in parameters
    )
