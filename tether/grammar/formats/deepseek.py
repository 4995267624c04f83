"""DeepSeek V3 / R1 tool calls (and the V3.1 variant).

``deepseek_v3``::

    <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>get_weather
    ```json
    {"city": "Paris"}
    ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>

``deepseek_v31`` writes ``<｜tool▁call▁begin｜>get_weather<｜tool▁sep｜>{"city": "Paris"}<｜tool▁call▁end｜>``.
Both read both. Missing ``call end`` tags and unfenced JSON are tolerated.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.calls import ToolCall
from tether.grammar.formats._shared import JsonPayloadFormat, dumps, join_content, split_region
from tether.grammar.formats.base import InlineNameSlot, ParseResult, TemplateMatch, ToolSpec
from tether.grammar.rescue import clean_leftover, find_json_values, make_call

__all__ = ["DeepSeekV3Format", "DeepSeekV31Format"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def _one_call(chunk: str, tools: Sequence[ToolSpec]) -> ToolCall | None:
    left, sep, right = chunk.partition(SEP)
    if not sep:
        return None
    repairs: list[str] = []
    if left.strip() == "function" and right.strip():  # V3: type, then NAME on its own line
        name, _, payload = right.strip().partition("\n")
        if "```" not in payload:
            repairs.append("unfenced_json")
    else:  # V3.1: NAME<｜tool▁sep｜>{json}
        name, payload = left, right
    name = name.strip()
    span = next((s for s in find_json_values(payload) if isinstance(s.value, dict)), None)
    if not name or span is None:
        return None
    return make_call(name, span.value, tools, raw=chunk, repairs=(*repairs, *span.repairs))


class DeepSeekV3Format(JsonPayloadFormat):
    name = "deepseek_v3"
    tool_result = ("<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>")
    detection = (TemplateMatch(10, ("tool▁calls▁begin", "```json")),)
    description = "DeepSeek V3 / R1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME + fenced JSON"
    begin = (CALLS_BEGIN,)
    end = (CALLS_END,)
    name_slot = InlineNameSlot(prefix=f"{CALL_BEGIN}function{SEP}", terminators=("\n",))
    rescue_at_start = False
    args_encoding = "fenced_json"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        listing = "\n".join(dumps(t.to_openai()) for t in tools)
        return (
            "## Tools\n\n### Function\n\nYou have the following functions available:\n\n" + listing + "\n\n"
            f"To call a function reply with {CALLS_BEGIN}{CALL_BEGIN}function{SEP}NAME\n"
            f"```json\n{{ARGUMENTS}}\n```{CALL_END}{CALLS_END}"
        )

    def render_call(self, call: ToolCall) -> str:
        return f"{CALL_BEGIN}function{SEP}{call.name}\n```json\n{dumps(dict(call.arguments))}\n```{CALL_END}"

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        return join_content(content, CALLS_BEGIN + "\n".join(self.render_call(c) for c in calls) + CALLS_END)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        body, marked = split_region(self, region)
        if not marked:
            return None
        chunks = body.split(CALL_BEGIN)
        calls: list[ToolCall] = []
        pieces = [chunks[0]]
        for chunk in chunks[1:]:
            inner, closed, rest = chunk.partition(CALL_END)
            call = _one_call(inner, tools)
            if call is None:
                pieces.append(CALL_BEGIN + chunk)
                continue
            calls.append(call if closed else _flag(call, "missing_end_tag"))
            pieces.append(rest)
        if not calls:
            return super().parse_region(region, tools)
        content, _ = clean_leftover(pieces)
        return ParseResult(content=content, calls=tuple(calls))


class DeepSeekV31Format(DeepSeekV3Format):
    name = "deepseek_v31"
    detection = (TemplateMatch(11, ("tool▁calls▁begin",)),)
    description = "DeepSeek V3.1: <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{json}"
    name_slot = InlineNameSlot(prefix=CALL_BEGIN, terminators=(SEP,))
    args_encoding = "json"

    def render_call(self, call: ToolCall) -> str:
        return f"{CALL_BEGIN}{call.name}{SEP}{dumps(dict(call.arguments))}{CALL_END}"


def _flag(call: ToolCall, repair: str) -> ToolCall:
    return call.with_repairs(repair)
