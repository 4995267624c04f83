"""Layer 0 per request, said once for every engine: the reply's ``OutputSpec``.

:func:`reply_spec_factory` is the core's spec factory. A structured reply (``response_format``)
with no tools is one ``JsonSpec`` from the first token; beside tools it is the ``answer`` of the
reply's spec: one grammar, a call or the value. For a job with offered tools and
``constrain`` on, it describes the format's trigger grammar over those tools, with the
call-or-answer decision and the name prior the preset asks for (:mod:`tether.selection`) and,
with ``ground``, the conversation's spans argument values may be copied from. The engine
compiles the spec (``Engine.compile``); the parts that act on logits go only to engines that
declare them in ``EngineInfo.layers`` (``layer0_decision``, ``layer0_grounded``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

from tether.chat import Message
from tether.grammar.formats.base import JsonNameSlot
from tether.grammar.spec import GroundingSpec, OutputSpec, ReplySpec
from tether.selection.decision import DecisionModel, request_text, steering_for
from tether.selection.enumeration import enumerated_list
from tether.selection.grounded import conversation_text
from tether.selection.next_step import answered_values, latest_round
from tether.selection.relevance import mentioned_flags
from tether.selection.semantic import SemanticRelevance
from tether.turns.core import Prepared, SpecFactory

__all__ = ["grounding_source", "listed_range", "reply_spec_factory"]

# Bytes of conversation the grounding index covers (the most recent ones).
_SOURCE_CHARS = 6000


def grounding_source(messages: Sequence[Message]) -> str:
    """The most recent conversation text argument values may be copied from."""
    return conversation_text(messages)[-_SOURCE_CHARS:]


def said_text(messages: Sequence[Message]) -> str:
    """What the user and the tools said within the grounding source (the client's instructions left
    out): the text a file name is preferred from."""
    return "\n".join(m.content for m in messages if m.role in ("user", "tool") and m.content)[-_SOURCE_CHARS:]


def listed_range(source: str, request: str) -> tuple[int, int] | None:
    """The byte range, in ``source``, of the list ``request`` enumerates (None: no list, or not there)."""
    found = enumerated_list(request)
    at = source.rfind(request) if found else -1
    if found is None or at < 0:
        return None
    start, end = at + found[0], at + found[1]
    return len(source[:start].encode()), len(source[:end].encode())


def reply_spec_factory(
    layers: Sequence[str],
    decision: DecisionModel | None = None,
    *,
    semantic: SemanticRelevance | None = None,
    grounding_bias: float = 4.0,
) -> SpecFactory:
    """Layer 0 per request: the ``constrain`` mode over the offered tools, steered as the preset says,
    within what the engine applies (``layers``, from its ``EngineInfo``); ``semantic`` adds the
    embedding model's view of which tool fits."""
    model = decision or DecisionModel()
    steers = "layer0_decision" in layers
    grounds = "layer0_grounded" in layers

    def factory(prepared: Prepared) -> OutputSpec | None:
        job = prepared.job
        guard = job.guard
        fmt = job.reply_format
        answer = fmt.spec(prepared.params.max_tokens) if fmt is not None else None
        if not prepared.tools:
            return answer  # a structured reply holds from the first token, preset or not
        if guard.constrain == "off":
            return None
        required = job.tool_choice != "auto"
        steering = None
        if steers and not prepared.answer_only:
            steering = steering_for(
                job.messages,
                prepared.tools,
                model,
                decide=(guard.decide or job.call_decided) and not required,
                names=guard.steer_names,
                cap=guard.cap_calls and not required,
                semantic=semantic,
            )
            if job.call_decided:  # decided again as a call: the decision point can only call
                steering = replace(steering, call_prior=math.inf)
        slot = prepared.fmt.name_slot
        grounding = None
        if grounds and guard.ground and isinstance(slot, JsonNameSlot):
            source = grounding_source(job.messages)
            request = request_text(job.messages)
            # Items taken one per call only where several calls are asked for: otherwise the model's
            # habit of repeating its call is dropped as an exact repeat, not turned into permutations.
            several = steering is not None and steering.short_list_bias > 0
            grounding = GroundingSpec(
                source,
                f'"{slot.args_key}":'.encode(),
                grounding_bias,
                listed_range(source, request) if several else None,
                mentioned_flags(request, prepared.tools),
                answered_values(job.messages),
                request,
                *latest_round(job.messages),
                said_text(job.messages),
            )
        return ReplySpec(
            prepared.fmt,
            prepared.tools,
            guard.constrain,
            required=required,
            parallel=job.parallel_tool_calls,
            answer_only=prepared.answer_only,
            steering=steering,
            grounding=grounding,
            answer=answer,
        )

    return factory
