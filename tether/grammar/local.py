"""Output specs compiled for an in-process engine: logits processors over the model's own vocabulary.

:class:`LocalCompiler` is what ``ContextEngine.compile`` calls: a :class:`~tether.grammar.spec.ReplySpec`
becomes the format's trigger grammar over the offered tools with its steering
(:class:`~tether.grammar.constraint.ToolConstraint`), followed by the grounding processor when the
spec asks for one (:class:`~tether.grammar.grounding.GroundingProcessor`); a name choice or an
JSON spec becomes the whole-output grammar of the guard's re-pick, its repair or a structured reply. Plans and mask
caches are shared across requests through the :class:`~tether.grammar.provider.ConstraintProvider`.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from tether.grammar.answers import AnswerGrounding, result_values
from tether.grammar.constraint import ToolConstraint
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.provider import ConstraintProvider, Vocabulary
from tether.grammar.recent import LatestRound
from tether.grammar.spec import JsonSpec, NameChoiceSpec, OutputSpec, ReplySpec
from tether.grammar.steering import Decision, Steering

__all__ = ["LocalCompiler", "LocalConstraint"]


class LocalConstraint:
    """One generation's compiled spec: the constraint, then grounding (which only biases).

    A plain logits processor, with what the batched engine reads (``copying``, ``forced_next``) and
    what the turn core reads after the generation (``decision``)."""

    def __init__(
        self,
        spec: OutputSpec,
        constraint: ToolConstraint,
        grounding: GroundingProcessor | None = None,
        answers: AnswerGrounding | None = None,
    ) -> None:
        self.spec = spec
        self.constraint = constraint
        self.grounding = grounding
        self.answers = answers

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        logits = self.constraint(ids, logits)
        if self.grounding is not None:
            logits = self.grounding(ids, logits)
        if self.answers is not None:  # an answer once the decision point chose one
            decision = self.constraint.decision
            logits = self.answers(ids, logits, active=decision is not None and not decision.called)
        return logits

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        """Inside an argument string: the batched engine drafts only there."""
        return self.constraint.copying(ids)

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        """The constraint's forced token (jump-forward); grounding only biases, so it cannot differ."""
        return self.constraint.forced_next(ids)

    @property
    def decision(self) -> Decision | None:
        """How the call-or-answer point went, once the generation passed it (None: it had no decision)."""
        return self.constraint.decision


class LocalCompiler:
    """Compiles output specs for one model's vocabulary; shared by every slot of that model."""

    def __init__(self, model: Vocabulary) -> None:
        self.provider = ConstraintProvider(model)

    def compile(self, spec: OutputSpec, *, prompt_len: int) -> LocalConstraint:
        provider = self.provider
        if isinstance(spec, NameChoiceSpec):
            return LocalConstraint(spec, provider.name_choice(spec.names, prompt_len=prompt_len))
        if isinstance(spec, JsonSpec):
            return LocalConstraint(spec, provider.json(spec, prompt_len=prompt_len))
        return self._reply(spec, prompt_len)

    def _reply(self, spec: ReplySpec, prompt_len: int) -> LocalConstraint:
        if spec.answer_only:  # the decision is made: answer
            spec = replace(spec, steering=Steering(call_prior=-math.inf, decide=True))
        constraint = self.provider.constraint(spec, prompt_len=prompt_len)
        grounding = answers = None
        if spec.grounding is not None:
            g = spec.grounding
            grounding = GroundingProcessor(
                self.provider.vocab,
                g.source,
                spec.tools,
                prompt_len=prompt_len,
                opener=g.opener,
                bias=g.bias,
                listed=g.listed,
                flags=g.flags,
                answered=g.answered,
                request=g.request,
                latest=LatestRound.of(g.source, g.request, g.latest_args, g.latest_results),
                said=g.said,
            )
            values = result_values(g.latest_results, g.request, g.latest_args) if g.latest_results else []
            if values and spec.steering is not None and spec.steering.decide:
                answers = AnswerGrounding(self.provider.vocab, values, prompt_len=prompt_len, bias=g.bias)
        return LocalConstraint(spec, constraint, grounding, answers)
