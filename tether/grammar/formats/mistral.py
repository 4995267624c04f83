"""Mistral tool calls, both generations.

* ``mistral`` (v11 tokenizer: Mistral Small 3.2, Devstral, Ministral 3, Magistral)::

      [TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}

  optionally with ``[CALL_ID]abc123456`` before ``[ARGS]``; one marker per call.
* ``mistral_v3`` (Mistral 7B v0.3, Nemo)::

      [TOOL_CALLS][{"name": "get_weather", "arguments": {"city": "Paris"}}]

Both read both syntaxes; they differ in what the grammar is told to force. There
is no end marker: a region ends with its JSON value.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region
from tether.grammar.formats.base import (
    InlineNameSlot,
    JsonNameSlot,
    NameSlot,
    ParseResult,
    TemplateMatch,
    ToolSpec,
)
from tether.grammar.rescue import clean_leftover, find_json_values, make_call, skip_marker, value_run_end

__all__ = ["MistralFormat", "MistralV3Format"]

_V11_HEAD = re.compile(r"\s*([^\[\]{}\s]+)\s*(?:\[CALL_ID\]\s*([^\[\s]*)\s*)?\[ARGS\]\s*")
_LOOSE_HEAD = re.compile(r"\s*([A-Za-z_][\w.\-]*)\s*(?=\{)")


class MistralFormat(JsonPayloadFormat):
    name = "mistral"
    tool_result = ("[TOOL_RESULTS]", "[/TOOL_RESULTS]")
    detection = (TemplateMatch(50, ("[TOOL_CALLS]", "[ARGS]")),)
    description = 'Mistral v11 (Small 3.2, Devstral, Ministral 3): [TOOL_CALLS]NAME[ARGS]{"k": "v"}'
    begin = ("[TOOL_CALLS]",)
    end = ()
    name_slot: NameSlot = InlineNameSlot(prefix="", terminators=("[ARGS]",))
    rescue_at_start = False

    def region_end(self, region: str, final: bool) -> int | None:
        skip = skip_marker(region, self.begin)
        i = skip
        while i < len(region) and region[i].isspace():
            i += 1
        if i < len(region) and region[i] in "[{":
            return value_run_end(region, i, final)
        m = _V11_HEAD.match(region, skip)
        if m is None or m.end() == len(region) or region[m.end()] not in "{[":
            return None
        return value_run_end(region, m.end(), final)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return "[AVAILABLE_TOOLS]" + dumps([t.to_openai() for t in tools]) + "[/AVAILABLE_TOOLS]"

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "".join(f"[TOOL_CALLS]{c.name}[ARGS]{dumps(dict(c.arguments))}" for c in calls)
        return join_content(content, rendered)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        if not marked:
            return None
        if body.lstrip()[:1] in ("[", "{"):
            return super().parse_region(region, tools)
        m = _V11_HEAD.match(body) or _LOOSE_HEAD.match(body)
        if m is None:
            return None
        repairs = [] if "[ARGS]" in m.group(0) else ["missing_args_marker"]
        span = next(find_json_values(body, m.end()), None)
        if span is None or not isinstance(span.value, dict) or body[m.end() : span.start].strip():
            return None
        call = make_call(m.group(1), span.value, tools, raw=region, repairs=(*repairs, *span.repairs))
        if call is None:
            return None
        content, _ = clean_leftover([body[span.end :]])
        return ParseResult(content=content, calls=(call,))


class MistralV3Format(MistralFormat):
    name = "mistral_v3"
    detection = (TemplateMatch(51, ("[TOOL_CALLS]",)),)
    description = 'Mistral v3 (7B v0.3, Nemo): [TOOL_CALLS][{"name": ..., "arguments": {...}}]'
    name_slot = JsonNameSlot(("name",), list_wrapped=True)

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        return join_content(content, "[TOOL_CALLS]" + dumps([self.call_object(c) for c in calls]))
