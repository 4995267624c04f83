"""The one guard pipeline: every layer that runs on a reply's tool calls after sampling.

The server (after the engine), ``Guardrails``/``wrap`` (on a client's responses), the
workflow runner and the evals all run these steps, configured by one ``GuardConfig``. Each is a
:data:`~tether.guardrails.steps.context.Step` in its own module under
:mod:`tether.guardrails.steps`, and :data:`STEPS` runs them in this order on every call:

1. **rescue gate** (:mod:`~tether.guardrails.steps.rescue_gate`) — a call that parsing had to
   repair is refused as text when rescue is off;
2. **names** (:mod:`~tether.guardrails.steps.names`) — exact, then layer-1 normalization
   (``resolve_name``), then a layer-2 constrained re-pick; a name that does not resolve is never
   dispatched (the call is settled ``unresolved``, or ``unchecked`` with no name layers);
3. **arguments** (:mod:`~tether.guardrails.steps.arguments`) — Draft 2020-12 validation with
   lossless recorded coercions (:mod:`tether.coercion`), then a schema-constrained repair;
4. **dates** (:mod:`~tether.guardrails.steps.dates`) — a tool's one date parameter holds the day
   the request asks about ("tomorrow" counted from the today it states, or the one date it writes)
   in the parameter's shape (``shape_values``), before grounding would drop a date nobody said;
5. **grounding** (:mod:`~tether.guardrails.steps.grounding`) — with ``tool_choice: auto`` on a
   fresh user ask, a call whose values the conversation does not contain (most of them, or with
   ``abstain_unsaid`` any required one) is abstained from (:mod:`tether.selection.grounded`): a
   wrong guess is worse than no guess, and the reply becomes a text answer; a fitting tool's call
   whose unsaid values are strings is first asked again with them limited to the request's words
   (``reground_min``, :mod:`tether.guardrails.values`);
6. **shapes** (:mod:`~tether.guardrails.steps.shapes`) — a string value goes in the shape its
   parameter asks for: a date as ``YYYY-MM-DD`` (``format: date`` or the description's words), a US
   state as its code (``shape_values``, :mod:`tether.guardrails.shapes`); a from/to pair in the
   request's order and a command the request gives, whole (:mod:`tether.guardrails.said_values`);
   an array of ``enum`` items cut to those a fresh ask names (:mod:`tether.selection.named_items`);
7. **duplicates** (:mod:`~tether.guardrails.steps.duplicates`) — an identical call later in the
   same reply is dropped, and (``end_loops``) so is a call identical to one of the previous turn's
   whose result came back without failing: the result is already in the conversation, and a small
   model otherwise loops on it until its turns run out (a changed world in between, such as a read
   after an edit, is another turn); a call that only reorders an earlier one's values or differs in
   optional values nobody said is merged into it (``merge_variants``), and one that only mixes
   earlier calls' values, or changes one of them to a guess, is dropped;
8. **mentioned options** (:mod:`~tether.guardrails.steps.mentioned`) — the lone call of a reply to
   a fresh user ask gets the ``enum`` arguments the request names word for word and the model left
   out ("with pediatrics department" → ``department: "Pediatrics"``;
   :func:`tether.selection.relevance.mentioned_choices`), and a single choice nobody named gives
   way to the one the request names.

A step returns the call (possibly changed), or None to drop it; it may also settle the call
(:meth:`~tether.guardrails.steps.context.GuardContext.settle`), which keeps it as it stands and
skips the steps after it. What the steps accumulate (interventions, refused text, the calls
checked, usage) lives on one :class:`~tether.guardrails.steps.context.GuardContext` per reply.

The pipeline is written once, without I/O: :func:`guard_steps` is a generator that
*yields* a :class:`PickName` or :class:`FixArguments` request whenever it needs the model
again and receives the answer. :func:`run_guard` drives it with an async ``Regenerator``
(the server's is backed by the scheduler; a client's by its HTTP client), and
:func:`run_guard_sync` with a synchronous one (a sync client's) or none. Each regeneration's token usage is
summed into the result.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping, Sequence
from typing import Protocol

from tether.calls import ToolCall
from tether.chat import Message
from tether.errors import QueueFullError, QueueTimeoutError
from tether.grammar.formats.base import ToolSpec
from tether.guardrails.arguments import ArgumentChecker
from tether.guardrails.interventions import GuardrailStats
from tether.guardrails.presets import GuardConfig
from tether.guardrails.steps.arguments import arguments
from tether.guardrails.steps.context import (
    CallStatus,
    CallVerdict,
    FixArguments,
    GuardContext,
    GuardResult,
    PickName,
    Regenerated,
    Request,
    Step,
    lone,
)
from tether.guardrails.steps.dates import dates
from tether.guardrails.steps.duplicates import duplicates
from tether.guardrails.steps.grounding import grounding
from tether.guardrails.steps.mentioned import mentioned
from tether.guardrails.steps.names import names
from tether.guardrails.steps.rescue_gate import rescue_gate
from tether.guardrails.steps.shapes import shapes

__all__ = [
    "STEPS",
    "CallStatus",
    "CallVerdict",
    "FixArguments",
    "GuardContext",
    "GuardResult",
    "PickName",
    "Regenerated",
    "Regenerator",
    "Request",
    "Step",
    "Steps",
    "guard_steps",
    "run_guard",
    "run_guard_sync",
]

# The guard's steps, in the order they run on each call (see the module doc).
STEPS: tuple[Step, ...] = (
    rescue_gate,
    names,
    arguments,
    dates,
    grounding,
    shapes,
    duplicates,
    mentioned,
)


class Regenerator(Protocol):
    """Answers the pipeline's requests with one extra, constrained generation each."""

    async def regenerate(self, request: Request) -> Regenerated: ...


Steps = Generator[Request, Regenerated | None, GuardResult]


def guard_steps(
    calls: Sequence[ToolCall],
    tools: Sequence[ToolSpec],
    config: GuardConfig,
    messages: Sequence[Message] = (),
    *,
    checkers: Mapping[str, ArgumentChecker] | None = None,
    can_regenerate: bool = False,
    may_answer: bool = False,
    steps: Sequence[Step] = STEPS,
) -> Steps:
    """The pipeline over one reply's ``calls``; yields requests when it needs the model again.

    ``checkers``: argument checkers compiled per tool (built on the fly when not given);
    ``may_answer``: a text answer would do instead (``tool_choice: auto`` on a fresh user ask);
    ``steps``: what runs on each call, in order, until one drops or settles it (:data:`STEPS`).
    """
    ctx = GuardContext(
        tuple(tools), config, tuple(messages), checkers or {}, can_regenerate, may_answer, lone(calls)
    )
    queue = list(calls)
    while queue:
        call: ToolCall | None = ctx.begin(queue.pop(0))
        for step in steps:
            if call is None or ctx.settled:
                break
            call = yield from step(call, ctx)
        if call is not None:
            ctx.keep(call)
        queue += ctx.again
        ctx.again.clear()
    return ctx.result()


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
