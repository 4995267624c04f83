"""Pythonic tool calls (Llama 3.2/4 pythonic, LFM2): ``[get_weather(city="Paris"), now()]``.

LFM2 wraps the list in ``<|tool_call_start|>...<|tool_call_end|>``; Llama writes it
bare at the start of the message (``arm_at_start``). The list is parsed with a lark
grammar into plain values; nothing is evaluated. Accepted: keyword and positional
arguments (mapped to the schema's property order), Python and JSON literals,
lists, tuples, dicts, bare identifiers as strings, a cut-off list closed when the
calls then validate.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._pycalls import parse_pythonic, py_literal
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region, tool_dicts
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.rescue import (
    after_fence,
    armed_region_end,
    clean_leftover,
    extract_json_calls,
    find_tool,
    pythonic_arm,
    scan_value_end,
    skip_marker,
)

__all__ = ["PythonicFormat", "parse_pythonic"]

_CALL_START = re.compile(r"\[\s*[A-Za-z_][\w.\-]*\s*\(")


def _unfence(body: str) -> tuple[str, bool]:
    stripped = body.strip()
    if not stripped.startswith("```"):
        return body, False
    rest = after_fence(stripped)
    inner = rest if isinstance(rest, str) else ""
    close = inner.rfind("```")
    return (inner[:close] if close >= 0 else inner), True


class PythonicFormat(JsonPayloadFormat):
    name = "pythonic"
    tool_result = ("<|tool_response_start|>", "<|tool_response_end|>")
    detection = (
        TemplateMatch(60, ("<|tool_call_start|>",)),  # LFM2
        TemplateMatch(60, ("<|tool_list_start|>",)),
        TemplateMatch(110, pattern=r"\[func_name\d*\("),  # Llama 3.2/4 pythonic instructions
    )
    description = (
        'Llama 3.2/4 pythonic, LFM2: [get_weather(city="Paris"), ...] (optionally in <|tool_call_start|>)'
    )
    begin = ("<|tool_call_start|>",)
    end = ("<|tool_call_end|>",)
    name_slot = InlineNameSlot(prefix="[", terminators=("(",))
    arm_at_start = True
    args_encoding = "pythonic"

    def arm(self, head: str) -> bool | None:
        return pythonic_arm(head)

    def region_end(self, region: str, final: bool) -> int | None:
        if skip_marker(region, self.begin):
            return super().region_end(region, final)
        return armed_region_end(region, final)

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        return (
            "You have access to the following functions. To call functions, reply with a python list "
            'of calls only, e.g. [func_name1(param_name1="value1", param_name2=2), func_name2()].\n'
            f"<|tool_list_start|>{dumps(tool_dicts(tools))}<|tool_list_end|>"
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        def call_text(c: ToolCall) -> str:
            args = ", ".join(f"{k}={py_literal(v)}" for k, v in c.arguments.items())
            return f"{c.name}({args})"

        rendered = "<|tool_call_start|>[" + ", ".join(call_text(c) for c in calls) + "]<|tool_call_end|>"
        return join_content(content, rendered)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        body, fenced = _unfence(body)
        extra = ("code_fence",) if fenced else ()
        calls = parse_pythonic(body, tools)
        if calls is not None and not marked and not all(_plausible(c, tools) for c in calls):
            return None  # "[Note(s)] ..." opening a prose answer is not a call
        if calls is not None:
            return ParseResult(content="", calls=tuple(_with(c, extra) for c in calls))
        m = _CALL_START.search(body)
        if marked and m is not None:
            end = scan_value_end(body, m.start()) or len(body)
            calls = parse_pythonic(body[m.start() : end], tools)
            if calls is not None:
                content, _ = clean_leftover([body[: m.start()], body[end:]])
                return ParseResult(content=content, calls=calls)
        return extract_json_calls(body, tools, markerless=not marked) if marked or fenced else None


def _plausible(call: ToolCall, tools: Sequence[ToolSpec]) -> bool:
    offered = find_tool(tools, call.name) is not None
    return offered or not {"positional_arguments", "bare_identifier"} & set(call.repairs)


def _with(call: ToolCall, repairs: tuple[str, ...]) -> ToolCall:
    if not repairs:
        return call
    return call.with_repairs(*repairs)
