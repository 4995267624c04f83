"""The one guard pipeline: every layer that runs on a reply's tool calls after sampling.

The server (after the engine), ``Guardrails``/``wrap`` (on a client's responses), the
workflow runner and the evals all run these steps, configured by one ``GuardConfig``:

1. **rescue gate** — a call that parsing had to repair is refused as text when rescue is off;
2. **names** — exact, then layer-1 normalization (``resolve_name``), then a layer-2
   constrained re-pick; a name that does not resolve is never dispatched;
3. **arguments** — Draft 2020-12 validation with lossless recorded coercions
   (:mod:`tether.coercion`), then a schema-constrained repair;
4. **grounding** — with ``tool_choice: auto`` on a fresh user ask, a call whose values the conversation does not
   contain (most of them, or with ``abstain_unsaid`` any required one) is abstained from
   (:mod:`tether.selection.grounded`): a wrong guess is worse than no guess, and the reply
   becomes a text answer; a fitting tool's call whose unsaid values are strings is first asked
   again with them limited to the request's words (``reground_min``, :mod:`tether.guardrails.values`);
5. **duplicates** — an identical call later in the same reply is dropped, and (``end_loops``) so is
   a call identical to one of the previous turn's whose result came back without failing: the
   result is already in the conversation, and a small model otherwise loops on it until its turns
   run out (a changed world in between, such as a read after an edit, is another turn); a call that
   only reorders an earlier one's values or differs in optional values nobody said is merged into
   it (``merge_variants``);
6. **mentioned options** — the lone call of a reply to a fresh user ask gets the ``enum``
   arguments the request names word for word and the model left out ("with pediatrics
   department" → ``department: "Pediatrics"``; :func:`tether.selection.relevance.mentioned_choices`),
   and a single choice nobody named gives way to the one the request names.

The pipeline is written once, without I/O: :func:`guard_steps` is a generator that
*yields* a :class:`PickName` or :class:`FixArguments` request whenever it needs the model
again and receives the answer. :func:`run_guard` drives it with an async ``Regenerator``
(the server's is backed by the scheduler; a client's by its HTTP client), and
:func:`run_guard_sync` with a synchronous one (a sync client's) or none. Each regeneration's token usage is
summed into the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol

from tether.calls import ToolCall
from tether.chat import Message, Usage, reads_as_failure
from tether.errors import QueueFullError, QueueTimeoutError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.arguments import ArgumentChecker, FieldError
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.guardrails.names import resolve_name
from tether.guardrails.policy import invalid_arguments_text
from tether.guardrails.presets import GuardConfig
from tether.guardrails.values import merge_variant, regrounded_tool
from tether.selection.decision import request_text
from tether.selection.grounded import Grounding, check_call, conversation_text, said
from tether.selection.relevance import mentioned_choices

__all__ = [
    "CallStatus",
    "CallVerdict",
    "FixArguments",
    "GuardResult",
    "PickName",
    "Regenerated",
    "Regenerator",
    "Request",
    "guard_steps",
    "run_guard",
    "run_guard_sync",
]

CallStatus = Literal["ok", "unchecked", "unresolved", "invalid"]
# Repairs made while decoding wire arguments (not parse repairs): the argument stage reads ``raw``.
DECODE_REPAIRS = frozenset({"arguments_invalid", "arguments_not_object"})


@dataclass(frozen=True)
class CallVerdict:
    """What the guard concluded about one call: ``written_name`` as the model wrote it;
    ``status`` ``unchecked`` when the preset checks no names; ``errors`` left after coercion
    and repair; ``candidates`` when the name was ambiguous."""

    status: CallStatus
    written_name: str
    errors: tuple[FieldError, ...] = ()
    candidates: tuple[str, ...] = ()

    @property
    def resolved(self) -> bool:
        return self.status != "unresolved"


@dataclass(frozen=True)
class PickName:
    """Ask the model again for the name only, constrained to ``tools``."""

    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...]
    call: ToolCall


@dataclass(frozen=True)
class FixArguments:
    """Ask the model again for ``call``'s arguments only, constrained to ``tool``'s schema."""

    messages: tuple[Message, ...]
    tool: ToolSpec
    call: ToolCall
    errors: tuple[FieldError, ...]


Request = PickName | FixArguments


@dataclass(frozen=True)
class Regenerated:
    """A regenerator's answer: a name (``PickName``), an arguments object (``FixArguments``) or None."""

    value: Any
    usage: Usage = field(default_factory=Usage)


