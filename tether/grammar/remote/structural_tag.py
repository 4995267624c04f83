"""Layer 0 as vLLM and Ollama understand it: structural tags and JSON schemas.

Built from the same :class:`~tether.grammar.spec.OutputSpec` as llama-server's GBNF
(:mod:`tether.grammar.remote.gbnf`):

* a marker format → a vLLM structural tag of type ``triggered_tags``: the triggers are the
  format's ``begin`` markers and each offered tool gets a tag whose ``begin`` is the family's own
  text up to the arguments with the name in it (``<tool_call>\\n{"name": "get_weather",
  "arguments": ``), so once a marker appears only an offered name can follow; the content is the
  tool's schema (strict) or any JSON object (names), the ``end`` the text that closes the call.
  Begin and end come from the format's own ``render_calls``, so they are what the model was
  trained on. A format whose arguments are not JSON (XML, pythonic) gets name-only tags.
  ``tool_choice`` required/named → ``at_least_one`` (the reply starts with a call); no parallel
  calls → ``stop_after_first``. Ollama has no lazy constraint: nothing is sent for these formats.
* a whole-reply format (generic) → one JSON Schema for the reply: the call list, each item's name
  tied to its own arguments schema, or the text answer. It is vLLM's ``structured_outputs.json``
  and Ollama's ``format``.
* the guard's re-pick → vLLM ``choice`` / an enum schema (Ollama answers a JSON string);
  the argument repair and a structured reply → the cleaned schema. Beside tools, a structured
  answer replaces the whole-reply format's text answer in its schema, and is Ollama's ``format`` for
  a marker format; vLLM's triggered tags hold only the calls there (the answer is checked after).

vLLM takes ``structured_outputs.structural_tag`` as JSON *text* (an object is refused with 400).
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.calls import ToolCall
from tether.grammar.formats.base import InlineNameSlot, ToolCallFormat, ToolSpec, WholeReply
from tether.grammar.remote.tool_schema import ANY_OBJECT, arguments_schema, embed_arguments
from tether.grammar.spec import JsonSpec, NameChoiceSpec, OutputSpec, ReplySpec

__all__ = [
    "VllmConstraint",
    "compile_ollama",
    "compile_vllm",
    "name_enum_schema",
    "reply_schema",
    "structural_tag",
]

_SENTINEL = "tether-arguments-5f2c"
_SENTINEL_JSON = re.compile(r'\{\s*"' + _SENTINEL + r'"\s*:\s*0\s*\}')
_EMPTY: dict[str, Any] = {"type": "const_string", "value": ""}


@dataclass(frozen=True)
class VllmConstraint:
    """vLLM's ``structured_outputs`` object (``/v1/completions`` and ``/v1/chat/completions``)."""

    structured_outputs: dict[str, Any]

    def request_fields(self) -> dict[str, Any]:
        return {"structured_outputs": dict(self.structured_outputs)}


def compile_vllm(spec: OutputSpec) -> VllmConstraint | None:
    """The constraint for ``spec``; None where none applies (see :func:`structural_tag`)."""
    if isinstance(spec, NameChoiceSpec):
        return VllmConstraint({"choice": list(dict.fromkeys(spec.names))})
    if isinstance(spec, JsonSpec):
        return VllmConstraint({"json": value_schema(spec)})
    if spec.fmt.whole_reply is not None:
        schema = reply_schema(spec)
        return None if schema is None else VllmConstraint({"json": schema})
    tag = structural_tag(spec)
    return None if tag is None else VllmConstraint({"structural_tag": json.dumps(tag, ensure_ascii=False)})


def compile_ollama(spec: OutputSpec) -> dict[str, Any] | None:
    """Ollama's ``format`` for ``spec``; None for marker formats (a format holds the whole reply)."""
    if isinstance(spec, NameChoiceSpec):
        return name_enum_schema(spec.names)
    if isinstance(spec, JsonSpec):
        return value_schema(spec)
    if spec.fmt.whole_reply is not None:
        return reply_schema(spec)
    # A format holds the whole reply: a structured answer's schema, where there is one.
    return None if spec.answer is None else value_schema(spec.answer)


def value_schema(spec: JsonSpec) -> dict[str, Any]:
    """One JSON value of ``spec`` as a self-contained schema (None: any object)."""
    return dict(ANY_OBJECT) if spec.schema is None else arguments_schema(spec.schema, "strict")


def name_enum_schema(names: Sequence[str]) -> dict[str, Any]:
    """The re-pick as a JSON Schema: the reply is one of ``names`` as a JSON string."""
    return {"type": "string", "enum": list(dict.fromkeys(names))}


def _unique(tools: Sequence[ToolSpec]) -> list[ToolSpec]:
    """The first tool of each name, in offered order."""
    seen: dict[str, ToolSpec] = {}
    for tool in tools:
        seen.setdefault(tool.name, tool)
    return list(seen.values())


# -- whole reply (generic format) ------------------------------------------------------


@dataclass(frozen=True)
class _ReplyKeys:
    calls: str
    name: str
    arguments: str
    answer: str


