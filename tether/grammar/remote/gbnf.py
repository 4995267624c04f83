"""Layer 0 as llama-server understands it: GBNF, lazily armed by the format's markers.

Built from the same declaration as the embedded engine's automata (:mod:`tether.grammar.plan`):

* a whole-reply format (generic): the grammar holds the reply from its first token, a call list
  whose names are the offered ones, or (``tool_choice: auto``) a text answer;
* a marker format: a lazy grammar whose triggers are the format's ``begin`` markers; once one
  appears the call that follows names an offered tool (strict: arguments valid for its schema).
  A JSON-slot format with an end marker holds calls only until the reply ends (parallel calls
  each behind their own marker); an inline-name format frees the text after the name;
* ``tool_choice`` required or named: not lazy, the reply starts with the marker;
* a markerless format (pythonic, bare JSON) under ``auto`` gets no grammar: nothing marks where
  a call begins, so only the post-hoc guard applies there.

The name re-pick and the argument repair are whole-output grammars (a name; one object).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from tether.grammar.formats.base import InlineNameSlot, JsonNameSlot, ToolSpec
from tether.grammar.remote.gbnf_schema import GbnfBuilder, literal
from tether.grammar.spec import JsonSpec, NameChoiceSpec, OutputSpec, ReplySpec

__all__ = ["GbnfGrammar", "compile_gbnf"]

# llama.cpp's common_grammar_trigger_type: TOKEN, WORD, PATTERN, PATTERN_FULL.
_TRIGGER_WORD = 1
_MAX_EXTRA_CALLS = 15  # as layer 0's call list
_QUOTE = literal('"')


@dataclass(frozen=True)
class GbnfGrammar:
    """A grammar for llama-server's ``/completion``; ``triggers`` arm it lazily when given."""

    grammar: str
    triggers: tuple[str, ...] = ()

    def request_fields(self) -> dict[str, Any]:
        """The ``/completion`` body fields that apply it."""
        fields: dict[str, Any] = {"grammar": self.grammar}
        if self.triggers:
            fields["grammar_lazy"] = True
            fields["grammar_triggers"] = [{"type": _TRIGGER_WORD, "value": t} for t in self.triggers]
            # A trigger that is one token must be preserved, or llama-server refuses the request;
            # the server keeps only those that tokenize to a single token.
            fields["preserved_tokens"] = list(self.triggers)
        return fields


def compile_gbnf(spec: OutputSpec) -> GbnfGrammar | None:
    """The grammar for ``spec``; None where no grammar applies (markerless format under auto)."""
    g = GbnfBuilder()
    if isinstance(spec, NameChoiceSpec):
        return GbnfGrammar(g.text(" | ".join(literal(n) for n in spec.names)))
    if isinstance(spec, JsonSpec):
        return GbnfGrammar(g.text(_value(g, spec)))
    return _reply(g, spec)


def _value(g: GbnfBuilder, spec: JsonSpec) -> str:
    """One JSON value of ``spec``: its schema's rules, or any object."""
    return "object" if spec.schema is None else g.arguments(spec.schema, spec.hint)


def _args(g: GbnfBuilder, tool: ToolSpec, spec: ReplySpec) -> str:
    return g.arguments(tool.parameters, tool.name) if spec.mode == "strict" else "object"


def _reply(g: GbnfBuilder, spec: ReplySpec) -> GbnfGrammar | None:
    fmt = spec.fmt
    if fmt.whole_reply is not None:
        r = fmt.whole_reply
        # A structured answer's value takes the text's place in the envelope.
        value = f"{_QUOTE} char+ {_QUOTE}" if spec.answer is None else _value(g, spec.answer)
        answer = g.rule("answer", f"{literal(r.answer_open)} {value} {literal(r.answer_close)}")
        if spec.answer_only:
            return GbnfGrammar(g.text(answer))
        named = [
            f"{literal(t.name)} {literal(r.args_open)} {_args(g, t, spec)} {literal(r.call_close)}"
            for t in spec.tools
        ]
        call = g.rule("call", f"{literal(r.call_open)} ( {' | '.join(named)} )")
        more = f" ( {literal(r.call_sep)} {call} ){{0,{_MAX_EXTRA_CALLS}}}" if spec.parallel else ""
        calls = g.rule("calls", f"{literal(r.calls_open)} {call}{more} {literal(r.calls_close)}")
        return GbnfGrammar(g.text(calls if spec.required else f"{calls} | {answer}"))
    if spec.answer_only:
        # Nothing to hold but a structured answer: the guard drops any call such a reply makes.
        return None if spec.answer is None else GbnfGrammar(g.text(_value(g, spec.answer)))
    markers = fmt.begin
    if not markers and not spec.required and spec.answer is None:
        return None
    slot = fmt.name_slot
    opener = _alt_literals(markers) if markers else ""
    if isinstance(slot, JsonNameSlot):
        region = f"{opener} {_json_region(g, slot, spec)}"
        if fmt.end:
            # With an end marker the calls are the rest of the reply, each behind its own marker.
            one = g.rule("tool-call", f"{region} gap {_alt_literals(fmt.end)}")
            body = f"{one} ( gap {one} ){{0,{_MAX_EXTRA_CALLS}}}" if spec.parallel else one
        else:
            body = region
    else:
        body = f"{opener} {_inline_region(g, slot, spec)}"
    if spec.answer is not None and not spec.required:
        # Held from the first token, not lazily: the format's calls or the structured answer.
        return GbnfGrammar(g.text(f"( {body.strip()} ) | {_value(g, spec.answer)}"))
    return GbnfGrammar(g.text(body.strip()), () if spec.required else tuple(markers))


def _json_region(g: GbnfBuilder, slot: JsonNameSlot, spec: ReplySpec) -> str:
    key, args_key = json.dumps(slot.keys[0]), json.dumps(slot.args_key)
    named = [
        f"{literal(t.name)} {_QUOTE} ws {literal(',')} ws {literal(args_key)} ws {literal(':')} ws "
        f"{_args(g, t, spec)}"
        for t in spec.tools
    ]
    call = (
        f"{literal('{')} ws {literal(key)} ws {literal(':')} ws {_QUOTE} ( {' | '.join(named)} ) "
        f"ws {literal('}')}"
    )
    if slot.list_wrapped:
        more = f" ( ws {literal(',')} ws {call} )*" if spec.parallel else ""
        call = f"{literal('[')} ws {call}{more} ws {literal(']')}"
    return "gap " + g.rule("call", call)


def _inline_region(g: GbnfBuilder, slot: InlineNameSlot, spec: ReplySpec) -> str:
    strict = spec.mode == "strict" and spec.fmt.args_encoding == "json"
    end = _alt_literals(slot.terminators)
    named = [f"{literal(t.name)} {end}" + (f" ws {_args(g, t, spec)}" if strict else "") for t in spec.tools]
    # After the name (and strict arguments) the format's own syntax follows: any text.
    free = g.rule("free-text", r"[^\x00]*")
    return f"{literal(slot.prefix)} ( {' | '.join(named)} ) {free}"


def _alt_literals(texts: tuple[str, ...]) -> str:
    options = [literal(t) for t in texts]
    return options[0] if len(options) == 1 else "( " + " | ".join(options) + " )"
