"""Turning decoded values into tool calls: the call shapes small models write.

Every format's ``parse_region`` ends up here. The helpers accept the shapes small
models actually write (``{"name","arguments"}``, ``{"tool","args"}``,
``{"function": {...}}``, ``{"name","parameters"}``, arguments given as a JSON
string, arguments flattened next to the name) and accept a truncated call only when
its arguments then validate as written. They decode shapes only: values stay as the
model wrote them (coercion is the guard's, :mod:`tether.coercion`). Each repair is
recorded in ``ToolCall.repairs``; names that are not offered are kept for the guard.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.grammar.formats.base import ParseResult, ToolSpec
from tether.jsonscan import find_json_values, loads_lenient

__all__ = [
    "ARG_KEYS",
    "NAME_KEYS",
    "args_valid",
    "calls_from_value",
    "clean_leftover",
    "extract_json_calls",
    "find_tool",
    "make_call",
]

NAME_KEYS = ("name", "tool", "tool_name", "function", "function_name")
ARG_KEYS = ("arguments", "parameters", "args", "input", "tool_input", "params")
_WRAPPERS = ("tool_calls", "tool_call", "function_call", "calls")
_META_KEYS = frozenset({"type", "id", "call_id", "tool_call_id", "index"})
_EMPTY_FENCE = re.compile(r"```[\w+-]*[ \t]*\n?\s*```")
_NOISE = re.compile(r"[\s\]\[}{(),;`]*")


def find_tool(tools: Sequence[ToolSpec], name: str) -> ToolSpec | None:
    """The offered tool called exactly ``name``, if any."""
    for tool in tools:
        if tool.name == name:
            return tool
    return None


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
) -> ToolCall | None:
    """A ``ToolCall`` with the arguments as written.

    A call whose repairs include ``truncated_closed`` is kept only when the tool is
    offered and the closed arguments validate against its schema; otherwise None.
    """
    found = _dedupe(repairs)
    if "truncated_closed" in found:
        tool = find_tool(tools, name)
        if tool is None or not args_valid(arguments, tool):
            return None
    return ToolCall(name=name, arguments=dict(arguments), raw=raw, repairs=found)


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
) -> ToolCall | None:
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
) -> list[ToolCall]:
    """The calls a decoded JSON value describes: one call, a list, or a
    ``{"tool_calls": [...]}`` / ``{"tool_call": {...}}`` wrapper. Empty when not call-shaped.

    ``markerless``: the value was not inside call markers, so a bare ``{"name": ...}``
    without an arguments key counts only for an offered tool.
    """
    if isinstance(value, list):
        out: list[ToolCall] = []
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
    calls: list[ToolCall] = []
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
        calls = [c.with_repairs("code_fence") for c in calls]
    return ParseResult(content=content, calls=tuple(calls))