class Regenerator(Protocol):
    """Answers the pipeline's requests with one extra, constrained generation each."""

    async def regenerate(self, request: Request) -> Regenerated: ...


def _request_key(request: Request) -> str:
    """What a request's prompt is made of, besides the conversation (the same within one reply)."""
    call = request.call
    shown = [call.name, call.raw or "", json.dumps(dict(call.arguments), sort_keys=True, default=str)]
    if isinstance(request, PickName):
        return json.dumps(["pick", *shown])
    tool = [request.tool.name, request.tool.description, request.tool.parameters]
    errors = [[e.path, e.message, e.expected, e.schema_fragment, e.got] for e in request.errors]
    return json.dumps(["fix", *shown, tool, errors], sort_keys=True, default=str)


def _asking(
    request: Request, asked: dict[str, Regenerated | None]
) -> Generator[Request, Regenerated | None, tuple[Regenerated | None, Usage]]:
    """Ask the model once per distinct request in a reply: regenerations are greedy, so a repeated
    call (the model's habit) gets the first one's answer without a second generation."""
    key = _request_key(request)
    if key in asked:
        return asked[key], Usage()
    answer = asked[key] = yield request
    return answer, answer.usage if answer is not None else Usage()


@dataclass(frozen=True)
class GuardResult:
    """The calls still standing, in order, each with its verdict; ``refused_text`` holds the text
    of calls the rescue gate turned back into prose; ``usage`` counts the regenerations."""

    checked: tuple[tuple[ToolCall, CallVerdict], ...]
    refused_text: tuple[str, ...] = ()
    interventions: tuple[Intervention, ...] = ()
    usage: Usage = field(default_factory=Usage)

    @property
    def calls(self) -> tuple[ToolCall, ...]:
        return tuple(c for c, _ in self.checked)


def _key(call: ToolCall) -> str:
    return call.name + "\0" + json.dumps(dict(call.arguments), sort_keys=True, ensure_ascii=False)


Steps = Generator[Request, Regenerated | None, GuardResult]


def _answered_last_turn(history: Sequence[Message]) -> frozenset[str]:
    """The calls of the conversation's last assistant turn (by :func:`_key`) whose results end the
    conversation and do not read as failures (a failed call may be retried)."""
    results: dict[str, str] = {}
    k = len(history)
    while k > 0 and history[k - 1].role == "tool":
        k -= 1
        results[history[k].tool_call_id or ""] = history[k].content
    if not results or k == 0 or history[k - 1].role != "assistant":
        return frozenset()
    return frozenset(
        _key(c) for c in history[k - 1].tool_calls if c.id in results and not reads_as_failure(results[c.id])
    )


