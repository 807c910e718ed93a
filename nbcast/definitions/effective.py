"""What a version runs with: each parameter's effective value, and where it comes from.

A parameter's value in a scheduled run is, in order: the version's ``nbcast`` block
(``parameters``: a literal, or a binding resolved per slot), else the default written
in the notebook's ``parameters`` cell. A reviewer who reads only the cell — or a diff
of it — can be told the wrong thing: the demo's ``daily-sales`` v2 changed the default
``top_n = 10 → 5`` while its block kept ``top_n: 15``, and its runs listed 15. So every
face shows the effective value beside the default (:func:`effective_parameters`), and
publishing warns in one line when a changed default is hidden by the block
(:func:`hidden_default_changes`).

An audience's own ``parameters`` (a subscription's) overlay these for that audience's
runs; the effective values here are the base audience's.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from nbcast.definitions.bindings import is_binding
from nbcast.definitions.parameters import Parameter

__all__ = ["EffectiveParameter", "effective_parameters", "hidden_default_changes"]


@dataclass(frozen=True, kw_only=True)
class EffectiveParameter:
    """One parameter as the version's runs get it."""

    name: str
    value: Any
    """What a run gets (a binding as written: it is resolved for each slot)."""
    source: str
    """``metadata`` (the block's literal), ``binding`` (the block's binding, resolved per
    slot) or ``default`` (the cell's)."""
    default: Any
    """The cell's default, for comparison."""

    @property
    def overridden(self) -> bool:
        """Whether the block, not the cell, decides the value."""
        return self.source != "default"

    def to_json(self) -> dict[str, Any]:
        """The JSON form."""
        return {
            "name": self.name,
            "value": self.value,
            "source": self.source,
            "default": self.default,
        }


def effective_parameters(
    schema: Iterable[Parameter], block: Mapping[str, Any] | None
) -> tuple[EffectiveParameter, ...]:
    """Each parameter of ``schema`` with the value the version's runs get (module
    docstring); ``block`` is the version's ``nbcast`` block as stored."""
    given = (block or {}).get("parameters")
    values: Mapping[str, Any] = given if isinstance(given, Mapping) else {}
    out = []
    for p in schema:
        if p.name in values:
            value = values[p.name]
            source = "binding" if is_binding(value) else "metadata"
        else:
            value, source = p.default, "default"
        out.append(EffectiveParameter(name=p.name, value=value, source=source, default=p.default))
    return tuple(out)


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False, sort_keys=True)
    return text if len(text) <= 60 else text[:57] + "..."


def hidden_default_changes(
    previous: Iterable[Parameter], schema: Iterable[Parameter], block: Mapping[str, Any] | None
) -> list[str]:
    """One line per parameter whose default changed from ``previous`` to ``schema`` while
    the ``block`` overrides it — the change a reader of the cell expects to take effect
    and which does not: ``parameters.top_n: the default changed 10 → 5, but runs use 15
    from the metadata block``."""
    before = {p.name: p.default for p in previous}
    lines = []
    for p in effective_parameters(schema, block):
        if p.name in before and before[p.name] != p.default and p.overridden:
            where = "a binding" if p.source == "binding" else "the metadata block"
            lines.append(
                f"parameters.{p.name}: the default changed {_shown(before[p.name])} → "
                f"{_shown(p.default)}, but runs use {_shown(p.value)} from {where}"
            )
    return lines
