"""Allowed values of a parameter: choices, bounds or a pattern.

A parameter may say which values make sense — ``region`` is one of five, ``top_n`` is
between 1 and 50, ``report_date`` looks like a date — so that ``region=MARS`` is
refused when it is given (publish, ``nbcast run -p``, the API, the Lab's dialog,
which offers a dropdown for choices) and not discovered by a failed run. Two ways to
say it:

- the metadata block's ``allowed``, by parameter name: a list (the choices), or a
  mapping with ``choices``, ``min`` and ``max`` (numbers), ``pattern`` (a regular
  expression the whole string must match)::

      "allowed": {"region": ["EMEA", "AMER", "APAC", "LATAM", "ALL"],
                  "top_n": {"min": 1, "max": 50},
                  "report_date": {"pattern": "\\\\d{4}-\\\\d{2}-\\\\d{2}"}}

- a ``Literal[...]`` annotation in the parameters cell, which stays a bare type form
  (its items are literals; the cell must ``from typing import Literal`` for it, since
  Python evaluates the annotation when the cell runs)::

      from typing import Literal
      region: Literal["EMEA", "AMER", "APAC", "LATAM", "ALL"] = "ALL"

A rule is checked when it is declared: it names a declared parameter, choices fit the
parameter's type (and hold its default), bounds are for numbers, a pattern for
strings (and compiles). The block's rule replaces an annotation's. A value is checked
wherever values are (:func:`nbcast.definitions.parameters.validate_parameters`): the
block's and the subscriptions' values at publish, ``-p`` values and the API's before
a run is queued, and every run's resolved values before it executes (a bound date
meets its pattern there). A binding cannot be one of a list of choices: publishing
refuses choices on a bound parameter.

**Bounds.** At most :data:`MAX_CHOICES` choices of at most :data:`MAX_CHOICE_CHARS`
characters; a pattern of at most :data:`MAX_PATTERN_CHARS` characters, matched with
the ``regex`` module under a :data:`PATTERN_TIMEOUT_S` timeout (a pattern that
backtracks without end on some value refuses that value instead of hanging the
server), against strings of at most :data:`MAX_MATCHED_CHARS` characters; its counted
repeats (``{m,n}``) at most :data:`MAX_REPEAT` each and :data:`MAX_REPEAT_PRODUCT`
multiplied (compiling expands them). A value checked against a pattern must be a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import regex

from nbcast.errors import MetadataError
from nbcast.limits import clip, json_problem

__all__ = [
    "MAX_CHOICES",
    "MAX_CHOICE_CHARS",
    "MAX_MATCHED_CHARS",
    "MAX_PATTERN_CHARS",
    "MAX_REPEAT",
    "MAX_REPEAT_PRODUCT",
    "PATTERN_TIMEOUT_S",
    "Allowed",
    "check_rule",
    "compatible",
    "parse_allowed",
]

MAX_CHOICES = 200
MAX_CHOICE_CHARS = 200
MAX_PATTERN_CHARS = 200
MAX_MATCHED_CHARS = 10_000
PATTERN_TIMEOUT_S = 0.05


@dataclass(frozen=True, kw_only=True)
class Allowed:
    """What values one parameter accepts (module docstring); None: no such rule."""

    choices: list[Any] | None = None
    """The values it may take."""
    min: float | None = None
    """The smallest number it may be."""
    max: float | None = None
    """The largest number it may be."""
    pattern: str | None = None
    """A regular expression the whole string must match."""

    def to_json(self) -> dict[str, Any]:
        return {"choices": self.choices, "min": self.min, "max": self.max, "pattern": self.pattern}

    @classmethod
    def from_json(cls, data: Any) -> Allowed | None:
        """A stored rule (a mapping as :meth:`to_json` gives), or None."""
        if not isinstance(data, Mapping):
            return None
        return cls(
            choices=data.get("choices"),
            min=data.get("min"),
            max=data.get("max"),
            pattern=data.get("pattern"),
        )

    def problem(self, name: str, value: Any) -> str | None:
        """Why ``value`` is not allowed for ``name`` (None: it is)."""
        if self.choices is not None and not any(_same(value, c) for c in self.choices):
            shown = clip(", ".join(_text(c) for c in self.choices[:20]), 200)[1:-1]
            more = f" (and {len(self.choices) - 20} more)" if len(self.choices) > 20 else ""
            return f"{name}: {clip(value)} is not one of {shown}{more}"
        if _number(value):
            if self.min is not None and value < self.min:
                return f"{name}: {clip(value)} is below the minimum {_text(self.min)}"
            if self.max is not None and value > self.max:
                return f"{name}: {clip(value)} is above the maximum {_text(self.max)}"
        if self.pattern is not None:
            if not isinstance(value, str):
                return f"{name}: {clip(value)} is not a string to match {clip(self.pattern)}"
            if len(value) > MAX_MATCHED_CHARS:
                return f"{name}: longer than {MAX_MATCHED_CHARS:,} characters to match"
            try:
                matched = regex.fullmatch(self.pattern, value, timeout=PATTERN_TIMEOUT_S)
            except TimeoutError:
                return f"{name}: {clip(value)} could not be matched in time"
            if matched is None:
                return f"{name}: {clip(value)} does not match {clip(self.pattern)}"
        return None

    def describe(self) -> str:
        """``one of EMEA, AMER`` / ``1 to 50`` / ``matches \\d{4}``, for people."""
        parts = []
        if self.choices is not None:
            parts.append("one of " + ", ".join(_text(c) for c in self.choices[:20]))
        if self.min is not None or self.max is not None:
            low = _text(self.min) if self.min is not None else "…"
            high = _text(self.max) if self.max is not None else "…"
            parts.append(f"{low} to {high}")
        if self.pattern is not None:
            parts.append(f"matches {self.pattern}")
        return "; ".join(parts)


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _same(value: Any, choice: Any) -> bool:
    return value == choice and isinstance(value, bool) == isinstance(choice, bool)


def _text(value: Any) -> str:
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return value if isinstance(value, str) else json.dumps(value)


MAX_REPEAT = 1_000
"""The largest count a pattern's ``{m,n}`` may name: the ``regex`` module expands
counted repeats when it compiles (``a{10000000}`` takes gigabytes), and compiling has
no timeout."""
MAX_REPEAT_PRODUCT = 100_000
"""The product of all a pattern's counts (nested repeats multiply when expanded)."""