def _reply_keys(reply: WholeReply) -> _ReplyKeys | None:
    """The member names the declaration's pieces spell (``tool_calls``, ``name``…); None if they are
    not the JSON objects a schema can describe."""
    try:
        calls = json.loads(reply.calls_open + reply.calls_close)
        call = json.loads(reply.call_open + "N" + reply.args_open + "{}" + reply.call_close)
        answer = json.loads(reply.answer_open + '""' + reply.answer_close)
    except ValueError:
        return None
    if not all(isinstance(v, dict) for v in (calls, call, answer)) or len(calls) != 1 or len(answer) != 1:
        return None
    name = next((k for k, v in call.items() if v == "N"), None)
    args = next((k for k, v in call.items() if v == {}), None)
    if name is None or args is None or len(call) != 2:
        return None
    return _ReplyKeys(next(iter(calls)), name, args, next(iter(answer)))


def _closed(properties: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }


def reply_schema(spec: ReplySpec) -> dict[str, Any] | None:
    """The whole reply of a whole-reply format as one JSON Schema; None for any other format.

    ``{calls: [item, …]}`` or ``{answer: "non-empty text"}``; ``required`` → calls only,
    ``answer_only`` → the answer only, ``parallel`` false → one call at most. In strict mode each
    item pairs one offered name with that tool's arguments schema, so name and arguments agree.
    """
    keys = None if spec.fmt.whole_reply is None else _reply_keys(spec.fmt.whole_reply)
    if keys is None:
        return None
    defs: dict[str, Any] = {}
    answer: dict[str, Any]
    value: dict[str, Any]
    if spec.answer is None:
        value = {"type": "string", "minLength": 1}
    elif spec.answer.schema is None:
        value = dict(ANY_OBJECT)
    else:  # a structured answer's value takes the text's place
        value = embed_arguments(spec.answer.schema, defs, "answer")
    answer = _closed({keys.answer: value})
    if spec.answer_only:
        return {**answer, "$defs": defs} if defs else answer
    tools = _unique(spec.tools)
    items: list[dict[str, Any]]
    if spec.mode == "strict":
        items = [
            _closed(
                {
                    keys.name: {"type": "string", "enum": [t.name]},
                    keys.arguments: embed_arguments(t.parameters, defs, f"tool{i}"),
                }
            )
            for i, t in enumerate(tools)
        ]
    else:
        names = {"type": "string", "enum": [t.name for t in tools]}
        items = [_closed({keys.name: names, keys.arguments: dict(ANY_OBJECT)})]
    array: dict[str, Any] = {"type": "array", "items": items[0] if len(items) == 1 else {"anyOf": items}}
    array["minItems"] = 1
    if not spec.parallel:
        array["maxItems"] = 1
    calls = _closed({keys.calls: array})
    root: dict[str, Any] = calls if spec.required else {"anyOf": [calls, answer]}
    return {**root, "$defs": defs} if defs else root


# -- structural tag (marker formats) ---------------------------------------------------


def structural_tag(spec: ReplySpec) -> dict[str, Any] | None:
    """vLLM's ``{"type": "structural_tag", "format": {"type": "triggered_tags", …}}`` for a marker
    format; None for a whole-reply format, a format without markers, or a reply that may only
    answer (nothing to hold: the guard drops any call such a reply makes)."""
    fmt = spec.fmt
    if fmt.whole_reply is not None or not fmt.begin or spec.answer_only or not spec.tools:
        return None
    tags: list[dict[str, Any]] = []
    for tool in _unique(spec.tools):
        found = _tool_tags(fmt, tool, spec)
        if found is None:
            return None  # a plugin format whose calls do not look like a name then arguments
        tags.extend(found)
    return {
        "type": "structural_tag",
        "format": {
            "type": "triggered_tags",
            "triggers": list(fmt.begin),
            "tags": tags,
            "at_least_one": spec.required,
            "stop_after_first": not spec.parallel,
        },
    }


def _tool_tags(fmt: ToolCallFormat, tool: ToolSpec, spec: ReplySpec) -> list[dict[str, Any]] | None:
    """The tags for one tool, one per begin marker (and per name terminator for inline names)."""
    rendered = fmt.render_calls("", [ToolCall(name=tool.name, arguments={_SENTINEL: 0})])
    marker = next((m for m in fmt.begin if rendered.startswith(m)), None)
    body = rendered[len(marker) :] if marker is not None else rendered  # bare JSON (llama3_json)
    match = _SENTINEL_JSON.search(body)
    if match is not None:
        head, end = body[: match.start()], body[match.end() :]
        if tool.name not in head and json.dumps(tool.name)[1:-1] not in head:
            return None
        content = arguments_schema(tool.parameters, spec.mode)
        return [_tag(m + head, {"type": "json_schema", "json_schema": content}, end) for m in fmt.begin]
    slot = fmt.name_slot
    if not isinstance(slot, InlineNameSlot):
        return None
    # Arguments in the family's own syntax (XML, Python calls): the name is held, the rest is free.
    return [_tag(m + slot.prefix + tool.name + t, _EMPTY, "") for m in fmt.begin for t in slot.terminators]


def _tag(begin: str, content: dict[str, Any], end: str) -> dict[str, Any]:
    return {"type": "tag", "begin": begin, "content": content, "end": end}
