"""Whether a tool's ``parameters`` are a valid Draft 2020-12 JSON Schema, checked once per schema.

``jsonschema``'s metaschema check walks the whole 2020-12 vocabulary: 0.5-1 ms for a small tool
schema, paid twice per tool by every request that offers tools (the proxy validates them, the guard
compiles its argument checkers). Agents send the same tools with every turn, so the verdict is kept
per distinct schema (its canonical JSON): a repeat costs ~0.01 ms.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from jsonschema import Draft202012Validator, SchemaError

from tether.caches import CacheFill, lru_fill

__all__ = ["SchemaProblem", "schema_problem"]


@dataclass(frozen=True)
class SchemaProblem:
    """Why a schema is invalid: the metaschema's message and where in the schema it applies."""

    message: str
    path: tuple[str | int, ...]


def schema_problem(schema: Mapping[str, Any]) -> SchemaProblem | None:
    """What makes ``schema`` an invalid Draft 2020-12 schema, or None when it is valid."""
    try:
        key = json.dumps(schema, sort_keys=True, separators=(",", ":"), allow_nan=False)
    except (TypeError, ValueError):  # not plain JSON (a Python caller's schema): checked uncached
        return _check(dict(schema))
    return _checked(key)


def cache_fill() -> dict[str, CacheFill]:
    return {"schema_checks": lru_fill(_checked)}


@lru_cache(maxsize=512)
def _checked(key: str) -> SchemaProblem | None:
    return _check(json.loads(key))


def _check(schema: dict[str, Any]) -> SchemaProblem | None:
    try:
        Draft202012Validator.check_schema(schema)
    except SchemaError as exc:
        return SchemaProblem(exc.message, tuple(exc.absolute_path))
    return None
