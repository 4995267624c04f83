"""The declaration every tool-call format module fills in.

One ``ToolCallFormat`` per model family is the single source of truth for what a
tool call looks like: its markers drive the streaming detector and the grammar
trigger, its name slot drives the layer-0 name constraint, and its render/parse
methods drive prompt building and parsing. Nothing else keeps a list of markers.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from tether.calls import ToolCall

__all__ = [
    "InlineNameSlot",
    "JsonNameSlot",
    "JsonTextEnvelope",
    "NameSlot",
    "ParseResult",
    "TemplateMatch",
    "ToolCallFormat",
    "ToolSpec",
    "WholeReply",
]


@dataclass(frozen=True)
class ToolSpec:
    """One offered tool, engine- and protocol-neutral."""

    name: str
    description: str = ""
    parameters: Mapping[str, Any] = field(default_factory=lambda: {"type": "object", "properties": {}})
    # Other names the tool is known by (an MCP tool's own name, ``mcp__server__tool``): a call
    # written with one of them resolves to ``name`` (tether.guardrails.names). Never rendered.
    aliases: tuple[str, ...] = ()

    @classmethod
    def from_openai(cls, tool: Mapping[str, Any]) -> ToolSpec:
        """Build from an OpenAI ``{"type": "function", "function": {...}}`` entry."""
        fn = tool.get("function", tool)
        params = fn.get("parameters") or {"type": "object", "properties": {}}
        return cls(name=str(fn["name"]), description=str(fn.get("description") or ""), parameters=params)

    def to_openai(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": dict(self.parameters),
            },
        }


@dataclass(frozen=True)
class JsonNameSlot:
    """The name is the string value of one of ``keys`` in the JSON object after the marker.

    ``args_key`` names the arguments member; ``list_wrapped`` means calls sit in a JSON list
    right after the marker (Mistral v3).
    """

    keys: tuple[str, ...] = ("name",)
    args_key: str = "arguments"
    list_wrapped: bool = False


@dataclass(frozen=True)
class InlineNameSlot:
    """The name starts right after the marker (after ``prefix``) and ends at one of ``terminators``."""

    prefix: str = ""
    terminators: tuple[str, ...] = (">",)


NameSlot = JsonNameSlot | InlineNameSlot


@dataclass(frozen=True)
class JsonTextEnvelope:
    """A plain-text answer wrapped as a JSON string, e.g. ``{"response": "..."}``.

    The streaming detector decodes the string value incrementally so prose still
    streams token by token.
    """

    prefix: str = '{"response": "'
    suffix: str = '"}'


@dataclass(frozen=True)
class TemplateMatch:
    """How a chat template shows that its model speaks a format: every one of ``markers`` appears
    in it (and ``pattern`` matches, when given). The checks of all formats run by ``rank``, lowest
    first (more specific markers before shared ones: several families write ``<tool_call>``)."""

    rank: int
    markers: tuple[str, ...] = ()
    pattern: str | None = None

    def matches(self, template: str) -> bool:
        if not all(m in template for m in self.markers):
            return False
        return self.pattern is None or re.search(self.pattern, template) is not None


@dataclass(frozen=True)
class WholeReply:
    """A format whose whole reply is one JSON object (the generic format): the pieces the layer-0
    grammar is built from, ``{"tool_calls": [{"name": "N", "arguments": {…}}, …]}`` or
    ``{"response": "…"}``."""

    calls_open: str = '{"tool_calls": ['
    call_open: str = '{"name": "'
    args_open: str = '", "arguments": '
    call_close: str = "}"
    call_sep: str = ", "
    calls_close: str = "]}"
    answer_open: str = '{"response": '
    answer_close: str = "}"


@dataclass(frozen=True)
class ParseResult:
    """Tool calls found in a message plus the prose around them."""

    content: str
    calls: tuple[ToolCall, ...] = ()


class ToolCallFormat:
    """Base declaration. Subclasses set the class attributes, implement the render
    methods and the detector hooks (``parse_region``; ``arm`` and ``region_end`` when
    the defaults do not fit). ``parse`` is shared: it runs the streaming detector.

    Attributes:
        name: registry key, e.g. ``"hermes"``.
        begin: strings that open a call region (also special-token texts).
        end: strings that close a call region; empty means the region runs to the end.
        name_slot: where the tool name sits after ``begin``.
        arm_at_start: markerless formats (pythonic, bare JSON): a call may only
            start at the beginning of the assistant message.
        text_envelope: set when plain answers are wrapped in JSON (generic format).
        prompt_owns_tools: the format renders the tools and past calls itself even when the
            chat template could (the generic format: its whole-reply JSON is its own).
        detection: how a chat template shows this format (see ``TemplateMatch``).
        tool_result, tool_result_role: how a past tool result is written back (the text around it,
            and the role of its turn) when the chat template has no tool role.
        whole_reply: the reply is one JSON object, held by the grammar from its first token.
    """

    name: str = ""
    description: str = ""
    begin: tuple[str, ...] = ()
    end: tuple[str, ...] = ()
    name_slot: NameSlot = JsonNameSlot()
    arm_at_start: bool = False
    text_envelope: JsonTextEnvelope | None = None
    prompt_owns_tools: bool = False
    detection: tuple[TemplateMatch, ...] = ()
    tool_result: tuple[str, str] | None = None
    tool_result_role: str = "user"
    whole_reply: WholeReply | None = None
    # How arguments are written after an InlineNameSlot terminator: "json" allows strict mode there.
    args_encoding: str = "json"

    def render_tools(self, tools: Sequence[ToolSpec]) -> str:
        """The system-prompt block that offers ``tools`` when the chat template cannot."""
        raise NotImplementedError

    def render_calls(self, content: str, calls: Sequence[ToolCall]) -> str:
        """Assistant message text for past tool calls (templates without tool support)."""
        raise NotImplementedError

    def render_tool_result(self, name: str, content: str) -> tuple[str, str]:
        """(role, text) for a past tool result when the template has no tool role: ``tool_result``
        wraps it as the family's template does, else ``Result of NAME:`` introduces it."""
        if self.tool_result is None:
            return self.tool_result_role, f"Result of {name}:\n{content}"
        before, after = self.tool_result
        return self.tool_result_role, f"{before}{content}{after}"

    def parse(self, text: str, tools: Sequence[ToolSpec]) -> ParseResult:
        """Tool calls and the prose around them; names that are not offered are kept (the guard resolves them).

        Runs the shared streaming detector over the whole text, so a streamed reply
        and a parsed reply can never disagree. Formats implement the hooks below.
        """
        from tether.grammar.detector import scan

        return scan(self, text, tools)

    # -- hooks used by the shared detector (tether.grammar.detector) ---------------

    def arm(self, head: str) -> bool | None:
        """Could a call start at the beginning of the message? ``head`` is the message
        from its first non-space character. True: a call region starts here; False:
        prose; None: undecided, show me more. Must only depend on a prefix of ``head``
        (once decided, longer heads give the same answer). Default: never."""
        return False

    def region_end(self, region: str, final: bool) -> int | None:
        """Length of the call region at the start of ``region``, or None while unknown.

        ``region`` starts with one of ``begin`` (or is the start of the message for an
        armed start). The detector also ends a region at the next ``begin`` marker and at
        the end of the stream. Must be prefix-stable like :meth:`arm`. Default: through
        the first ``end`` marker after the begin marker.
        """
        skip = next((len(b) for b in self.begin if region.startswith(b)), 0)
        found = [(i, len(e)) for e in self.end if (i := region.find(e, skip)) >= 0]
        if not found:
            return None
        i, n = min(found)
        return i + n

    def closed(self, region: str) -> bool:
        """Whether ``region`` ends with an ``end`` marker; without one the reply stopped inside the
        call, which is kept only if what it holds validates (``truncated_closed``)."""
        return any(region.endswith(e) for e in self.end)

    def parse_region(self, region: str, tools: Sequence[ToolSpec]) -> ParseResult | None:
        """Calls in one call region (markers included) plus leftover prose inside it.

        None means the region holds no call and is kept verbatim as prose.
        """
        raise NotImplementedError
