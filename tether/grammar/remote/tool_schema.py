"""A tool's parameters as a JSON Schema an engine's JSON constraint accepts (vLLM, Ollama).

Real tool schemas are loose: no top-level ``type``, OpenAPI's ``nullable``, local ``$ref`` into
``$defs``/``definitions`` (pydantic), dangling or remote references, ``"properties": {}``. Engines
compile the schema into a grammar and refuse or misread such input, and a schema embedded in a
bigger one (the generic format's whole reply) breaks its ``$ref`` pointers, which are relative to
the document root. :func:`arguments_schema` cleans one tool's schema and :func:`embed_arguments`
places it inside another document with its pointers rewritten.

The meaning follows layer 0's strict mode (:func:`tether.grammar.regex.schema_regex`): a tool
without parameters takes ``{}`` only, and an object that lists ``properties`` takes no others
(outlines-core, xgrammar and llama.cpp's converter all close such objects; saying it explicitly
makes every engine and a plain validator agree). ``allOf`` members stay open, or their union
would admit nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from jsonschema import Draft202012Validator

from tether.coercion import SchemaWalker
from tether.grammar.plan import Mode

__all__ = ["ANY_OBJECT", "arguments_schema", "embed_arguments", "is_parameterless"]

ANY_OBJECT: dict[str, Any] = {"type": "object"}
_NO_PARAMETERS: dict[str, Any] = {"type": "object", "properties": {}, "additionalProperties": False}
_SELF = "tether-self"

# JSON Schema keywords by the shape of their value; anything else is data and is copied as is.
_SCHEMA_MAPS = ("properties", "patternProperties", "$defs", "definitions", "dependentSchemas")
_SCHEMA_ONE = (
    "items",
    "additionalProperties",
    "additionalItems",
    "unevaluatedProperties",
    "unevaluatedItems",
    "not",
    "if",
    "then",
    "else",
    "contains",
    "propertyNames",
)
_SCHEMA_LISTS = ("anyOf", "oneOf", "allOf", "prefixItems", "items")
# Dropped: identifiers that would move the base of ``$ref`` resolution once embedded, the dialect,
# and ``nullable`` (rewritten as a ``null`` type).
_DROPPED = ("$schema", "$id", "$anchor", "$dynamicAnchor", "nullable")
_OPENING = ("additionalProperties", "patternProperties", "unevaluatedProperties", "$ref", "allOf")
_SHAPING = ("properties", "$ref", "anyOf", "oneOf", "allOf", "additionalProperties", "patternProperties")


def is_parameterless(schema: Mapping[str, Any]) -> bool:
    """Does ``schema`` describe a tool without parameters (only ``{}`` is a valid call)?

    As layer 0: an object (or untyped) schema with no properties. Unlike layer 0, a schema that
    shapes its object another way (``$ref``, ``anyOf``, ``additionalProperties``…) is not one.
    """
    if schema.get("type", "object") != "object":
        return False
    return not schema.get("properties") and not any(k in schema for k in _SHAPING if k != "properties")


def arguments_schema(parameters: Mapping[str, Any], mode: Mode) -> dict[str, Any]:
    """A self-contained schema for one tool's arguments: the cleaned schema (strict) or any object.

    References stay relative to the schema's own root, except ``#`` itself (llama.cpp's converter
    refuses it), which points at a copy of the root kept in ``$defs``.
    """
    if mode != "strict":
        return dict(ANY_OBJECT)
    root = _prepared(parameters)
    if root is None:
        return dict(_NO_PARAMETERS)
    cleaner = _Cleaner(root, "#", f"#/$defs/{_SELF}")
    cleaned: dict[str, Any] = cleaner.node(root, close=True)
    if cleaner.self_refs:
        own = cleaned.get("$defs")
        copy = {k: v for k, v in cleaned.items() if k != "$defs"}
        cleaned["$defs"] = {**(own if isinstance(own, Mapping) else {}), _SELF: copy}
    return cleaned


def embed_arguments(parameters: Mapping[str, Any], defs: dict[str, Any], key: str) -> dict[str, Any]:
    """The cleaned schema of one tool, for use anywhere inside a larger document.

    A schema without references comes back inline. One with references is stored in ``defs`` (the
    document root's ``$defs``) under ``key``, its pointers rewritten to start there, and a
    ``{"$ref": "#/$defs/<key>"}`` comes back.
    """
    root = _prepared(parameters)
    if root is None:
        return dict(_NO_PARAMETERS)
    at = f"#/$defs/{key}"
    cleaner = _Cleaner(root, at, at)
    cleaned: dict[str, Any] = cleaner.node(root, close=True)
    if not cleaner.refs:
        return cleaned
    defs[key] = cleaned
    return {"$ref": at}


def _prepared(parameters: Mapping[str, Any]) -> dict[str, Any] | None:
    """The root with its implied ``type``; None for a tool without parameters."""
    root = dict(parameters) if isinstance(parameters, Mapping) else {}
    if is_parameterless(root):
        return None
    if "type" not in root and "properties" in root:
        root["type"] = "object"
    return root


class _Cleaner:
    """Walks one schema by keyword. Local references ``#/…`` are rewritten to start at ``base`` and
    ``#`` becomes ``root_ref``; ``refs`` and ``self_refs`` count them."""

    def __init__(self, root: Mapping[str, Any], base: str, root_ref: str) -> None:
        self.walker = SchemaWalker(root, Draft202012Validator({}))
        self.base = base
        self.root_ref = root_ref
        self.refs = 0
        self.self_refs = 0

    def node(self, schema: Any, *, close: bool) -> Any:
        if isinstance(schema, bool):
            return schema
        if not isinstance(schema, Mapping):
            return {}  # not a schema at all: no constraint rather than an engine error
        out: dict[str, Any] = {}
        for key, value in schema.items():
            if key in _DROPPED:
                continue
            if key == "$ref":
                if isinstance(value, str) and self._resolves(value):
                    self.refs += 1
                    self.self_refs += value == "#"
                    out[key] = self.root_ref if value == "#" else self.base + value[1:]
            elif key in _SCHEMA_MAPS and isinstance(value, Mapping):
                out[key] = {name: self.node(sub, close=True) for name, sub in value.items()}
            elif key in _SCHEMA_LISTS and isinstance(value, list):
                out[key] = [self.node(sub, close=key != "allOf") for sub in value]
            elif key in _SCHEMA_ONE:
                out[key] = self.node(value, close=True)
            else:
                out[key] = value
        if close and isinstance(out.get("properties"), Mapping) and not any(k in out for k in _OPENING):
            out["additionalProperties"] = False
        return _nullable(out) if schema.get("nullable") is True else out

    def _resolves(self, ref: str) -> bool:
        """A local reference whose target exists; others (remote, dangling) constrain nothing."""
        if not ref.startswith("#") or (len(ref) > 1 and not ref.startswith("#/")):
            return False
        probe = {"$ref": ref}
        return ref == "#" or self.walker.deref(probe) is not probe


def _nullable(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI's ``nullable: true`` as JSON Schema: ``null`` becomes one more allowed value."""
    enum = schema.get("enum")
    if isinstance(enum, list) and None not in enum:
        schema["enum"] = [*enum, None]
    kind = schema.get("type")
    if isinstance(kind, str):
        schema["type"] = [kind, "null"]
    elif isinstance(kind, list):
        schema["type"] = kind if "null" in kind else [*kind, "null"]
    else:
        return {"anyOf": [schema, {"type": "null"}]}
    return schema