_COUNT = re.compile(r"(?<!\\)\{\s*(\d*)\s*(?:,\s*(\d*)\s*)?\}")


def _check_pattern(pattern: str, path: str) -> None:
    """Refuse a pattern that does not compile, or whose counted repeats would make
    compiling it costly (:data:`MAX_REPEAT`). Its syntax is checked with the standard
    ``re`` module, which compiles counted repeats without expanding them."""
    product = 1
    for low, high in _COUNT.findall(pattern):
        count = max(int(low or 0), int(high or 0)) if (low or high) else 0
        if count > MAX_REPEAT:
            raise MetadataError(path, f"repeats something {count:,} times (at most {MAX_REPEAT:,})")
        product *= max(count, 1)
        if product > MAX_REPEAT_PRODUCT:
            raise MetadataError(path, f"its counted repeats multiply past {MAX_REPEAT_PRODUCT:,}")
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError, MemoryError) as exc:
        raise MetadataError(path, f"does not compile: {clip(str(exc))}") from None


def compatible(kind: str, value: Any) -> bool:
    """Whether ``value`` (JSON) is of a parameter's type ``kind`` (``null``: any)."""
    if kind == "null":
        return True
    if kind == "bool":
        return isinstance(value, bool)
    if kind == "int":
        return isinstance(value, int) and not isinstance(value, bool)
    if kind == "float":
        return isinstance(value, (int, float)) and not isinstance(value, bool)
    if kind == "str":
        return isinstance(value, str)
    if kind == "list":
        return isinstance(value, list)
    if kind == "dict":
        return isinstance(value, dict)
    return False


