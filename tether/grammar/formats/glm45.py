"""GLM-4.5 / 4.6 / 4.7 tool calls: name line, then key/value tag pairs.

    <tool_call>get_weather
    <arg_key>city</arg_key>
    <arg_value>Paris</arg_value>
    </tool_call>

GLM-4.7 drops the newlines. Values are text (non-strings are written as JSON by
the template) and are read by the tool's schema types.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.coercion import value_from_text
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.formats.hermes import tools_in_xml_tags
from tether.grammar.rescue import clean_leftover, find_tool, make_call

__all__ = ["Glm45Format"]

_NAME = re.compile(r"\s*([^\s<{]+)[ \t]*\n?")
_KEY = re.compile(r"<arg_key>(.*?)</arg_key>\s*", re.S)
_VALUE_OPEN = "<arg_value>"
_VALUE_CLOSE = "</arg_value>"
_CALL_SYNTAX = (
    "For each function call, output the function name and arguments within the following XML format:\n"
    "<tool_call>{function-name}\n<arg_key>{arg-key-1}</arg_key>\n<arg_value>{arg-value-1}</arg_value>\n"
    "...\n</tool_call>"
)


def _pairs(text: str, props: Mapping[str, Any], repairs: list[str]) -> tuple[dict[str, Any], int]:
    args: dict[str, Any] = {}
    pos = 0
    while (m := _KEY.match(text, pos)) is not None:
        key = m.group(1).strip()
        start = m.end()
        if not text.startswith(_VALUE_OPEN, start):
            break
        start += len(_VALUE_OPEN)
        close = text.find(_VALUE_CLOSE, start)
        nxt = text.find("<arg_key>", start)
        if close < 0 or 0 <= nxt < close:
            repairs.append("missing_end_tag")
            close = nxt if nxt >= 0 else len(text)
            pos = close
        else:
            pos = close + len(_VALUE_CLOSE)
        args[key] = value_from_text(text[start:close], props.get(key))
        while pos < len(text) and text[pos].isspace():
            pos += 1
    return args, pos


class Glm45Format(JsonPayloadFormat):
    name = "glm45"
    tool_result = ("<tool_response>\n", "\n</tool_response>")
    tool_result_role = "observation"
    detection = (TemplateMatch(30, ("<arg_key>",)),)
    description = "GLM-4.5/4.6/4.7: <tool_call>NAME<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>"
    begin = ("<tool_call>",)
    end = ("</tool_call>",)
    name_slot = InlineNameSlot(prefix="", terminators=("\n", "<arg_key>", "</tool_call>"))
    rescue_at_start = False
    args_encoding = "xml"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return tools_in_xml_tags(tools, _CALL_SYNTAX)

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        def one(call: ToolCall) -> str:
            pairs = "".join(
                f"<arg_key>{k}</arg_key>\n<arg_value>{v if isinstance(v, str) else dumps(v)}</arg_value>\n"
                for k, v in call.arguments.items()
            )
            return f"<tool_call>{call.name}\n{pairs}</tool_call>"

        return join_content(content, "\n".join(one(c) for c in calls))

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        if not marked:
            return None
        m = _NAME.match(body)
        if m is None:
            return super().parse_region(region, tools)
        name = m.group(1)
        tool = find_tool(tools, name)
        props: Mapping[str, Any] = (tool.parameters.get("properties") or {}) if tool else {}
        repairs: list[str] = []
        args, pos = _pairs(body[m.end() :], props, repairs)
        rest = body[m.end() + pos :]
        if not args and rest.strip():
            return super().parse_region(region, tools)
        if not self.closed(region):
            repairs.append("truncated_closed")  # cut off: keep only if what we have validates
        call = make_call(name, args, tools, raw=region, repairs=repairs)
        if call is None:
            return None
        content, _ = clean_leftover([rest])
        return ParseResult(content=content, calls=(call,))
