"""Turning decoded values into tool calls: call shapes, schema coercion, validation.

Every format's ``parse_region`` ends up here. The helpers accept the shapes small
models actually write (``{"name","arguments"}``, ``{"tool","args"}``,
``{"function": {...}}``, ``{"name","parameters"}``, arguments given as a JSON
string, arguments flattened next to the name), coerce values to the tool's schema
types, and accept a truncated call only when it then validates. Each repair is
recorded in ``ParsedCall.repairs``; unknown names come back with ``offered=False``.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.grammar.formats.base import ParsedCall, ParseResult, ToolSpec
from tether.grammar.rescue.jsonscan import find_json_values, loads_lenient

__all__ = [
    "ARG_KEYS",
    "NAME_KEYS",
    "args_valid",
    "calls_from_value",
    "clean_leftover",
    "coerce_text",
    "coerce_value",
    "extract_json_calls",
    "find_tool",
    "make_call",
    "schema_types",
]

NAME_KEYS = ("name", "tool", "tool_name", "function", "function_name")
ARG_KEYS = ("arguments", "parameters", "args", "input", "tool_input", "params")
_WRAPPERS = ("tool_calls", "tool_call", "function_call", "calls")
_META_KEYS = frozenset({"type", "id", "call_id", "tool_call_id", "index"})
_INT = re.compile(r"[+-]?\d+")
_FLOAT = re.compile(r"[+-]?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_EMPTY_FENCE = re.compile(r"```[\w+-]*[ \t]*\n?\s*```")
_NOISE = re.compile(r"[\s\]\[}{(),;`]*")


def find_tool(tools: Sequence[ToolSpec], name: str) -> ToolSpec | None:
    """The offered tool called exactly ``name``, if any."""
    for tool in tools:
        if tool.name == name:
            return tool
    return None


def schema_types(schema: Mapping[str, Any] | None) -> tuple[str, ...]:
    """JSON types a schema allows (``type``, type lists, ``anyOf``/``oneOf``, enums)."""
    if not isinstance(schema, Mapping):
        return ()
    raw = schema.get("type")
    types: list[str] = [raw] if isinstance(raw, str) else [t for t in raw or () if isinstance(t, str)]
    for key in ("anyOf", "oneOf"):
        for sub in schema.get(key) or ():
            types.extend(schema_types(sub))
    if not types and isinstance(schema.get("enum"), list):
        types.extend(_json_type(v) for v in schema["enum"])
    if not types and "properties" in schema:
        types.append("object")
    return tuple(dict.fromkeys(types))


def _json_type(value: Any) -> str:
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


_MISSING = object()


def _from_text(text: str, typ: str) -> Any:
    """``text`` read as JSON type ``typ``, or ``_MISSING``."""
    s = text.strip()
    if typ == "integer" and _INT.fullmatch(s):
        return int(s)
    if typ == "number" and _FLOAT.fullmatch(s):
        number = float(s)
        return int(s) if _INT.fullmatch(s) else number if math.isfinite(number) else _MISSING
    if typ == "boolean" and s.lower() in ("true", "false"):
        return s.lower() == "true"
    if typ == "null" and s.lower() in ("null", "none"):
        return None
    if typ in ("object", "array") and s[:1] in "{[":
        try:
            value, _ = loads_lenient(s)
        except ValueError:
            return _MISSING
        if isinstance(value, dict if typ == "object" else list):
            return value
    return _MISSING


def coerce_text(raw: str, schema: Mapping[str, Any] | None) -> Any:
    """A parameter value written as text (XML-ish formats) read by the schema's type.

    Strings stay strings; ``integer``/``number``/``boolean``/``null``/``object``/``array``
    are parsed when the text allows. With no type information, text that looks like a
    JSON object or array is decoded and anything else stays a string.
    """
    types = schema_types(schema)
    if "string" in types:
        return raw
    for typ in types or ("object", "array"):
        value = _from_text(raw, typ)
        if value is not _MISSING:
            return value
    return raw


def coerce_value(value: Any, schema: Mapping[str, Any] | None) -> tuple[Any, bool]:
    """``value`` nudged towards ``schema`` (``"5"`` → 5 for integers, 5 → ``"5"`` for strings).

    Returns ``(value, changed)``; objects and arrays are walked through
    ``properties`` and ``items``.
    """
    types = schema_types(schema)
    if schema is None or not types:
        return value, False
    if isinstance(value, str) and "string" not in types:
        new = coerce_text(value, schema)
        return new, new is not value
    if isinstance(value, int | float) and not isinstance(value, bool):
        if "integer" in types and "number" not in types and isinstance(value, float) and value.is_integer():
            return int(value), True
        if types == ("string",):
            return str(value), True
    if isinstance(value, dict) and isinstance(schema.get("properties"), Mapping):
        props: Mapping[str, Any] = schema["properties"]
        changed = False
        out: dict[str, Any] = {}
        for key, item in value.items():
            out[key], did = coerce_value(item, props.get(key))
            changed = changed or did
        return (out, True) if changed else (value, False)
    if isinstance(value, list) and isinstance(schema.get("items"), Mapping):
        pairs = [coerce_value(item, schema["items"]) for item in value]
        if any(did for _, did in pairs):
            return [item for item, _ in pairs], True
    return value, False


def args_valid(arguments: Mapping[str, Any], tool: ToolSpec) -> bool:
    """Do ``arguments`` validate against the tool's JSON schema (an invalid schema: no)?"""
    import jsonschema

    try:
        cls = jsonschema.validators.validator_for(tool.parameters)
        return bool(cls(tool.parameters).is_valid(dict(arguments)))
    except Exception:
        return False


def _dedupe(repairs: Iterable[str]) -> tuple[str, ...]:
    return tuple(dict.fromkeys(repairs))


