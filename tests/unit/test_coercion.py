"""The one coercion module: text-typed format values read by the schema's type (Qwen3-Coder, GLM-4.5)."""

from __future__ import annotations

from typing import Any

import pytest

from tether.coercion import schema_types, value_from_text


@pytest.mark.parametrize(
    ("raw", "schema", "value"),
    [
        ("42", {"type": "integer"}, 42),
        (" -7 ", {"type": "integer"}, -7),
        ("4.5", {"type": "number"}, 4.5),
        ("4", {"type": "number"}, 4),
        ("True", {"type": "boolean"}, True),
        ("false", {"type": "boolean"}, False),
        ("null", {"type": ["integer", "null"]}, None),
        ('["a", "b"]', {"type": "array"}, ["a", "b"]),
        ("{'k': 1}", {"type": "object"}, {"k": 1}),
        ("42", {"type": "string"}, "42"),
        ("42", {"anyOf": [{"type": "integer"}, {"type": "string"}]}, "42"),
        ("7", {"anyOf": [{"type": "integer"}, {"type": "null"}]}, 7),
        ("celsius", {"enum": ["celsius", "fahrenheit"]}, "celsius"),
        ("abc", {"type": "integer"}, "abc"),  # left as is; validation will say no
        ('{"x": 1}', None, {"x": 1}),
        ("plain", None, "plain"),
        ("12", None, "12"),
    ],
)
def test_value_from_text(raw: str, schema: dict[str, Any] | None, value: Any) -> None:
    assert value_from_text(raw, schema) == value


def test_schema_types() -> None:
    assert schema_types({"type": ["integer", "null"]}) == ("integer", "null")
    assert schema_types({"anyOf": [{"type": "string"}, {"type": "number"}]}) == ("string", "number")
    assert schema_types({"enum": [1, "a"]}) == ("integer", "string")
    assert schema_types({"properties": {}}) == ("object",)
    assert schema_types(None) == ()
