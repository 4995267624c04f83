"""From a format declaration, offered tools and a mode to the automaton that guards tool calls.

The format's declaration is the only source of markers and name positions: a
``JsonNameSlot`` format gets ``{"name": "<offered name>"…``, an
``InlineNameSlot`` format gets ``<prefix><offered name><terminator>``, and a format
that declares a ``WholeReply`` (generic) gets a whole-reply grammar built from its
pieces (a call list or a text answer).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from typing import Literal as Lit

from tether.grammar.atoms import AnyTail, JsonString, Literal, Ws
from tether.grammar.automata import Automaton, Choice, NameSwitch, Seq, Star
from tether.grammar.formats.base import InlineNameSlot, JsonNameSlot, ToolCallFormat, ToolSpec, WholeReply
from tether.grammar.jsonvalue import JsonValue
from tether.grammar.regex import RegexCompiler

__all__ = ["ConstraintPlan", "Mode", "build_plan", "json_plan", "name_choice_plan", "value_automaton"]

Mode = Lit["names", "strict"]


@dataclass(frozen=True)
class ConstraintPlan:
    """``automaton`` guards either the whole reply (``from_start``) or each region after a marker."""

    automaton: Automaton
    markers: tuple[bytes, ...]
    from_start: bool
    arm_at_start: bool
    strict_args: bool
    list_close: bytes | None = None  # whole-reply plans: the bytes that close the call list


def _args(tool: ToolSpec, mode: Mode, regexes: RegexCompiler) -> Automaton:
    if mode == "strict":
        return regexes.schema_part(tool.parameters)
    return JsonValue(object_only=True)


def _whole_reply(
    reply: WholeReply,
    tools: Sequence[ToolSpec],
    mode: Mode,
    regexes: RegexCompiler,
    *,
    required: bool,
    parallel: bool,
    answer: Automaton | None,
) -> Automaton:
    conts: dict[str, Automaton] = {
        t.name: Seq(Literal(reply.args_open), _args(t, mode, regexes), Literal(reply.call_close))
        for t in tools
    }
    call = Seq(Literal(reply.call_open), NameSwitch(conts))
    more: list[Automaton] = [Star(Seq(Literal(reply.call_sep), call), max_items=15)] if parallel else []
    calls = Seq(Literal(reply.calls_open), call, *more, Literal(reply.calls_close))
    if required:
        return calls
    # The answer in the format's envelope: a text, or a structured answer's value in the text's place
    # (the call-or-answer point is the same either way).
    value = JsonString(nonempty=True) if answer is None else answer
    return Choice(calls, Seq(Literal(reply.answer_open), value, Literal(reply.answer_close)))


def _json_slot(
    slot: JsonNameSlot, tools: Sequence[ToolSpec], mode: Mode, regexes: RegexCompiler
) -> tuple[Automaton, bool]:
    key = slot.keys[0]
    strict = mode == "strict"
    conts: dict[str, Automaton] = {}
    for t in tools:
        if strict:
            conts[t.name] = Seq(
                Literal(f'", {json.dumps(slot.args_key)}: '), regexes.schema_part(t.parameters), Literal("}")
            )
        else:
            conts[t.name] = Literal('"')
    opener = "[" if slot.list_wrapped else ""
    body = Seq(Ws(), Literal(f'{opener}{{{json.dumps(key)}: "'), NameSwitch(conts), AnyTail())
    return body, strict


def _inline_slot(
    fmt: ToolCallFormat, slot: InlineNameSlot, tools: Sequence[ToolSpec], mode: Mode, regexes: RegexCompiler
) -> tuple[Automaton, bool]:
    strict = mode == "strict" and fmt.args_encoding == "json"
    terminators: list[Automaton] = [Literal(t) for t in slot.terminators]
    end: Automaton = terminators[0] if len(terminators) == 1 else Choice(*terminators)
    conts: dict[str, Automaton] = {
        t.name: Seq(end, Ws(), regexes.schema_part(t.parameters)) if strict else end for t in tools
    }
    return Seq(Literal(slot.prefix), NameSwitch(conts), AnyTail()), strict


def build_plan(
    fmt: ToolCallFormat,
    tools: Sequence[ToolSpec],
    mode: Mode,
    regexes: RegexCompiler,
    *,
    required: bool = False,
    parallel: bool = True,
    answer: Automaton | None = None,
) -> ConstraintPlan:
    """The guard for one request. ``required`` (tool_choice required or named) arms from the first token;
    ``answer``: a text answer must be this value (a structured reply), so the grammar holds the reply
    from its first token: a call or that value (in a whole-reply format's envelope)."""
    if not tools:
        raise ValueError("a constraint needs at least one offered tool")
    if fmt.whole_reply is not None:
        reply = fmt.whole_reply
        auto = _whole_reply(reply, tools, mode, regexes, required=required, parallel=parallel, answer=answer)
        return ConstraintPlan(auto, (), True, False, mode == "strict", reply.calls_close.encode())
    slot = fmt.name_slot
    if isinstance(slot, JsonNameSlot):
        region, strict = _json_slot(slot, tools, mode, regexes)
    else:
        region, strict = _inline_slot(fmt, slot, tools, mode, regexes)
    markers = tuple(m.encode() for m in fmt.begin)
    if answer is not None and not required:
        # Held from the first token: the format's call (its marker, or a markerless call's own
        # opening) or the structured answer.
        call = _alt(markers, region) if markers else region
        return ConstraintPlan(Choice(call, answer), markers, True, False, strict)
    if required and markers:
        # Forced call: the marker itself is part of the grammar from the first token.
        return ConstraintPlan(_alt(markers, region), markers, True, False, strict)
    return ConstraintPlan(region, markers, False, fmt.arm_at_start, strict)


def _alt(markers: tuple[bytes, ...], region: Automaton) -> Automaton:
    """One of ``markers``, then ``region``."""
    opener = Choice(*(Literal(m) for m in markers)) if len(markers) > 1 else Literal(markers[0])
    return Seq(opener, region)


def name_choice_plan(names: Sequence[str]) -> ConstraintPlan:
    """The whole reply is exactly one of ``names`` (layer-2 re-pick)."""
    return ConstraintPlan(NameSwitch({n: Literal("") for n in names}), (), True, False, False)


def value_automaton(schema: Mapping[str, Any] | None, regexes: RegexCompiler) -> Automaton:
    """One JSON value valid for ``schema``; None: any JSON object."""
    return JsonValue(object_only=True) if schema is None else regexes.schema_part(schema)


def json_plan(schema: Mapping[str, Any] | None, regexes: RegexCompiler) -> ConstraintPlan:
    """The whole reply is one JSON value valid for ``schema`` (None: any object): a structured reply,
    or the guard's repair of one tool's arguments."""
    return ConstraintPlan(value_automaton(schema, regexes), (), True, False, schema is not None)
