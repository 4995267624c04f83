"""What the guard's steps share: the calls' vocabulary, one reply's :class:`GuardContext`, the :data:`Step` seam.

The guard (:func:`tether.guardrails.pipeline.guard_steps`) runs each call of a reply through a
tuple of steps. A :data:`Step` is a generator: it yields a :class:`PickName` or
:class:`FixArguments` request whenever it needs the model again, receives the answer, and returns
the call (possibly changed) or None to drop it. It may also :meth:`~GuardContext.settle` the call:
kept as it stands, with that verdict, and no later step runs (a name no layer resolved).

Everything a reply's steps accumulate lives on its :class:`GuardContext`: the interventions, the
text of calls refused, the calls checked so far with their verdicts, the regenerations' usage, the
calls already seen (``dedupe``), the requests already asked (one generation per distinct request)
and the conversation's :class:`~tether.selection.grounded.Grounding`, prepared on first use.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Generator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import wraps
from typing import Any, Literal

from tether.calls import ToolCall
from tether.chat import Message, Usage, reads_as_failure
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.arguments import ArgumentChecker, FieldError
from tether.guardrails.interventions import Intervention
from tether.guardrails.names import declared_aliases
from tether.guardrails.presets import GuardConfig
from tether.selection.grounded import Grounding, conversation_text

__all__ = [
    "DECODE_REPAIRS",
    "CallStatus",
    "CallVerdict",
    "FixArguments",
    "GuardContext",
    "GuardResult",
    "PickName",
    "Regenerated",
    "Request",
    "Step",
    "StepRun",
    "answered_last_turn",
    "asking",
    "call_key",
    "cycled",
    "failed_in_a_row",
    "lone",
    "never_asks",
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


def call_key(call: ToolCall) -> str:
    """A call's identity for duplicates: its name and its arguments, key order aside."""
    return call.name + "\0" + json.dumps(dict(call.arguments), sort_keys=True, ensure_ascii=False)


def _request_key(request: Request) -> str:
    """What a request's prompt is made of, besides the conversation (the same within one reply)."""
    call = request.call
    shown = [call.name, call.raw or "", json.dumps(dict(call.arguments), sort_keys=True, default=str)]
    if isinstance(request, PickName):
        return json.dumps(["pick", *shown])
    tool = [request.tool.name, request.tool.description, request.tool.parameters]
    errors = [[e.path, e.message, e.expected, e.schema_fragment, e.got] for e in request.errors]
    return json.dumps(["fix", *shown, tool, errors], sort_keys=True, default=str)


def asking(
    request: Request, asked: dict[str, Regenerated | None]
) -> Generator[Request, Regenerated | None, tuple[Regenerated | None, Usage]]:
    """Ask the model once per distinct request in a reply: regenerations are greedy, so a repeated
    call (the model's habit) gets the first one's answer without a second generation."""
    key = _request_key(request)
    if key in asked:
        return asked[key], Usage()
    answer = asked[key] = yield request
    return answer, answer.usage if answer is not None else Usage()


def answered_last_turn(history: Sequence[Message]) -> frozenset[str]:
    """The calls of the conversation's last assistant turn (by :func:`call_key`) whose results end
    the conversation and do not read as failures (a failed call may be retried)."""
    results: dict[str, str] = {}
    k = len(history)
    while k > 0 and history[k - 1].role == "tool":
        k -= 1
        results[history[k].tool_call_id or ""] = history[k].content
    if not results or k == 0 or history[k - 1].role != "assistant":
        return frozenset()
    return frozenset(
        call_key(c)
        for c in history[k - 1].tool_calls
        if c.id in results and not reads_as_failure(results[c.id])
    )


def cycled(history: Sequence[Message]) -> frozenset[str]:
    """The calls (by :func:`call_key`) made since the user last spoke whose latest results came back
    and do not read as failures (a failure may be retried), with nothing new called after them:
    every later call repeats one made before. Made again, such a call only goes round the same loop
    (``find(a)``, ``find(b)``, ``find(a)``, … gets ``find(b)`` here); a call followed by a new one
    (``ls``, ``mkdir``, ``ls``) may see a changed state and is left alone."""
    start = next((i + 1 for i in range(len(history) - 1, -1, -1) if history[i].role == "user"), 0)
    results = {m.tool_call_id or "": m.content for m in history[start:] if m.role == "tool"}
    made = [
        (call_key(c), c.id in results and not reads_as_failure(results[c.id]))
        for m in history[start:]
        if m.role == "assistant"
        for c in m.tool_calls
    ]
    last = {key: i for i, (key, _) in enumerate(made)}  # a call's latest result is the one that counts
    seen: set[str] = set()
    newest = -1  # where the last call not made before it stands
    for i, (key, _) in enumerate(made):
        if key not in seen:
            seen.add(key)
            newest = i
    return frozenset(key for key, i in last.items() if i >= newest and made[i][1])