def guard_steps(
    calls: Sequence[ToolCall],
    tools: Sequence[ToolSpec],
    config: GuardConfig,
    messages: Sequence[Message] = (),
    *,
    checkers: Mapping[str, ArgumentChecker] | None = None,
    can_regenerate: bool = False,
    may_answer: bool = False,
) -> Steps:
    """The pipeline over one reply's ``calls``; yields requests when it needs the model again.

    ``checkers``: argument checkers compiled per tool (built on the fly when not given);
    ``may_answer``: a text answer would do instead (``tool_choice: auto`` on a fresh user ask).
    """
    by_name = {t.name: t for t in tools}
    names = [t.name for t in tools]
    history = tuple(messages)
    notes: list[Intervention] = []
    refused: list[str] = []
    checked: list[tuple[ToolCall, CallVerdict]] = []
    usage = Usage()
    seen: dict[str, int] = {}
    asked: dict[str, Regenerated | None] = {}  # one generation per distinct request
    spoken: Grounding | None = None  # the conversation, prepared on first use
    lone = len({_key(c) for c in calls}) == 1  # one call, however often the model repeated it
    answered = _answered_last_turn(history) if config.end_loops else frozenset()
    for call in calls:
        parse_repairs = [r for r in call.repairs if r not in DECODE_REPAIRS]
        if parse_repairs and not config.rescue:
            notes.append(
                Intervention("rescue_disabled", f"call needed {', '.join(parse_repairs)}", call.name)
            )
            refused.append(call.raw)
            continue
        if parse_repairs:
            notes.append(Intervention("rescued", ", ".join(parse_repairs), call.name, call.raw or None))
        written = call.name
        name: str | None = call.name if call.name in by_name else None
        candidates: tuple[str, ...] = ()
        if name is None and config.resolve:
            res = resolve_name(call.name, names)
            name, candidates = res.name, tuple(res.candidates)
            if name is not None:
                notes.append(
                    Intervention(
                        "name_resolved", f"{res.method} match: {written!r} -> {name!r}", name, written, name
                    )
                )
                call = call.with_repairs("name_resolved", name=name)
        if name is None and config.repick and can_regenerate:
            answer, used = yield from _asking(PickName(history, tuple(tools), call), asked)
            usage = usage + used
            picked = answer.value if answer is not None else None
            name = picked if isinstance(picked, str) and picked in by_name else None
            why = "constrained re-pick" if name else "re-pick found nothing offered"
            notes.append(Intervention("repick", why, name, written, name))
            if name is not None:
                call = call.with_repairs("repicked", name=name)
        if name is None:
            if not (config.resolve or config.repick):
                checked.append((call, CallVerdict("unchecked", written)))  # no name layers: as written
                continue
            detail = f"no offered tool matches {written!r}"
            if candidates:
                detail += f"; ambiguous between {', '.join(candidates)}"
            notes.append(Intervention("name_unresolved", detail, None, written, list(candidates) or None))
            checked.append((call, CallVerdict("unresolved", written, candidates=candidates)))
            continue
        verdict = CallVerdict("ok", written)
        if config.validate:
            checker = (checkers or {}).get(name) or ArgumentChecker(
                by_name[name].parameters, coerce=config.coerce, fill_defaults=config.fill_defaults
            )
            source = call.raw if DECODE_REPAIRS & set(call.repairs) else call.arguments
            check = checker.check(source)
            if check.coercions:
                notes.append(
                    Intervention("args_coerced", "; ".join(check.coercions), name, source, check.arguments)
                )
            if check.defaults:
                notes.append(
                    Intervention("args_defaulted", "; ".join(check.defaults), name, source, check.arguments)
                )
            if check.changed or check.ok:
                call = call.with_repairs(
                    *(["args_coerced"] if check.coercions else []), arguments=check.arguments
                )
            errors = check.errors
            if errors and config.repair and can_regenerate:
                repair = FixArguments(history, by_name[name], call, errors)
                answer, used = yield from _asking(repair, asked)
                usage = usage + used
                fixed = answer.value if answer is not None else None
                if isinstance(fixed, dict) and checker.check(fixed).ok:
                    detail = "regenerated under the schema grammar"
                    notes.append(Intervention("args_repaired", detail, name, dict(call.arguments), fixed))
                    call = call.with_repairs("args_repaired", arguments=fixed)
                    errors = ()
            if errors:
                nudge = invalid_arguments_text(name, errors, schema=dict(by_name[name].parameters))
                notes.append(Intervention("args_invalid", nudge, name, dict(call.arguments), None))
                verdict = CallVerdict("invalid", written, errors)
        if (config.abstain_below > 0 or config.abstain_unsaid) and may_answer:
            spoken = spoken or Grounding.of(conversation_text(history))
            tool = by_name[name]
            found = check_call(call.arguments, tool.parameters, spoken)
            if found.unsaid and config.reground_min > 0 and config.repair and can_regenerate:
                request = request_text(history)
                narrowed = regrounded_tool(call, tool, found.unsaid, request, spoken, config.reground_min)
                if narrowed is not None:
                    reask = FixArguments(history, narrowed[0], call, narrowed[1])
                    answer, used = yield from _asking(reask, asked)
                    usage = usage + used
                    fixed = answer.value if answer is not None else None
                    again = check_call(fixed, tool.parameters, spoken) if isinstance(fixed, dict) else None
                    if isinstance(fixed, dict) and again is not None and not again.unsaid:
                        detail = "asked again within the request's words for " + ", ".join(found.unsaid)
                        notes.append(Intervention("args_grounded", detail, name, dict(call.arguments), fixed))
                        call = call.with_repairs("args_grounded", arguments=fixed)
                        found = again
            detail = ""
            if found.share is not None and found.share < config.abstain_below:
                detail = f"{found.share:.0%} of its values occur in the conversation"
            elif config.abstain_unsaid and found.unsaid:
                detail = f"the conversation does not say its {', '.join(found.unsaid)}"
            if detail:
                notes.append(Intervention("call_abstained", detail, name, dict(call.arguments), None))
                continue
        if config.dedupe:
            key = _key(call)
            if key in answered:
                notes.append(
                    Intervention("call_repeated", "the previous turn made this call and has its result", name)
                )
                continue
            if key in seen:
                notes.append(
                    Intervention("duplicate_dropped", f"call {len(checked)} repeats call {seen[key]}", name)
                )
                continue
        if config.merge_variants and checked:
            spoken = spoken or Grounding.of(conversation_text(history))
            earlier = [c for c, _ in checked]
            merged = merge_variant(call, earlier, by_name[name], spoken, request_text(history))
            if merged is not None:
                at, kept, detail = merged
                notes.append(
                    Intervention("variant_merged", detail, name, dict(call.arguments), dict(kept.arguments))
                )
                seen[_key(kept)] = at  # the merged call's earlier form stays seen: a repeat of it is dropped
                checked[at] = (kept, checked[at][1])
                continue
        if config.dedupe:
            seen[_key(call)] = len(checked)
        if config.fill_mentioned and lone and history and history[-1].role == "user":
            named = mentioned_choices(history[-1].content or "", by_name[name].parameters, required=True)
            spoken = spoken or Grounding.of(conversation_text(history))
            # A named option fills what the model left out, and replaces a single choice nobody named.
            added = {
                k: v
                for k, v in named.items()
                if k not in call.arguments
                or (
                    not isinstance(v, list) and call.arguments[k] != v and not said(call.arguments[k], spoken)
                )
            }
            if added:
                filled = {**call.arguments, **added}
                detail = "the request names " + ", ".join(f"{k}={v!r}" for k, v in added.items())
                notes.append(Intervention("args_filled", detail, name, dict(call.arguments), filled))
                call = call.with_repairs("args_filled", arguments=filled)
        checked.append((call, verdict))
    return GuardResult(tuple(checked), tuple(t for t in refused if t), tuple(notes), usage)


