"""The generic format, for chat templates without tool support (e.g. SmolLM2).

Tools are described in the system prompt and the WHOLE reply is one JSON object,
held by the grammar from the first token:

* tool calls: ``{"tool_calls": [{"name": "NAME", "arguments": {...}}]}``
  (``{"tool_call": {...}}`` and a bare call object are accepted when parsing);
* a text answer: ``{"response": "text"}``; the detector streams the decoded string.

A reply that is not JSON at all is plain prose (the model ignored the instruction).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from tether.calls import ToolCall
from tether.coercion import schema_types
from tether.grammar.formats._shared import JsonPayloadFormat, dumps
from tether.grammar.formats.base import JsonNameSlot, JsonTextEnvelope, ParseResult, ToolSpec, WholeReply
from tether.grammar.rescue import armed_region_end, calls_from_value, clean_leftover, find_json_values

__all__ = ["GenericFormat"]

_REPLY = WholeReply()


def _type_text(spec: Any) -> str:
    """A parameter's type as a short signature: ``string``, ``"c" | "f"``, ``array of number``."""
    if not isinstance(spec, Mapping):
        return "any"
    if spec.get("enum"):
        return " | ".join(dumps(v) for v in spec["enum"])
    types = schema_types(spec)
    kind = types[0] if types else "any"
    if kind == "array":
        return f"array of {_type_text(spec.get('items'))}"
    if kind == "object" and isinstance(spec.get("properties"), Mapping):
        return _signature(spec)
    return kind


def _signature(schema: Mapping[str, Any]) -> str:
    props = schema.get("properties")
    if not isinstance(props, Mapping):
        return "{}"
    return "{" + ", ".join(f"{dumps(k)}: {_type_text(v)}" for k, v in props.items()) + "}"


def _describe(tool: ToolSpec) -> str:
    """A tool for the prompt: name, description, the arguments' shape, the schema, each argument's notes.

    The signature comes before the schema: shown only the schema, SmolLM2 copies it
    (``"type": "object"``) as the arguments; shown only the signature, it loses the schema's
    hints for choosing among tools."""
    params = tool.parameters
    lines = [
        f"{tool.name}: {tool.description or 'No description.'}",
        f"Arguments: {_signature(params)}",
        f"Schema: {dumps(dict(params))}",
    ]
    props = params.get("properties")
    required = [k for k in params.get("required") or () if isinstance(props, Mapping) and k in props]
    if isinstance(props, Mapping) and len(required) < len(props):
        lines.append("Required: " + (", ".join(required) or "none"))
    for key, spec in (props or {}).items():
        if isinstance(spec, Mapping) and spec.get("description"):
            lines.append(f"- {key}: {spec['description']}")
    return "\n".join(lines)


class GenericFormat(JsonPayloadFormat):
    name = "generic"
    description = 'Templates without tool support: the reply is {"tool_calls": [...]} or {"response": "..."}'
    whole_reply = _REPLY
    begin = (_REPLY.calls_open,)
    end = ()
    name_slot = JsonNameSlot(("name",))
    prompt_owns_tools = True
    text_envelope = JsonTextEnvelope(_REPLY.answer_open + '"', '"' + _REPLY.answer_close)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        # No example values and no placeholder text: a small model copies whatever it is shown
        # ("example", "YOUR ANSWER"). The grammar holds the shape, so the words only have to say
        # when to call and where the values come from (wording chosen by measurement, docs/evals.md).
        listing = "\n\n".join(_describe(t) for t in tools)
        return (
            "You can call these tools:\n\n" + listing + "\n\n"
            "Reply with one JSON object. If one of the tools does what the user asks, call it with "
            'the values from the request: {"tool_calls": [{"name": <tool>, "arguments": <object>}]}. '
            'If no tool fits, answer the user in words: {"response": <text>}.'
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        if not calls:
            return dumps({"response": content})
        return dumps({"tool_calls": [{"name": c.name, "arguments": dict(c.arguments)} for c in calls]})

    def region_end(self, region: str, final: bool) -> int | None:
        return armed_region_end(region, final)  # the begin marker opens the reply object itself

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        text = region
        marked = any(region.startswith(b) for b in self.begin)
        calls: list[ToolCall] = []
        answers: list[str] = []
        pieces: list[str] = []
        pos = 0
        for span in find_json_values(text):
            value = span.value
            found = calls_from_value(
                value, tools, raw=text[span.start : span.end], markerless=not marked, repairs=span.repairs
            )
            answer = value.get("response") if isinstance(value, dict) else None
            empty = isinstance(value, dict) and value.get("tool_calls") == []
            if not found and not isinstance(answer, str) and not empty:
                continue
            calls.extend(found)
            if isinstance(answer, str):
                answers.append(answer)
            pieces.append(text[pos : span.start])
            pos = span.end
        if not pieces:
            return None
        pieces.append(text[pos:])
        leftover, fenced = clean_leftover(pieces)
        if fenced:
            calls = [replace(c, repairs=(*c.repairs, "code_fence")) for c in calls]
        content = "\n".join(a for a in [*answers, leftover] if a)
        return ParseResult(content=content, calls=tuple(calls))
