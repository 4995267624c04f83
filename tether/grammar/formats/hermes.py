"""Hermes / Qwen2.5 / Qwen3 / Granite 4 JSON tool calls.

    <tool_call>
    {"name": "get_weather", "arguments": {"city": "Paris"}}
    </tool_call>

Rescue: JSON anywhere in the region (code fences, prose, several objects), the
usual alternative shapes, Qwen3-Coder XML inside ``<tool_call>``, and a bare or
fenced JSON call at the very start of a message that forgot the tags.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content
from tether.grammar.formats.base import JsonNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.formats.qwen3_coder import parse_xml_calls

__all__ = ["HermesFormat", "tools_in_xml_tags"]


def tools_in_xml_tags(tools: Sequence[ToolSpec], call_syntax: str) -> str:
    """The tools block Qwen-family templates write (Hermes, GLM-4.5): the OpenAI schemas, one a line,
    inside ``<tools></tools>``, then ``call_syntax``, how the family writes a call."""
    lines = "\n".join(dumps(t.to_openai()) for t in tools)
    return (
        "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n"
        f"<tools>\n{lines}\n</tools>\n\n{call_syntax}"
    )


_CALL_SYNTAX = (
    "For each function call, return a json object with function name and arguments within "
    "<tool_call></tool_call> XML tags:\n"
    '<tool_call>\n{"name": <function-name>, "arguments": <args-json-object>}\n</tool_call>'
)


class HermesFormat(JsonPayloadFormat):
    name = "hermes"
    tool_result = ("<tool_response>\n", "\n</tool_response>")
    detection = (TemplateMatch(80, ("<tool_call>",)),)
    description = 'Hermes / Qwen2.5 / Qwen3: <tool_call>{"name": ..., "arguments": {...}}</tool_call>'
    begin = ("<tool_call>",)
    end = ("</tool_call>",)
    name_slot = JsonNameSlot(("name",))

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return tools_in_xml_tags(tools, _CALL_SYNTAX)

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "\n".join(f"<tool_call>\n{dumps(self.call_object(c))}\n</tool_call>" for c in calls)
        return join_content(content, rendered)

    def parse_fallback(self, body: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        return parse_xml_calls(body, tools, truncated=True)
