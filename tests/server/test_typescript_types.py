"""The Lab extension's API types are generated from the REST API's schemas: the
committed ``labextension/src/generated/api_types.ts`` is what they give today (run
``python -m nbcast.server_extension.typescript labextension/src/generated/api_types.ts``
after changing a schema), and the generator maps JSON Schema as its docstring says."""

from __future__ import annotations

from pathlib import Path

from nbcast.server_extension.openapi import document
from nbcast.server_extension.typescript import typescript

GENERATED = Path(__file__).resolve().parents[2] / "labextension/src/generated/api_types.ts"


def test_the_committed_types_are_the_schemas() -> None:
    assert GENERATED.read_text() == typescript(document()), (
        "labextension/src/generated/api_types.ts is stale: regenerate it"
    )


def test_every_component_is_an_exported_type() -> None:
    text = GENERATED.read_text()
    for name in document()["components"]["schemas"]:
        assert f"export interface {name} " in text or f"export type {name} =" in text, name


def test_json_schema_maps_to_typescript() -> None:
    doc = {
        "components": {
            "schemas": {
                "Thing": {
                    "type": "object",
                    "required": ["id", "state"],
                    "properties": {
                        "id": {"type": "integer"},
                        "state": {"type": "string", "enum": ["A", "B"]},
                        "note": {"type": ["string", "null"]},
                        "tags": {"type": "array", "items": {"type": "string"}},
                        "child": {"$ref": "#/components/schemas/Other"},
                        "extra": {"type": "object", "additionalProperties": {"type": "number"}},
                        "odd-key": {"oneOf": [{"type": "boolean"}, {"type": "null"}]},
                    },
                },
                "Other": {"type": "string", "enum": ["x"]},
            }
        }
    }
    text = typescript(doc)
    assert "export interface Thing {" in text
    assert "  id: number;" in text
    assert '  state: "A" | "B";' in text
    assert "  note?: string | null;" in text
    assert "  tags?: string[];" in text
    assert "  child?: Other;" in text
    assert "  extra?: Record<string, number>;" in text
    assert '  "odd-key"?: boolean | null;' in text
    assert 'export type Other = "x";' in text
