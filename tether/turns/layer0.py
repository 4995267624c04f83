"""Layer 0 per request: the constraint, its steering and grounding (embedded engine), or its spec (remote).

``tool_constraint_factory(provider)`` is the core's constraint factory: for a job with
offered tools and ``constrain`` on, it builds the format's trigger grammar over those tools
(:mod:`tether.grammar.provider`), with the call-or-answer decision and the name prior the
preset asks for (:mod:`tether.selection`), and, with ``ground``, the grounding processor
(:mod:`tether.grammar.grounding`). After the generation, ``notes()`` says what steering did.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tether.chat import Message
from tether.engine.base import LogitsProcessor
from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats.base import JsonNameSlot
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.provider import ConstraintProvider
from tether.grammar.remote.spec import ReplySpec
from tether.grammar.steering import Steering
from tether.guardrails.interventions import Intervention
from tether.selection.decision import DecisionModel, request_text, steering_for
from tether.selection.enumeration import enumerated_list
from tether.selection.grounded import conversation_text
from tether.selection.relevance import mentioned_flags
from tether.turns.core import ConstraintFactory, Prepared

__all__ = [
    "Layer0",
    "grounding_source",
    "listed_range",
    "remote_constraint_factory",
    "tool_constraint_factory",
]

# Bytes of conversation the grounding index covers (the most recent ones).
_SOURCE_CHARS = 6000


def grounding_source(messages: Sequence[Message]) -> str:
    """The most recent conversation text argument values may be copied from."""
    return conversation_text(messages)[-_SOURCE_CHARS:]


def listed_range(source: str, request: str) -> tuple[int, int] | None:
    """The byte range, in ``source``, of the list ``request`` enumerates (None: no list, or not there)."""
    found = enumerated_list(request)
    at = source.rfind(request) if found else -1
    if found is None or at < 0:
        return None
    start, end = at + found[0], at + found[1]
    return len(source[:start].encode()), len(source[:end].encode())


class Layer0:
    """The constraint, then grounding; one per generation. ``notes`` reports what steering changed."""

    def __init__(
        self, constraint: ToolConstraint, grounding: GroundingProcessor | None, *, forced: bool = False
    ) -> None:
        self.constraint = constraint
        self.grounding = grounding
        self.forced = forced  # the decision was made for it (a re-decided answer): nothing to report

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        logits = self.constraint(ids, logits)
        return self.grounding(ids, logits) if self.grounding is not None else logits

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        """Inside an argument string: the batched engine drafts only there."""
        return self.constraint.copying(ids)

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        """The constraint's forced token (jump-forward); grounding only biases, so it cannot differ."""
        return self.constraint.forced_next(ids)

    @property
    def answering(self) -> bool:
        """The call-or-answer decision chose a text answer for a reply it was not told to answer."""
        d = self.constraint.decision
        return d is not None and not d.called and not self.forced

    def notes(self) -> list[Intervention]:
        out: list[Intervention] = []
        d = self.constraint.decision
        if d is not None and d.overridden and not self.forced:
            chosen = "call a tool" if d.called else "answer in text"
            detail = f"{chosen}: model log-odds of a call {d.log_odds:+.2f}, relevance prior {d.prior:+.2f}"
            out.append(Intervention("decision_steered", detail, None, d.log_odds, d.prior))
        return out


def tool_constraint_factory(
    provider: ConstraintProvider, decision: DecisionModel | None = None, *, grounding_bias: float = 4.0
) -> ConstraintFactory:
    """Layer 0 per request: the ``constrain`` mode over the offered tools, steered as the preset says."""
    model = decision or DecisionModel()

    def factory(prepared: Prepared) -> LogitsProcessor | None:
        job = prepared.job
        guard = job.guard
        if not prepared.tools or guard.constrain == "off":
            return None
        required = job.tool_choice != "auto"
        if prepared.answer_only:
            steering = Steering(call_prior=-math.inf, decide=True)
        else:
            steering = steering_for(
                job.messages,
                prepared.tools,
                model,
                decide=guard.decide and not required,
                names=guard.steer_names,
                cap=guard.cap_calls and not required,
            )
        constraint = provider.constraint(
            prepared.fmt,
            prepared.tools,
            guard.constrain,
            prompt_len=len(prepared.prompt_ids),
            required=required,
            parallel=job.parallel_tool_calls,
            steering=steering,
        )
        slot = prepared.fmt.name_slot
        grounding = None
        if guard.ground and isinstance(slot, JsonNameSlot):
            source = grounding_source(job.messages)
            request = request_text(job.messages)
            # Items taken one per call only where several calls are asked for: otherwise the model's
            # habit of repeating its call is dropped as an exact repeat, not turned into permutations.
            several = steering.short_list_bias > 0
            listed = listed_range(source, request) if several else None
            grounding = GroundingProcessor(
                provider.vocab,
                source,
                prepared.tools,
                prompt_len=len(prepared.prompt_ids),
                opener=f'"{slot.args_key}":'.encode(),
                bias=grounding_bias,
                listed=listed,
                flags=mentioned_flags(request, prepared.tools),
            )
        return Layer0(constraint, grounding, forced=prepared.answer_only)

    return factory


def remote_constraint_factory() -> ConstraintFactory:
    """Layer 0 for a remote engine: the ``constrain`` mode over the offered tools, as an ``OutputSpec``.

    The engine compiles it into its own grammar language. Steering, the call-or-answer decision and
    grounding act on logits and so stay with the embedded engine (docs/backends.md)."""

    def factory(prepared: Prepared) -> ReplySpec | None:
        job = prepared.job
        if not prepared.tools or job.guard.constrain == "off":
            return None
        return ReplySpec(
            prepared.fmt,
            prepared.tools,
            job.guard.constrain,
            required=job.tool_choice != "auto",
            parallel=job.parallel_tool_calls,
            answer_only=prepared.answer_only,
        )

    return factory