def failed_in_a_row(history: Sequence[Message], times: int) -> frozenset[str]:
    """The calls (by :func:`call_key`) that each of the conversation's last ``times`` assistant turns
    made and whose results all read as failures: retried that often, the same call fails the same way."""
    k, common = len(history), None
    for _ in range(times):
        results: dict[str, str] = {}
        while k > 0 and history[k - 1].role == "tool":
            k -= 1
            results[history[k].tool_call_id or ""] = history[k].content
        if not results or k == 0 or history[k - 1].role != "assistant":
            return frozenset()
        k -= 1
        failed = {
            call_key(c) for c in history[k].tool_calls if c.id in results and reads_as_failure(results[c.id])
        }
        common = failed if common is None else common & failed
        if not common:
            return frozenset()
    return frozenset(common or ())


def lone(calls: Sequence[ToolCall]) -> bool:
    """The reply makes one call, however often the model repeated it."""
    return len({call_key(c) for c in calls}) == 1


@dataclass
class GuardContext:
    """One reply's guard state, shared by its steps.

    Per reply: ``lone`` (the reply makes one call, however often the model repeated it: :func:`lone`),
    ``answered`` (the previous turn's calls whose results came back, and calls that would only go
    round a loop again: :func:`cycled`; under ``end_loops``),
    ``failing`` (calls that failed in each of the last ``failed_retries + 1`` turns, likewise) and the
    accumulators, among them ``again``: written calls a step wants run through the steps once more
    after the reply's own (a repeat advanced along a list with items left). Per call: ``verdict`` (``ok`` under the name as written until a step says
    otherwise) and ``settled`` (set by :meth:`settle`: no later step runs).
    """

    tools: tuple[ToolSpec, ...]
    config: GuardConfig
    history: tuple[Message, ...] = ()
    checkers: Mapping[str, ArgumentChecker] = field(default_factory=dict)
    can_regenerate: bool = False
    may_answer: bool = False  # a text answer would do instead (``tool_choice: auto`` on a fresh ask)
    lone: bool = False
    notes: list[Intervention] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)
    checked: list[tuple[ToolCall, CallVerdict]] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    seen: dict[str, int] = field(default_factory=dict)  # a kept call's key -> its index in checked
    asked: dict[str, Regenerated | None] = field(default_factory=dict)  # one generation per request
    again: list[ToolCall] = field(default_factory=list)  # calls to run through the steps once more
    verdict: CallVerdict = CallVerdict("ok", "")
    settled: bool = False
    by_name: dict[str, ToolSpec] = field(init=False)
    names: list[str] = field(init=False)
    aliases: dict[str, str] = field(init=False)  # the tools' declared names (resolve_name)
    answered: frozenset[str] = field(init=False)
    failing: frozenset[str] = field(init=False)
    _spoken: Grounding | None = field(default=None, init=False, repr=False)

    def __post_init__(self) -> None:
        self.by_name = {t.name: t for t in self.tools}
        self.names = [t.name for t in self.tools]
        self.aliases = declared_aliases(self.tools)
        self.answered = (
            answered_last_turn(self.history) | cycled(self.history) if self.config.end_loops else frozenset()
        )
        tries = self.config.failed_retries + 1
        self.failing = failed_in_a_row(self.history, tries) if self.config.end_loops else frozenset()

    @classmethod
    def start(
        cls,
        calls: Sequence[ToolCall],
        tools: Sequence[ToolSpec],
        config: GuardConfig,
        messages: Sequence[Message],
    ) -> GuardContext:
        """The context for one reply's ``calls`` with no regeneration, before any step has run."""
        return cls(tuple(tools), config, tuple(messages), lone=lone(calls))

    @property
    def spoken(self) -> Grounding:
        """The conversation's grounding, prepared on first use."""
        if self._spoken is None:
            self._spoken = Grounding.of(conversation_text(self.history))
        return self._spoken

    def begin(self, call: ToolCall) -> ToolCall:
        """Start on the next call: ``ok`` under its name as written, not settled."""
        self.verdict = CallVerdict("ok", call.name)
        self.settled = False
        return call

    def settle(self, verdict: CallVerdict) -> None:
        """Keep the current call as it stands, with ``verdict``: no later step runs for it."""
        self.verdict = verdict
        self.settled = True

    def keep(self, call: ToolCall) -> None:
        """The current call stands, with its verdict."""
        self.checked.append((call, self.verdict))

    def ask(self, request: Request) -> Generator[Request, Regenerated | None, Regenerated | None]:
        """Ask the model (once per distinct request in the reply) and count the generation's usage."""
        answer, used = yield from asking(request, self.asked)
        self.usage = self.usage + used
        return answer

    def result(self) -> GuardResult:
        """The reply's :class:`GuardResult`: the calls kept, the refused text, notes and usage."""
        return GuardResult(
            tuple(self.checked), tuple(t for t in self.refused if t), tuple(self.notes), self.usage
        )


StepRun = Generator[Request, Regenerated | None, ToolCall | None]
Step = Callable[[ToolCall, GuardContext], StepRun]


def never_asks(step: Callable[[ToolCall, GuardContext], ToolCall | None]) -> Step:
    """A plain function as a :data:`Step`: for the steps that never need the model again."""

    @wraps(step)
    def run(call: ToolCall, ctx: GuardContext) -> StepRun:
        yield from ()
        return step(call, ctx)

    return run
