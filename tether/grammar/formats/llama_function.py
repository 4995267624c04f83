"""``<function=NAME>{json}</function>`` tool calls (Llama 3.1 custom-tool style, Functionary v3.1).

    <function=get_weather>{"city": "Paris"}</function>

The arguments object is read with the JSON-aware scanner, so a ``}`` or ``"``
inside a string value neither truncates nor empties the arguments (both are
known failures of other proxies).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region, tool_dicts
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.rescue import clean_leftover, find_json_values, make_call

__all__ = ["LlamaFunctionFormat"]

_NAME = re.compile(r"\s*([^\s>{]+)\s*(>?)")


class LlamaFunctionFormat(JsonPayloadFormat):
    name = "llama_function"
    detection = (TemplateMatch(90, ("<function=",)),)
    description = "Llama 3.1 / Functionary: <function=NAME>{json arguments}</function>"
    begin = ("<function=",)
    end = ("</function>",)
    name_slot = InlineNameSlot(prefix="", terminators=(">",))
    rescue_at_start = False

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(
            f"Use the function '{d['name']}' to: {d['description']}\n{dumps(d)}" for d in tool_dicts(tools)
        )
        return (
            "You have access to the following functions:\n\n" + listing + "\n\n"
            "If you choose to call a function ONLY reply in the following format:\n"
            '<function=example_function_name>{"example_name": "example_value"}</function>\n'
            "Put the entire function call reply on one line."
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "".join(f"<function={c.name}>{dumps(dict(c.arguments))}</function>" for c in calls)
        return join_content(content, rendered)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        m = _NAME.match(body)
        if not marked or m is None:
            return None
        repairs = [] if m.group(2) else ["missing_name_terminator"]
        for span in find_json_values(body, m.end()):
            if not isinstance(span.value, dict):
                continue
            call = make_call(m.group(1), span.value, tools, raw=region, repairs=(*repairs, *span.repairs))
            if call is None:
                return None
            content, _ = clean_leftover([body[m.end() : span.start], body[span.end :]])
            return ParseResult(content=content, calls=(call,))
        if body[m.end() :].strip():
            return None
        if not self.closed(region):
            repairs.append("truncated_closed")  # "<function=f>" cut off: keep only if {} is valid
        call = make_call(m.group(1), {}, tools, raw=region, repairs=repairs)
        return None if call is None else ParseResult(content="", calls=(call,))
