"""Llama 3.1/3.2/3.3 JSON tool calls: ``{"name": ..., "parameters": {...}}``.

The call is either bare at the very start of the message (``arm_at_start``) or
after ``<|python_tag|>``; several calls may be separated by ``;``. After
``<|python_tag|>`` a built-in call such as ``brave_search.call(query="x")`` is
read too.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._pycalls import parse_pythonic
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, tool_dicts
from tether.grammar.formats.base import JsonNameSlot, ParseResult, TemplateMatch, ToolSpec

__all__ = ["Llama3JsonFormat"]


class Llama3JsonFormat(JsonPayloadFormat):
    name = "llama3_json"
    tool_result = ("", "")
    tool_result_role = "ipython"
    detection = (
        TemplateMatch(100, pattern=r'<\|python_tag\|>|"parameters": dictionary|\{"name": function name'),
    )
    description = 'Llama 3.x: {"name": ..., "parameters": {...}} bare or after <|python_tag|>'
    begin = ("<|python_tag|>",)
    end = ()
    name_slot = JsonNameSlot(("name",), args_key="parameters")
    arm_at_start = True
    separators = ";"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n\n".join(dumps({"type": "function", "function": d}) for d in tool_dicts(tools))
        return (
            "Given the following functions, please respond with a JSON for a function call with its proper "
            "arguments that best answers the given prompt.\n\n"
            'Respond in the format {"name": function name, "parameters": dictionary of argument name and its '
            "value}. Do not use variables.\n\n" + listing
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "; ".join(dumps(self.call_object(c)) for c in calls)
        # bare JSON is only a call at the start of a message; after prose it needs the tag
        return f"{content}\n{self.begin[0]}{rendered}" if content else rendered

    def parse_fallback(self, body: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        calls = parse_pythonic(body, tools)
        return None if calls is None else ParseResult(content="", calls=calls)
