"""OpenAPI component schemas derived from the query layer's records.

A record (a frozen dataclass whose ``to_json`` emits one key per field) describes its
JSON form once: :func:`record_schema` reads its fields and their annotations and
registers the component (:func:`nbcast.server_extension.openapi.schema`), so the API's
document — and the Lab's types generated from it (:mod:`nbcast.server_extension.
typescript`) — follow the record. What an annotation cannot say (the values of a state,
a lower bound) is given as ``overrides``, by field.

Annotations map as: ``int`` → integer, ``float`` → number, ``str`` → string, ``bool``
→ boolean, ``datetime`` → an ISO 8601 instant, ``dict``/``Mapping`` → object (``dict[str,
T]``: whose values are T), ``list[T]``
→ array of T (``tuple[T, ...]`` too), an ``Enum`` → its values, a record given in
``refs`` → its component, ``X | None`` → nullable X.
Every field is ``required`` (``to_json`` always emits each key, null or not) but for
those declared :func:`~nbcast.records.internal`, which are not part of the JSON; a
:func:`~nbcast.records.flattened` field contributes its record's keys (or ``only``
those); a :func:`~nbcast.records.named` field its key. A field's docstring (the string
under it in the class body) is its ``description``.
"""

from __future__ import annotations

import ast
import dataclasses
import enum
import inspect
import itertools
import re
import textwrap
import types
import typing
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from nbcast.records import is_internal, json_key
from nbcast.server_extension.openapi import INSTANT, schema

__all__ = ["record_definition", "record_schema"]


def record_schema(name: str, record: type, **options: Any) -> dict[str, Any]:
    """Register the component ``name`` for the dataclass ``record`` (``options`` as for
    :func:`record_definition`); return its ``$ref``."""
    return schema(name, record_definition(record, **options))


def record_definition(
    record: type,
    *,
    description: str | None = None,
    overrides: Mapping[str, dict[str, Any]] | None = None,
    refs: Mapping[type, dict[str, Any]] | None = None,
    json_names: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """The JSON Schema of the dataclass ``record``'s JSON form (module docstring);
    ``json_names`` maps a field to the key ``to_json`` gives it (``run_id`` → ``run``)."""
    hints = typing.get_type_hints(record)
    documented = _field_docs(record)
    properties: dict[str, Any] = {}
    required = []
    for field in dataclasses.fields(record):
        if is_internal(field):
            continue  # carried for callers, never shown (nbcast.records)
        if field.metadata.get("flatten"):
            inner = record_definition(hints[field.name], overrides=overrides, refs=refs)
            only = field.metadata.get("only") or inner["required"]
            for key in only:
                properties[key] = inner["properties"][key]
                required.append(key)
            continue
        given = (overrides or {}).get(field.name)
        nullable, kind = _unwrap(hints[field.name])
        if given is not None:
            base = dict(given)
        else:
            base = _schema_of(kind, refs or {}, field.name, record)
        prop = _nullable(base) if nullable else base
        if field.name in documented and "$ref" not in prop and "description" not in prop:
            prop = {**prop, "description": documented[field.name]}
        key = (json_names or {}).get(field.name, json_key(field))
        properties[key] = prop
        required.append(key)
    text = description or (record.__doc__ or "").strip().split("\n\n")[0]
    definition: dict[str, Any] = {"type": "object"}
    if text:
        definition["description"] = _markdown(" ".join(text.split()))
    definition.update(required=required, properties=properties)
    return definition


def _field_docs(record: type) -> dict[str, str]:
    """Each field's docstring, read from the class's source (empty when unreadable)."""
    try:
        tree = ast.parse(textwrap.dedent(inspect.getsource(record)))
    except (OSError, TypeError, SyntaxError):
        return {}
    body = tree.body[0].body if tree.body and isinstance(tree.body[0], ast.ClassDef) else []
    docs: dict[str, str] = {}
    for before, after in itertools.pairwise(body):
        if (
            isinstance(before, ast.AnnAssign)
            and isinstance(before.target, ast.Name)
            and isinstance(after, ast.Expr)
            and isinstance(after.value, ast.Constant)
            and isinstance(after.value.value, str)
        ):
            docs[before.target.id] = _markdown(" ".join(after.value.value.split()))
    return docs


def _markdown(text: str) -> str:
    """A docstring's reStructuredText as the API's Markdown: ``code`` as `code`, a
    cross-reference (:mod:`~a.b`) as its last name in code."""
    text = re.sub(r":\w+:`~?(?:[\w.]+\.)?([\w]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _unwrap(hint: Any) -> tuple[bool, Any]:
    """``(nullable, the type without None)``."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        members = [a for a in typing.get_args(hint) if a is not type(None)]
        nullable = len(members) < len(typing.get_args(hint))
        if len(members) == 1:
            return nullable, members[0]
        raise TypeError(f"{hint!r}: a union of several types needs an override")
    return False, hint


def _schema_of(kind: Any, refs: Mapping[type, dict[str, Any]], field: str, record: type) -> Any:
    origin = typing.get_origin(kind) or kind
    if kind in refs:
        return refs[kind]
    if isinstance(kind, type) and issubclass(kind, enum.Enum):
        return {"type": "string", "enum": [str(m.value) for m in kind]}
    if kind is bool:
        return {"type": "boolean"}
    if kind is int:
        return {"type": "integer"}
    if kind is float:
        return {"type": "number"}
    if kind is str:
        return {"type": "string"}
    if kind is datetime:
        return dict(INSTANT)
    if origin in (dict, Mapping):
        args = typing.get_args(kind)
        if len(args) == 2 and args[1] is not typing.Any:
            return {
                "type": "object",
                "additionalProperties": _schema_of(args[1], refs, field, record),
            }
        return {"type": "object"}
    if origin is typing.Any:
        return {"type": "object"}
    if origin in (list, tuple):
        (item,) = typing.get_args(kind)[:1] or (Any,)
        return {"type": "array", "items": _schema_of(item, refs, field, record)}
    raise TypeError(f"{record.__name__}.{field}: {kind!r} has no schema (give an override)")


def _nullable(base: dict[str, Any]) -> dict[str, Any]:
    if "$ref" in base or "enum" in base:
        return {"oneOf": [base, {"type": "null"}]}
    kind = base.get("type")
    if isinstance(kind, str):
        return {**base, "type": [kind, "null"]}
    return {"oneOf": [base, {"type": "null"}]}
