"""Phi-4-mini and Granite 3.x tool calls: a JSON list after ``<|tool_call|>``.

    <|tool_call|>[{"name": "get_weather", "arguments": {"city": "Paris"}}]<|/tool_call|>

Granite 3.x writes no closing tag; the region then runs to the end of the reply
(prose after the list is kept as content).
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, tool_dicts
from tether.grammar.formats.base import JsonNameSlot, TemplateMatch, ToolSpec

__all__ = ["Phi4Format"]


class Phi4Format(JsonPayloadFormat):
    name = "phi4"
    tool_result = ("<|tool_response|>", "<|/tool_response|>")
    detection = (TemplateMatch(70, ("<|tool_call|>",)),)  # Phi-4-mini, Granite 3
    description = 'Phi-4-mini / Granite 3: <|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>'
    begin = ("<|tool_call|>",)
    end = ("<|/tool_call|>",)
    name_slot = JsonNameSlot(("name",), list_wrapped=True)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return (
            "You are a helpful assistant with access to the following tools. When a tool is required, "
            'respond only with <|tool_call|>[{"name": ..., "arguments": {...}}]<|/tool_call|>.\n'
            f"<|tool|>{dumps(tool_dicts(tools))}<|/tool|>"
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "<|tool_call|>" + dumps([self.call_object(c) for c in calls]) + "<|/tool_call|>"
        return join_content(content, rendered)
