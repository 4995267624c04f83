"""FunctionGemma tool calls.

    <start_function_call>call:get_weather{city:<escape>Paris<escape>,days:3}<end_function_call>

String values sit between ``<escape>`` tokens; numbers, booleans, nested objects
(same syntax) and lists are written bare. Parsed with a lark grammar; an
unescaped bare word is read as a string (repair ``unescaped_string``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

from lark import Lark, Token, Tree
from lark.exceptions import LarkError

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, join_content, split_region
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.rescue import make_call

__all__ = ["FunctionGemmaFormat", "to_gemma"]

ESCAPE = "<escape>"
_GRAMMAR = r"""
start: call+
call: "call" ":" NAME obj
obj: "{" [pair ("," pair)*] [","] "}"
pair: KEY ":" value
?value: ESCAPED      -> escaped
      | obj
      | list
      | ATOM         -> atom
list: "[" [value ("," value)*] [","] "]"
NAME: /[A-Za-z_][\w.\-]*/
KEY: /[A-Za-z_$][\w.\-$]*/
ESCAPED: /<escape>[\s\S]*?<escape>/
ATOM: /[^,{}\[\]<:\s](?:[^,{}\[\]<]*[^,{}\[\]<\s])?/
%ignore /\s+/
"""
_NUMBER = re.compile(r"-?(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?")
_ATOMS: dict[str, Any] = {"true": True, "false": False, "null": None}


@cache
def _parser() -> Lark:
    return Lark(_GRAMMAR, parser="lalr", maybe_placeholders=False)


class _Reader:
    def __init__(self) -> None:
        self.repairs: list[str] = []

    def value(self, node: Tree[Token] | Token) -> Any:
        if isinstance(node, Token):
            return str(node)
        kind = str(node.data)
        kids = node.children
        if kind == "escaped":
            return str(kids[0])[len(ESCAPE) : -len(ESCAPE)]
        if kind == "atom":
            text = str(kids[0]).strip()
            if text in _ATOMS:
                return _ATOMS[text]
            if _NUMBER.fullmatch(text):
                return float(text) if any(c in text for c in ".eE") else int(text)
            self.repairs.append("unescaped_string")
            return text
        if kind == "list":
            return [self.value(k) for k in kids]
        return {str(p.children[0]): self.value(p.children[1]) for p in kids if isinstance(p, Tree)}


def to_gemma(value: Any, *, upper_types: bool = False) -> str:
    """A value in FunctionGemma's notation (``upper_types``: JSON-schema type names as ``STRING``…)."""
    if isinstance(value, str):
        return f"{ESCAPE}{value}{ESCAPE}"
    if isinstance(value, bool) or value is None:
        return json.dumps(value)
    if isinstance(value, int | float):
        return repr(value)
    if isinstance(value, Mapping):
        items = (
            f"{k}:{to_gemma(v.upper() if upper_types and k == 'type' and isinstance(v, str) else v, upper_types=upper_types)}"
            for k, v in value.items()
        )
        return "{" + ",".join(items) + "}"
    return "[" + ",".join(to_gemma(v, upper_types=upper_types) for v in value) + "]"


class FunctionGemmaFormat(JsonPayloadFormat):
    name = "gemma"
    detection = (
        TemplateMatch(20, ("<start_function_call>",)),
        TemplateMatch(20, ("<start_function_declaration>",)),
    )
    description = "FunctionGemma: <start_function_call>call:NAME{k:<escape>v<escape>}<end_function_call>"
    begin = ("<start_function_call>",)
    end = ("<end_function_call>",)
    name_slot = InlineNameSlot(prefix="call:", terminators=("{",))
    rescue_at_start = False
    args_encoding = "gemma"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        decls = "".join(
            "<start_function_declaration>declaration:"
            + tool.name
            + to_gemma(
                {"description": tool.description, "parameters": dict(tool.parameters)}, upper_types=True
            )
            + "<end_function_declaration>"
            for tool in tools
        )
        return "You are a model that can do function calling with the following functions" + decls

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        rendered = "".join(
            f"<start_function_call>call:{c.name}{to_gemma(dict(c.arguments))}<end_function_call>"
            for c in calls
        )
        return join_content(content, rendered)

    def render_tool_result(self, name: str, content: str) -> tuple[str, str]:
        try:
            value = json.loads(content)
        except ValueError:
            value = None
        fields = value if isinstance(value, dict) else {"value": content}
        return "user", f"<start_function_response>response:{name}{to_gemma(fields)}<end_function_response>"

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        if not marked:
            return None
        closed = self.closed(region)
        attempts: list[tuple[str, tuple[str, ...]]] = [(body.strip(), ())]
        if not closed:
            opened = body.count("{") - body.count("}")
            attempts.append((body.strip() + "}" * max(opened, 0), ("truncated_closed",)))
        for text, repairs in attempts:
            try:
                tree = _parser().parse(text)
            except LarkError:
                continue
            calls = []
            for node in tree.children:
                if not isinstance(node, Tree):
                    continue
                reader = _Reader()
                args = reader.value(node.children[1])
                call = make_call(
                    str(node.children[0]), args, tools, raw=region, repairs=(*repairs, *reader.repairs)
                )
                if call is None:
                    return None
                calls.append(call)
            return ParseResult(content="", calls=tuple(calls))
        return super().parse_region(region, tools)