def parse_allowed(value: Any, declared: Mapping[str, tuple[str, Any]]) -> dict[str, Allowed]:
    """The block's ``allowed`` checked against the ``declared`` parameters (name →
    type and default; module docstring)."""
    if not isinstance(value, Mapping):
        raise MetadataError("allowed", "must be a mapping of parameter names to rules")
    rules: dict[str, Allowed] = {}
    for name, rule in value.items():
        path = f"allowed.{name}"
        parameter = declared.get(name)
        if parameter is None:
            raise MetadataError(path, f"{clip(name)} is not declared in the parameters cell")
        if isinstance(rule, list):
            rule = {"choices": rule}
        if not isinstance(rule, Mapping) or not rule:
            raise MetadataError(
                path, "must be a list of choices or a mapping of choices/min/max/pattern"
            )
        unknown = set(rule) - {"choices", "min", "max", "pattern"}
        if unknown:
            raise MetadataError(
                f"{path}.{sorted(unknown)[0]}", "unknown key (allowed: choices, max, min, pattern)"
            )
        rules[name] = check_rule(name, *parameter, rule, path)
    return rules


def check_rule(name: str, kind: str, default: Any, rule: Mapping[str, Any], path: str) -> Allowed:
    """One rule for the parameter ``name`` of type ``kind`` and its ``default``,
    checked (module docstring)."""
    choices = rule.get("choices")
    if choices is not None:
        if not isinstance(choices, list) or not 1 <= len(choices) <= MAX_CHOICES:
            raise MetadataError(f"{path}.choices", f"must be a list of 1 to {MAX_CHOICES} values")
        for i, choice in enumerate(choices):
            if isinstance(choice, list | dict) or not compatible(kind, choice):
                raise MetadataError(
                    f"{path}.choices[{i}]",
                    f"{clip(choice)} is not a {kind} like the default {clip(default)}",
                )
            problem = json_problem(choice, f"{path}.choices[{i}]")
            if problem:
                where, _, message = problem.partition(": ")
                raise MetadataError(where, message)
            if isinstance(choice, str) and len(choice) > MAX_CHOICE_CHARS:
                raise MetadataError(
                    f"{path}.choices[{i}]", f"is longer than {MAX_CHOICE_CHARS} characters"
                )
    bounds = {}
    for key in ("min", "max"):
        if rule.get(key) is not None:
            if kind not in ("int", "float"):
                raise MetadataError(f"{path}.{key}", f"bounds are for numbers; {name} is {kind}")
            if not _number(rule[key]) or rule[key] != rule[key] or abs(rule[key]) > 1e300:
                raise MetadataError(f"{path}.{key}", f"must be a number, not {clip(rule[key])}")
            bounds[key] = rule[key]
    if "min" in bounds and "max" in bounds and bounds["min"] > bounds["max"]:
        raise MetadataError(f"{path}.min", "is above max")
    pattern = rule.get("pattern")
    if pattern is not None:
        if kind not in ("str", "null"):
            raise MetadataError(f"{path}.pattern", f"a pattern is for strings; {name} is {kind}")
        if not isinstance(pattern, str) or not 0 < len(pattern) <= MAX_PATTERN_CHARS:
            raise MetadataError(
                f"{path}.pattern",
                f"must be a regular expression of 1 to {MAX_PATTERN_CHARS} characters",
            )
        _check_pattern(pattern, f"{path}.pattern")
    allowed = Allowed(
        choices=choices, min=bounds.get("min"), max=bounds.get("max"), pattern=pattern
    )
    if default is not None:
        problem = allowed.problem(name, default)
        if problem:
            raise MetadataError(path, f"the default is not allowed: {problem}")
    return allowed