def make_call(
    name: str,
    arguments: Mapping[str, Any],
    tools: Sequence[ToolSpec],
    *,
    raw: str = "",
    repairs: Iterable[str] = (),
) -> ParsedCall | None:
    """A ``ParsedCall`` with values coerced to the tool's schema.

    A call whose repairs include ``truncated_closed`` is kept only when the tool is
    offered and the closed arguments validate against its schema; otherwise None.
    """
    found = list(repairs)
    tool = find_tool(tools, name)
    args: Mapping[str, Any] = arguments
    if tool is not None:
        coerced, changed = coerce_value(dict(arguments), tool.parameters)
        if changed:
            args = coerced
            found.append("types_coerced")
    if "truncated_closed" in found and (tool is None or not args_valid(args, tool)):
        return None
    return ParsedCall(name=name, arguments=args, raw=raw, offered=tool is not None, repairs=_dedupe(found))


def _decode_arguments(value: Any, repairs: list[str]) -> dict[str, Any] | None:
    if isinstance(value, dict):
        return value
    if value is None:
        repairs.append("arguments_null")
        return {}
    if isinstance(value, str):
        repairs.append("arguments_string_decoded")
        if not value.strip():
            return {}
        try:
            decoded, inner = loads_lenient(value)
        except ValueError:
            return None
        repairs.extend(inner)
        return decoded if isinstance(decoded, dict) else None
    return None


def _single_call(
    value: dict[str, Any],
    tools: Sequence[ToolSpec],
    raw: str,
    markerless: bool,
    canonical_args: str,
    repairs: tuple[str, ...],
) -> ParsedCall | None:
    found = list(repairs)
    src = value
    inner = value.get("function")
    if isinstance(inner, dict) and any(isinstance(inner.get(k), str) for k in NAME_KEYS):
        src = inner
        found.append("shape_function_wrapper")
    name_key = next((k for k in NAME_KEYS if isinstance(src.get(k), str) and src[k].strip()), None)
    if name_key is None:
        return None
    name = str(src[name_key]).strip()
    if name_key != "name":
        found.append(f"name_key:{name_key}")
    tool = find_tool(tools, name)
    args_key = next((k for k in ARG_KEYS if k in src), None)
    if args_key is None:
        rest = {k: v for k, v in src.items() if k != name_key and k not in _META_KEYS}
        if tool is None and (rest or markerless):
            return None  # {"name": "Bob", "age": 3} is data, not a call
        found.append("arguments_flattened" if rest else "arguments_missing")
        return make_call(name, rest, tools, raw=raw, repairs=found)
    if args_key != canonical_args:
        found.append(f"arguments_key:{args_key}")
    args = _decode_arguments(src[args_key], found)
    return None if args is None else make_call(name, args, tools, raw=raw, repairs=found)


def calls_from_value(
    value: Any,
    tools: Sequence[ToolSpec],
    *,
    raw: str = "",
    markerless: bool = False,
    canonical_args: str = "arguments",
    repairs: tuple[str, ...] = (),
) -> list[ParsedCall]:
    """The calls a decoded JSON value describes: one call, a list, or a
    ``{"tool_calls": [...]}`` / ``{"tool_call": {...}}`` wrapper. Empty when not call-shaped.

    ``markerless``: the value was not inside call markers, so a bare ``{"name": ...}``
    without an arguments key counts only for an offered tool.
    """
    if isinstance(value, list):
        out: list[ParsedCall] = []
        for item in value:
            out.extend(
                calls_from_value(
                    item,
                    tools,
                    raw=raw,
                    markerless=markerless,
                    canonical_args=canonical_args,
                    repairs=repairs,
                )
            )
        return out
    if not isinstance(value, dict):
        return []
    for key in _WRAPPERS:
        if isinstance(value.get(key), list | dict):
            extra = () if key in ("tool_calls", "tool_call") else (f"wrapper:{key}",)
            return calls_from_value(
                value[key],
                tools,
                raw=raw,
                markerless=markerless,
                canonical_args=canonical_args,
                repairs=(*repairs, *extra),
            )
    call = _single_call(value, tools, raw, markerless, canonical_args, repairs)
    return [] if call is None else [call]


def clean_leftover(pieces: Sequence[str]) -> tuple[str, bool]:
    """Prose left around extracted calls: emptied code fences and stray brackets dropped.

    Returns ``(text, fence_removed)``.
    """
    text = "".join(pieces)
    cleaned = _EMPTY_FENCE.sub("", text)
    fenced = cleaned != text
    if _NOISE.fullmatch(cleaned):
        cleaned = ""
    return cleaned.strip(), fenced


def extract_json_calls(
    text: str,
    tools: Sequence[ToolSpec],
    *,
    markerless: bool = False,
    canonical_args: str = "arguments",
    repairs: tuple[str, ...] = (),
) -> ParseResult | None:
    """Every JSON call anywhere in ``text`` (code fences and prose allowed around them).

    Prose outside the calls becomes ``content``. None when there is no call.
    """
    calls: list[ParsedCall] = []
    pieces: list[str] = []
    pos = 0
    for span in find_json_values(text):
        found = calls_from_value(
            span.value,
            tools,
            raw=text[span.start : span.end],
            markerless=markerless,
            canonical_args=canonical_args,
            repairs=(*repairs, *span.repairs),
        )
        if not found:
            continue
        pieces.append(text[pos : span.start])
        pos = span.end
        calls.extend(found)
    if not calls:
        return None
    pieces.append(text[pos:])
    content, fenced = clean_leftover(pieces)
    if fenced:
        calls = [replace(c, repairs=_dedupe((*c.repairs, "code_fence"))) for c in calls]
    return ParseResult(content=content, calls=tuple(calls))
