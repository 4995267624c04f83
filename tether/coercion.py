"""The one rule set for turning argument values into the types their JSON Schema asks for.

Two uses, one module:

* **Coercion** (the guard's argument stage, presets ``full``/``strict``):
  :class:`SchemaWalker` walks a decoded value alongside its schema (``properties``,
  ``additionalProperties``, ``items``, ``prefixItems``, local ``$ref``, and the single
  ``anyOf``/``oneOf`` branch the value's type fits) and applies :func:`coerce_scalar`
  where the value's own type is not allowed. Only lossless changes are made, a coercion
  is kept only when the coerced value then validates at that spot, and every change is
  recorded as a readable line. The rules are listed in :mod:`tether.guardrails.arguments`.
  Parsers never coerce: under ``bare`` a call comes back exactly as the model wrote it.
* **Text-typed formats** (Qwen3-Coder and GLM-4.5 write every parameter as text):
  :func:`value_from_text` reads such a value by the schema's type. That is the format's
  own encoding, not a repair, so it applies under every preset.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from decimal import Decimal, InvalidOperation
from typing import Any

from jsonschema import Draft202012Validator

from tether.jsonscan import loads_lenient

__all__ = [
    "SchemaWalker",
    "coerce_scalar",
    "compact_json",
    "json_type",
    "path_text",
    "schema_types",
    "type_allowed",
    "value_from_text",
]

_INT = re.compile(r"-?(?:0|[1-9]\d*)")
_NUMBER = re.compile(r"-?(?:0|[1-9]\d*)(?:\.\d+)?(?:[eE][+-]?\d+)?")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_\-]*")
MAX_DEPTH = 32


def compact_json(value: Any, limit: int = 300) -> str:
    """``value`` as compact JSON text, cut to ``limit`` characters with ``…``."""
    try:
        text = json.dumps(value, ensure_ascii=False, separators=(",", ":"), default=repr)
    except ValueError:  # circular structures
        text = repr(value)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_type(value: Any) -> str:
    """The JSON type name of a decoded value."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if isinstance(value, str):
        return "string"
    return "array" if isinstance(value, list) else "object"


def type_allowed(value: Any, allowed: frozenset[str]) -> bool:
    """Is ``value`` of one of the ``allowed`` JSON types (integers are numbers, 5.0 is an integer)?"""
    kind = json_type(value)
    if kind in allowed:
        return True
    if kind == "integer":
        return "number" in allowed
    return kind == "number" and "integer" in allowed and float(value).is_integer()


def path_text(parts: Sequence[str | int]) -> str:
    """``["edits", 0, "old"]`` → ``edits[0].old``; odd keys are quoted: ``["a b"]``."""
    out = ""
    for part in parts:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.fullmatch(part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part, ensure_ascii=False)}]"
    return out


def coerce_scalar(value: Any, allowed: frozenset[str]) -> tuple[Any, str] | None:
    """(new value, rule name) for a lossless coercion of ``value`` into one of ``allowed``, or None."""
    if isinstance(value, int) and not isinstance(value, bool):
        return (str(value), "integer to string") if allowed == {"string"} else None
    if not isinstance(value, str):
        return None
    if "integer" in allowed and _INT.fullmatch(value):
        return int(value), "string to integer"
    if "number" in allowed and _NUMBER.fullmatch(value):
        if _INT.fullmatch(value):
            return int(value), "string to number"
        number = float(value)
        try:
            exact = Decimal(value) == Decimal(repr(number))
        except InvalidOperation:
            exact = False
        return (number, "string to number") if exact else None
    if "boolean" in allowed and value in ("true", "false", "True", "False"):
        return value.lower() == "true", "string to boolean"
    if "null" in allowed and value == "null":
        return None, "string to null"
    for kind, opener, cls in (("object", "{", dict), ("array", "[", list)):
        if kind in allowed and value.lstrip()[:1] == opener:
            try:
                decoded = json.loads(value)
            except ValueError:
                return None
            return (decoded, f"JSON string to {kind}") if isinstance(decoded, cls) else None
    return None


