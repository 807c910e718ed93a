"""The REST API's shapes as TypeScript: one ``interface`` per OpenAPI component.

The JupyterLab extension's types come from here (``labextension/src/generated/
api_types.ts``, written by ``python -m nbcast.server_extension.typescript FILE``), so the
API's schemas — the one description of each shape the handlers answer with — and the
extension cannot drift: ``tests/server/test_typescript_types.py`` fails when the
committed file is not what the schemas give.

JSON Schema to TypeScript: ``string``/``integer``/``number``/``boolean``/``null`` as
themselves (numbers as ``number``), a type list as a union, ``enum`` as a union of
literals, ``array`` as ``T[]``, an object with ``properties`` as an inline type (a
property outside ``required`` is optional), one with only ``additionalProperties`` as
``Record<string, T>``, any other object as ``Record<string, unknown>``, ``$ref`` as the
component's name and ``oneOf``/``anyOf`` as a union.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

__all__ = ["typescript"]

_HEADER = (
    "// Generated from the REST API's OpenAPI components by\n"
    "// `python -m nbcast.server_extension.typescript`; do not edit.\n"
)


def typescript(document: dict[str, Any]) -> str:
    """Every component of ``document`` as an exported TypeScript interface."""
    schemas = document.get("components", {}).get("schemas", {})
    parts = [_HEADER]
    for name in sorted(schemas):
        schema = schemas[name]
        description = schema.get("description")
        doc = f"/** {_comment(description)} */\n" if description else ""
        body = _type(schema, 0)
        if body.startswith("{"):
            parts.append(f"{doc}export interface {name} {body}\n")
        else:
            parts.append(f"{doc}export type {name} = {body};\n")
    return "\n".join(parts)


def _comment(text: str) -> str:
    return " ".join(str(text).split()).replace("*/", "*\\/")


def _type(schema: Any, depth: int) -> str:
    if not isinstance(schema, dict) or not schema:
        return "unknown"
    if "$ref" in schema:
        return str(schema["$ref"]).rsplit("/", 1)[-1]
    for key in ("oneOf", "anyOf"):
        if key in schema:
            return _union([_type(s, depth) for s in schema[key]])
    if "enum" in schema:
        return _union([json.dumps(v) for v in schema["enum"]])
    kinds = schema.get("type")
    if isinstance(kinds, list):
        return _union([_type({**schema, "type": k}, depth) for k in kinds])
    if kinds in ("integer", "number"):
        return "number"
    if kinds in ("string", "boolean", "null"):
        return str(kinds)
    if kinds == "array":
        item = _type(schema.get("items", {}), depth)
        return f"({item})[]" if "|" in item else f"{item}[]"
    if kinds == "object" or "properties" in schema:
        return _object(schema, depth)
    return "unknown"


def _object(schema: dict[str, Any], depth: int) -> str:
    properties = schema.get("properties")
    if not properties:
        extra = schema.get("additionalProperties")
        value = _type(extra, depth) if isinstance(extra, dict) else "unknown"
        return f"Record<string, {value}>"
    required = set(schema.get("required", ()))
    pad = "  " * (depth + 1)
    lines = ["{"]
    for key, value in properties.items():
        description = value.get("description") if isinstance(value, dict) else None
        if description:
            lines.append(f"{pad}/** {_comment(description)} */")
        optional = "" if key in required else "?"
        lines.append(f"{pad}{_key(key)}{optional}: {_type(value, depth + 1)};")
    lines.append("  " * depth + "}")
    return "\n".join(lines)


def _key(name: str) -> str:
    return name if name.isidentifier() else json.dumps(name)


def _union(members: list[str]) -> str:
    unique = list(dict.fromkeys(members))
    return " | ".join(unique) if unique else "never"


def main(argv: list[str]) -> int:
    """``python -m nbcast.server_extension.typescript [FILE]``: write (or print) them."""
    from nbcast.server_extension.openapi import document

    text = typescript(document())
    if argv:
        Path(argv[0]).write_text(text)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
