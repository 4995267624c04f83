"""Qwen3-Coder (also Qwen3.5, Nemotron-3, Seed-OSS) XML-ish tool calls.

    <tool_call>
    <function=get_weather>
    <parameter=city>
    Paris
    </parameter>
    </function>
    </tool_call>

Parameter values are plain text and are read by the tool's schema types (integer,
boolean, object…). Missing closing tags are tolerated; a JSON object in place of
the parameters is accepted too.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from tether.calls import ToolCall
from tether.coercion import value_from_text
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.rescue import clean_leftover, find_json_values, find_tool, make_call

__all__ = ["Qwen3CoderFormat", "parse_xml_calls"]

_FUNCTION = re.compile(r"<function=([^>\n]*)>")
_PARAMETER = re.compile(r"<parameter=([^>\n]*)>")
_FUNCTION_END = "</function>"
_PARAMETER_END = "</parameter>"


def _trim_newlines(value: str) -> str:
    if value.startswith("\n"):
        value = value[1:]
    if value.endswith("\n"):
        value = value[:-1]
    return value


def _parameters(inner: str, props: Mapping[str, Any], repairs: list[str]) -> dict[str, Any] | None:
    starts = list(_PARAMETER.finditer(inner))
    if not starts:
        for span in find_json_values(inner):
            if isinstance(span.value, dict):
                repairs.extend(("json_arguments", *span.repairs))
                return span.value
        return {} if not inner.strip() else None
    args: dict[str, Any] = {}
    for k, m in enumerate(starts):
        stop = starts[k + 1].start() if k + 1 < len(starts) else len(inner)
        close = inner.find(_PARAMETER_END, m.end(), stop)
        if close < 0:
            repairs.append("missing_end_tag")
            close = stop
        key = m.group(1).strip()
        args[key] = value_from_text(_trim_newlines(inner[m.end() : close]), props.get(key))
    return args


def parse_xml_calls(body: str, tools: Sequence[ToolSpec], *, truncated: bool = False) -> ParseResult | None:
    """Every ``<function=NAME>...</function>`` block in ``body``; prose around is content.

    ``truncated``: the reply was cut off, so a last block without ``</function>`` is
    kept only if its arguments validate.
    """
    matches = list(_FUNCTION.finditer(body))
    calls: list[ToolCall] = []
    pieces: list[str] = []
    pos = 0
    for k, m in enumerate(matches):
        stop = matches[k + 1].start() if k + 1 < len(matches) else len(body)
        repairs: list[str] = []
        close = body.find(_FUNCTION_END, m.end(), stop)
        end = close + len(_FUNCTION_END) if close >= 0 else stop
        if close < 0:
            repairs.append("missing_end_tag")
            if truncated and k == len(matches) - 1:
                repairs.append("truncated_closed")
            close = stop
        name = m.group(1).strip()
        tool = find_tool(tools, name)
        props: Mapping[str, Any] = (tool.parameters.get("properties") or {}) if tool else {}
        args = _parameters(body[m.end() : close], props, repairs)
        call = (
            None if args is None else make_call(name, args, tools, raw=body[m.start() : end], repairs=repairs)
        )
        if call is None:
            continue
        pieces.append(body[pos : m.start()])
        pos = end
        calls.append(call)
    if not calls:
        return None
    pieces.append(body[pos:])
    content, _ = clean_leftover(pieces)
    return ParseResult(content=content, calls=tuple(calls))


def render_xml_call(call: ToolCall) -> str:
    params = "".join(
        f"<parameter={key}>\n{value if isinstance(value, str) else dumps(value)}\n</parameter>\n"
        for key, value in call.arguments.items()
    )
    return f"<tool_call>\n<function={call.name}>\n{params}</function>\n</tool_call>"


class Qwen3CoderFormat(JsonPayloadFormat):
    name = "qwen3_coder"
    tool_result = ("<tool_response>\n", "\n</tool_response>")
    detection = (TemplateMatch(40, ("<function=", "<parameter=")),)
    description = (
        "Qwen3-Coder / Qwen3.5: <tool_call><function=NAME><parameter=K>V</parameter></function></tool_call>"
    )
    begin = ("<tool_call>",)
    end = ("</tool_call>",)
    name_slot = InlineNameSlot(prefix="\n<function=", terminators=(">",))
    rescue_at_start = False
    args_encoding = "xml"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        blocks = []
        for tool in tools:
            props: Mapping[str, Any] = tool.parameters.get("properties") or {}
            params = "".join(
                f"<parameter>\n<name>{key}</name>\n<type>{spec.get('type', 'string')}</type>\n"
                f"<description>{spec.get('description', '')}</description>\n</parameter>\n"
                for key, spec in props.items()
            )
            required = dumps(list(tool.parameters.get("required") or []))
            blocks.append(
                f"<function>\n<name>{tool.name}</name>\n<description>{tool.description}</description>\n"
                f"<parameters>\n{params}<required>{required}</required>\n</parameters>\n</function>"
            )
        return (
            "# Tools\n\nYou have access to the following functions:\n\n<tools>\n"
            + "\n".join(blocks)
            + "\n</tools>\n\n"
            "If you choose to call a function ONLY reply in the following format with NO suffix:\n\n"
            "<tool_call>\n<function=example_function_name>\n<parameter=example_parameter_1>\nvalue_1\n"
            "</parameter>\n</function>\n</tool_call>"
        )

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        return join_content(content, "\n".join(render_xml_call(c) for c in calls))

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        if not marked:
            return None
        truncated = not self.closed(region)
        return parse_xml_calls(body, tools, truncated=truncated) or super().parse_region(region, tools)