def schema_types(schema: Mapping[str, Any] | None) -> tuple[str, ...]:
    """JSON types a schema allows (``type``, type lists, ``anyOf``/``oneOf``, enums), in order."""
    if not isinstance(schema, Mapping):
        return ()
    raw = schema.get("type")
    types: list[str] = [raw] if isinstance(raw, str) else [t for t in raw or () if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            types.extend(schema_types(sub))
    if not types and isinstance(schema.get("enum"), list):
        types.extend(json_type(v) for v in schema["enum"])
    if not types and "properties" in schema:
        types.append("object")
    return tuple(dict.fromkeys(types))


_TEXT_INT = re.compile(r"[+-]?\d+")
_TEXT_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")


def _text_as(text: str, kind: str) -> tuple[bool, Any]:
    s = text.strip()
    if kind == "integer" and _TEXT_INT.fullmatch(s):
        return True, int(s)
    if kind == "number" and _TEXT_FLOAT.fullmatch(s):
        number = float(s)
        if _TEXT_INT.fullmatch(s):
            return True, int(s)
        return (True, number) if math.isfinite(number) else (False, None)
    if kind == "boolean" and s.lower() in ("true", "false"):
        return True, s.lower() == "true"
    if kind == "null" and s.lower() in ("null", "none"):
        return True, None
    if kind in ("object", "array") and s[:1] in "{[":
        try:
            value, _ = loads_lenient(s)
        except ValueError:
            return False, None
        if isinstance(value, dict if kind == "object" else list):
            return True, value
    return False, None


def value_from_text(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter value a text-typed format wrote, read by the schema's type.

    Strings stay strings; ``integer``/``number``/``boolean``/``null``/``object``/``array``
    are read when the text allows. With no type information, text that looks like a JSON
    object or array is decoded and anything else stays a string.
    """
    types = schema_types(schema)
    if "string" in types:
        return raw
    for kind in types or ("object", "array"):
        ok, value = _text_as(raw, kind)
        if ok:
            return value
    return raw


class SchemaWalker:
    """Coerces values against one (valid) root schema; ``validator`` is compiled from it."""

    def __init__(
        self,
        schema: Mapping[str, Any],
        validator: Draft202012Validator,
        *,
        coerce: bool = True,
        fill_defaults: bool = False,
    ) -> None:
        self.schema = schema
        self.validator = validator
        self.coerce = coerce
        self.fill_defaults = fill_defaults

    def deref(self, schema: Any, depth: int = 0) -> Any:
        """``schema`` with a local ``$ref`` (``#/$defs/x``) resolved and its siblings merged in."""
        if not isinstance(schema, Mapping) or "$ref" not in schema or depth > MAX_DEPTH:
            return schema
        ref = schema["$ref"]
        if not isinstance(ref, str) or not ref.startswith("#"):
            return schema
        node: Any = self.schema
        for raw in ref[1:].split("/")[1:]:
            key = raw.replace("~1", "/").replace("~0", "~")
            if isinstance(node, Mapping) and key in node:
                node = node[key]
            elif isinstance(node, list) and key.isdigit() and int(key) < len(node):
                node = node[int(key)]
            else:
                return schema
        if not isinstance(node, Mapping):
            return schema
        return self.deref({**node, **{k: v for k, v in schema.items() if k != "$ref"}}, depth + 1)

    def allowed(self, schema: Any, depth: int = 0) -> frozenset[str] | None:
        """JSON types ``schema`` allows at this spot; None when unconstrained."""
        schema = self.deref(schema)
        if not isinstance(schema, Mapping) or depth > MAX_DEPTH:
            return None
        raw = schema.get("type")
        if isinstance(raw, str):
            return frozenset({raw})
        if isinstance(raw, list):
            return frozenset(t for t in raw if isinstance(t, str))
        if "const" in schema:
            return frozenset({json_type(schema["const"])})
        if isinstance(schema.get("enum"), list):
            return frozenset(json_type(v) for v in schema["enum"])
        for key in ("anyOf", "oneOf"):
            if isinstance(schema.get(key), list):
                found: set[str] = set()
                for sub in schema[key]:
                    sub_types = self.allowed(sub, depth + 1)
                    if sub_types is None:
                        return None
                    found |= sub_types
                return frozenset(found)
        if "properties" in schema:
            return frozenset({"object"})
        if "items" in schema or "prefixItems" in schema:
            return frozenset({"array"})
        return None

    def walk(
        self, value: Any, schema: Any, path: list[str | int], notes: list[str], defaults: list[str]
    ) -> Any:
        """``value`` coerced towards ``schema``; changes are appended to ``notes``/``defaults``."""
        schema = self.deref(schema)
        if not isinstance(schema, Mapping) or len(path) > MAX_DEPTH:
            return value
        allowed = self.allowed(schema)
        original = value
        mine: list[str] = []
        if self.coerce and allowed is not None and not type_allowed(value, allowed):
            found = coerce_scalar(value, allowed)
            if found is not None:
                value, rule = found
                where = path_text(path) or "(arguments)"
                mine.append(f"{where}: {compact_json(original, 80)} → {compact_json(value, 80)} ({rule})")
        below: list[str] = []
        filled: list[str] = []
        value = self._children(value, schema, path, below, filled)
        if mine and not self.validator.evolve(schema=schema).is_valid(value):
            return original  # the coercion did not make this spot valid: keep what the model wrote
        notes.extend(mine + below)
        defaults.extend(filled)
        return value

    def _children(
        self,
        value: Any,
        schema: Mapping[str, Any],
        path: list[str | int],
        notes: list[str],
        defaults: list[str],
    ) -> Any:
        branches = [s for key in ("anyOf", "oneOf") for s in schema.get(key) or () if isinstance(s, Mapping)]
        if branches and not any(k in schema for k in ("properties", "items", "prefixItems")):
            fitting = [b for b in branches if (t := self.allowed(b)) is None or type_allowed(value, t)]
            return self.walk(value, fitting[0], path, notes, defaults) if len(fitting) == 1 else value
        if isinstance(value, dict):
            raw_props = schema.get("properties")
            props: Mapping[str, Any] = raw_props if isinstance(raw_props, Mapping) else {}
            extra = schema.get("additionalProperties")
            out: dict[str, Any] = {}
            for key, item in value.items():
                sub = props.get(key, extra if isinstance(extra, Mapping) else None)
                out[key] = item if sub is None else self.walk(item, sub, [*path, key], notes, defaults)
            if self.fill_defaults:
                for key, raw_sub in props.items():
                    sub = self.deref(raw_sub)
                    if key not in out and isinstance(sub, Mapping) and "default" in sub:
                        out[key] = sub["default"]
                        defaults.append(
                            f"{path_text([*path, key])}: default {compact_json(sub['default'], 80)} filled"
                        )
            return out
        if isinstance(value, list):
            raw_prefix = schema.get("prefixItems")
            prefix: list[Any] = raw_prefix if isinstance(raw_prefix, list) else []
            items = schema.get("items")
            result: list[Any] = []
            for i, item in enumerate(value):
                sub = prefix[i] if i < len(prefix) else items if isinstance(items, Mapping) else None
                result.append(item if sub is None else self.walk(item, sub, [*path, i], notes, defaults))
            return result
        return value
