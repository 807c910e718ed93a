"""Recipient-scoped subscriptions: who sees which data ("run as recipient").

A subscription may carry its own ``parameters`` (values for declared parameters,
slot bindings allowed, laid over the definition's) and a ``row_filter`` (attributes
such as ``{"region": "EMEA"}`` that the warehouse applies to every query of the run,
:mod:`nbcast.warehouse`). Subscriptions with the same parameters and row filter form
one **audience**; a slot produces one run per audience, delivered only to that
audience's recipients. Subscriptions with neither form the base audience (key
``""``), which is also the only one of a definition without subscriptions. A
definition whose subscriptions are all scoped has no base run: nobody would receive
it.

An audience's key is the first 16 hex digits of the SHA-256 of its canonical JSON
(``{"parameters": …, "row_filter": …}``, keys sorted), so it is stable across
versions and processes; runs carry it (``runs.audience``) beside the slot key.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from nbcast.errors import MetadataError, ParameterValueError
from nbcast.limits import clip

__all__ = [
    "BASE",
    "MAX_FILTER_KEYS",
    "Audience",
    "audience_key",
    "audiences",
    "parse_row_filter",
    "parse_scoped_parameters",
]

BASE = ""
"""The key of the base audience: subscriptions without parameters or a row filter."""

MAX_FILTER_KEYS = 8
"""Attributes one row filter may name."""

MAX_FILTER_VALUE = 256
"""Characters of one row-filter value."""

_ATTRIBUTE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,62}")


def audience_key(parameters: Mapping[str, Any], row_filter: Mapping[str, Any]) -> str:
    """The audience key of a subscription's scope (module docstring)."""
    if not parameters and not row_filter:
        return BASE
    canonical = json.dumps(
        {"parameters": dict(parameters), "row_filter": dict(row_filter)},
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=True,
    )
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def parse_row_filter(value: Any, path: str) -> dict[str, str | int | bool]:
    """A subscription's ``row_filter``: at most :data:`MAX_FILTER_KEYS` attributes named
    like SQL identifiers, each a string, a whole number or a boolean."""
    if not isinstance(value, dict):
        raise MetadataError(path, f"must be a mapping, not {type(value).__name__}")
    if not value:
        raise MetadataError(path, "names no attribute (leave it out instead)")
    if len(value) > MAX_FILTER_KEYS:
        raise MetadataError(path, f"names more than {MAX_FILTER_KEYS} attributes")
    result: dict[str, str | int | bool] = {}
    for key, item in value.items():
        where = f"{path}.{clip(key, 40)}"
        if not isinstance(key, str) or not _ATTRIBUTE.fullmatch(key):
            raise MetadataError(where, "an attribute is named like a column (letters, _, digits)")
        whole = isinstance(item, int) and abs(item) < 2**63  # booleans included
        text = isinstance(item, str) and 0 < len(item) <= MAX_FILTER_VALUE and item.isprintable()
        if whole or text:
            result[key] = item
        else:
            raise MetadataError(
                where,
                f"must be a string of 1-{MAX_FILTER_VALUE} printable characters, a whole "
                "number or a boolean",
            )
    return result


def parse_scoped_parameters(value: Any, schema: Any, path: str) -> dict[str, Any]:
    """A subscription's ``parameters``, checked against the notebook's schema (slot
    bindings allowed, as in the metadata block)."""
    from nbcast.definitions.parameters import validate_parameters

    if not isinstance(value, dict):
        raise MetadataError(path, f"must be a mapping, not {type(value).__name__}")
    if not value:
        raise MetadataError(path, "gives no value (leave it out instead)")
    try:
        return validate_parameters(schema, value, bindings=True)
    except ParameterValueError as exc:
        named = exc.field.removeprefix("parameters")
        raise MetadataError(path + named, exc.about_field()) from None


@dataclass(frozen=True, kw_only=True)
class Audience:
    """The subscriptions that see the same data, and what they see."""

    key: str
    parameters: dict[str, Any]
    """Laid over the definition's parameters for this audience's runs."""
    row_filter: dict[str, Any]
    """Applied by the warehouse to every query of this audience's runs."""
    subscriptions: tuple[int, ...]
    """Indexes into the definition's subscriptions."""


def audiences(subscriptions: Sequence[Any]) -> list[Audience]:
    """The audiences of a definition's subscriptions, base first then by key (module
    docstring); a definition without subscriptions has the base audience alone."""
    groups: dict[str, list[int]] = {}
    scopes: dict[str, tuple[dict[str, Any], dict[str, Any]]] = {}
    for index, sub in enumerate(subscriptions):
        parameters = dict(getattr(sub, "parameters", {}) or {})
        row_filter = dict(getattr(sub, "row_filter", {}) or {})
        key = audience_key(parameters, row_filter)
        groups.setdefault(key, []).append(index)
        scopes[key] = (parameters, row_filter)
    if not groups:
        return [Audience(key=BASE, parameters={}, row_filter={}, subscriptions=())]
    return [
        Audience(
            key=key,
            parameters=scopes[key][0],
            row_filter=scopes[key][1],
            subscriptions=tuple(groups[key]),
        )
        for key in sorted(groups)
    ]