async def run_guard(
    steps: Steps, regenerator: Regenerator | None, stats: GuardrailStats | None = None
) -> GuardResult:
    """Drive ``steps`` with an async regenerator (None answers every request with nothing)."""
    try:
        request = next(steps)
        while True:
            try:
                answer = await regenerator.regenerate(request) if regenerator is not None else None
            except (QueueFullError, QueueTimeoutError):
                # No slot for the extra generation: the reply was already written, so the guard goes on
                # as if the re-pick or repair had found nothing, rather than failing the whole reply.
                answer = None
            request = steps.send(answer)
    except StopIteration as stop:
        result: GuardResult = stop.value
    _record(result, stats)
    return result


def run_guard_sync(
    steps: Steps,
    regenerate: Callable[[Request], Regenerated | None] | None = None,
    stats: GuardrailStats | None = None,
) -> GuardResult:
    """Drive ``steps`` with a synchronous ``regenerate`` (None answers every request with nothing)."""
    try:
        request = next(steps)
        while True:
            request = steps.send(regenerate(request) if regenerate is not None else None)
    except StopIteration as stop:
        result: GuardResult = stop.value
    _record(result, stats)
    return result


def _record(result: GuardResult, stats: GuardrailStats | None) -> None:
    if stats is not None:
        for note in result.interventions:
            stats.record(note)
