"""Records: the frozen dataclasses the query layer returns, whose fields are their JSON.

A record's ``to_json`` emits one key per field, in the field's JSON form; the API's
OpenAPI components (:mod:`nbcast.server_extension.record_schemas`) and the Lab's
TypeScript types are derived from the same fields, so the three cannot drift apart. A
field that a record carries for its callers but never shows — a database id, the raw
block a summary was made from — is declared with :func:`internal`, and both
``to_json`` and the schema leave it out; a field whose key is not its name with
:func:`named` (``schema`` shown as ``parameters``); a record whose JSON lays another
record's keys out as its own (one version with its definition's state) declares that
field :func:`flattened`, with the keys it takes when not all.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

__all__ = ["INTERNAL", "flattened", "internal", "is_internal", "json_key", "named"]

INTERNAL = MappingProxyType({"json": False})
"""The metadata of a field that is not part of its record's JSON."""


def internal(**options: Any) -> Any:
    """A dataclass field left out of the record's JSON (``options`` as for
    :func:`dataclasses.field`)."""
    return dataclasses.field(metadata=INTERNAL, **options)


def is_internal(field: dataclasses.Field[Any]) -> bool:
    """Whether ``field`` is left out of its record's JSON."""
    return field.metadata.get("json") is False


def named(key: str, **options: Any) -> Any:
    """A dataclass field shown under the JSON key ``key``."""
    return dataclasses.field(metadata={"json_name": key}, **options)


def json_key(field: dataclasses.Field[Any]) -> str:
    """The JSON key of ``field`` (its name unless :func:`named`)."""
    return str(field.metadata.get("json_name", field.name))


def flattened(*, only: tuple[str, ...] | None = None, **options: Any) -> Any:
    """A dataclass field holding a record whose JSON keys (``only`` those, when given)
    are laid out among its record's own."""
    return dataclasses.field(metadata={"flatten": True, "only": only}, **options)
