"""The call-or-answer decision and the name prior, from the conversation and the offered tools.

At the point where a reply becomes a call or an answer, layer 0 calls when

    log_odds + prior >= 0

where ``log_odds`` is the model's own (measured there, in the sampler) and ``prior`` comes
from how well the offered tools match the request (:mod:`tether.selection.relevance`):

    prior = max over tools (coverage_weight * coverage + name_weight * name
                            + semantic_weight * semantic) + offset, / log_odds_weight

the relevance numbers of the tool that fits best, in the units of the model's log-odds;
``semantic`` is the embedding similarity when an embedding model is loaded
(:mod:`tether.selection.semantic`), else 0 and a fit without it applies. The weights
are a logistic fit on a development split (``docs/evals.md`` says which items and how);
they are data here, not rules about any benchmark's wording. When the conversation's last
message is a tool result (an agent loop), the request's words alone cannot say whether the
task is done: the prior is then the next-step evidence of :mod:`tether.selection.next_step`
(a tool the request asks for that has not answered yet, or a failure that names one, calls:
``in_loop_step_prior``; every one answered, answers: ``in_loop_done_prior``).

The name prior adds ``tool_prior_weight`` times each tool's relevance (lexical, plus
``semantic_name_weight`` times its positive embedding similarity) to the tokens of its name (less, ``in_loop_tool_prior_weight``, after a tool result), so the tool the request
talks about is preferred among the offered ones. With the
decision on, the call list also ends at its first exact repeat and after as many calls as
the request enumerates (:mod:`tether.selection.enumeration`), and, when no offered tool can
take that many values in one call, ending it before that costs ``short_list_bias``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass

from tether.chat import Message, is_request
from tether.coercion import schema_types
from tether.grammar.formats.base import ToolSpec
from tether.grammar.steering import Steering
from tether.schema_kinds import extractive_kind
from tether.selection.clauses import (
    clauses,
    command_runner,
    declines_action,
    leading_run,
    names_a_file_for,
    request_steps,
)
from tether.selection.enumeration import enumerated_items
from tether.selection.next_step import next_step
from tether.selection.relevance import ToolRelevance, rank_tools
from tether.selection.semantic import SemanticRelevance, readable

__all__ = [
    "SEMANTIC_DECISION",
    "DecisionModel",
    "fitted_decision",
    "relevance",
    "request_text",
    "steering_for",
]


@dataclass(frozen=True)
class DecisionModel:
    """Weights of the decision and of the name prior (see the module doc)."""

    log_odds_weight: float = 0.46
    coverage_weight: float = 1.15
    name_weight: float = 2.07
    semantic_weight: float = 0.0
    offset: float = -1.89
    # After a tool result: the prior when a step is left, and when every asked-for tool has answered
    # (then minus this), and the name prior's extra weight on the tools still to call. Set, not fitted,
    # against the model's log-odds bounded at ±10 (grammar.steering.LOG_ODDS_BOUND): a step left is
    # taken unless the model is fairly sure it is done (−5); a finished task is answered, beyond the
    # bound (the bundled model is often certain of another call: it goes on to accounts, orders and
    # files nobody asked about, or calls again what just answered).
    in_loop_step_prior: float = 5.0
    in_loop_done_prior: float = 12.0
    # A part of a request ("Read README.md", of "Read README.md, then …") is a step for the tool whose
    # words it uses above this fresh-ask prior: a few words say less than a whole request does.
    part_prior: float = -5.0
    pending_name_bias: float = 4.0
    prerequisite_name_bias: float = 10.0  # a tool a failure names ("Call login first")
    tool_prior_weight: float = 8.0
    semantic_name_weight: float = 0.0
    # After a tool result the request's words say less about which tool comes next.
    in_loop_tool_prior_weight: float = 2.0
    short_list_bias: float = 3.0  # what ending a call list before one call per enumerated item costs

    def evidence(self, r: ToolRelevance) -> float:
        """How much one tool's relevance says for calling (before the offset)."""
        return (
            self.coverage_weight * r.coverage + self.name_weight * r.name + self.semantic_weight * r.semantic
        )

    def prior(self, ranked: Sequence[ToolRelevance]) -> float:
        """The fresh ask's prior: the best-fitting tool's evidence, in the model's log-odds units."""
        return (max(self.evidence(r) for r in ranked) + self.offset) / self.log_odds_weight

    def name_score(self, r: ToolRelevance) -> float:
        """A tool's share of the name prior."""
        return r.score + self.semantic_name_weight * max(0.0, r.semantic)


# Weights fitted with the embedding model's similarity as a fourth feature on BFCL's development split
# (``python -m tether.evals.decision_fit --limit 60 --seed 3``: 240 items, AUC 0.961 under 5-fold
# cross-validation against 0.945 for the lexical signal alone and 0.811 for the model's log-odds);
# the name prior's semantic weight from the split's multi-tool items (a conditional-logit fit: 1.0).
# Without an embedding model, DecisionModel's defaults (the lexical fit) apply.
SEMANTIC_DECISION = DecisionModel(
    log_odds_weight=0.371,
    coverage_weight=0.329,
    name_weight=2.913,
    semantic_weight=10.397,
    offset=-5.384,
    semantic_name_weight=1.0,
)


def fitted_decision(*, semantic: bool) -> DecisionModel:
    """The decision's weights for a server with (or without) an embedding model."""
    return SEMANTIC_DECISION if semantic else DecisionModel()


def request_text(messages: Sequence[Message]) -> str:
    """What the user asked: the last user message that asks (the tools must fit the current request),
    not a note tether wrote into the history (:func:`tether.chat.is_request`). A message sent as one
    JSON string literal (``opencode run`` quotes the user's words: ``"Run \\"ls\\""``) is read as the
    text it encodes."""
    for msg in reversed(messages):
        if is_request(msg):
            return _unquoted(msg.content)
    return ""


def _unquoted(text: str) -> str:
    if len(text) < 2 or text[0] != '"' or text[-1] != '"':
        return text
    try:
        value = json.loads(text)
    except ValueError:
        return text
    return value if isinstance(value, str) else text


def relevance(
    messages: Sequence[Message], tools: Sequence[ToolSpec], semantic: SemanticRelevance | None = None
) -> list[ToolRelevance]:
    """Every offered tool's relevance to the request: lexical, and in meaning where ``semantic`` is given
    (the closest of the whole request and its parts, :func:`tether.selection.clauses.clauses`)."""
    request = request_text(messages)
    if semantic is None:
        return rank_tools(request, tools)
    sims = semantic.scores(request, tools)
    parts = clauses(request)
    if parts:  # a part alone can say what the whole, read as one topic, does not
        best = semantic.part_scores(parts, tools).max(axis=0)
        sims = [max(s, float(b)) for s, b in zip(sims, best, strict=True)]
    return rank_tools(request, tools, sims)


def steering_for(
    messages: Sequence[Message],
    tools: Sequence[ToolSpec],
    model: DecisionModel,
    *,
    decide: bool,
    names: bool,
    cap: bool = False,
    semantic: SemanticRelevance | None = None,
) -> Steering:
    """Layer 0's steering for one request: the decision prior and, with several tools, the name prior;
    with ``cap``, a fresh ask gets at most one call per item it enumerates."""
    if not tools or not (decide or names or cap):
        return Steering(end_repeats=True)  # an exact repeat never helps: the list ends there
    if semantic is not None and not readable(request_text(messages)):
        # all-MiniLM reads English: a request in another script is judged by the lexical fit alone.
        semantic, model = None, DecisionModel()
    ranked = relevance(messages, tools, semantic)
    steps = request_steps(request_text(messages), tools, model, semantic)
    in_loop = bool(messages) and messages[-1].role == "tool"
    step = next_step(messages, tools, ranked, model, steps) if in_loop else None
    prior = 0.0 if not decide else step.prior if step is not None else model.prior(ranked)
    if decide and not in_loop and declines_action(request_text(messages)):
        prior = -model.in_loop_done_prior  # "explain, don't do it": the tool's fit is the topic, not the ask
    elif decide and not in_loop and names_a_file_for(request_text(messages), tools):
        prior = max(prior, 0.0)  # "What is in VERSION.txt?" with a file tool: no steering against a call
    weight = model.in_loop_tool_prior_weight if in_loop else model.tool_prior_weight
    name_prior = {r.tool: weight * model.name_score(r) for r in ranked} if names and len(tools) > 1 else {}
    if name_prior and step is not None:
        # The steps left come before any other tool, however well it fits the whole request; the first
        # one is next, later ones get half (the request's order is the plan), or nothing where the plan
        # takes its steps in turns ("read, record, read, record": one at a time).
        top = max(name_prior.values())
        in_turns = _in_turns(step.todo)
        for k, tool in enumerate(dict.fromkeys(step.pending)):
            named = tool in step.named
            if k and not named and in_turns:
                continue
            bias = model.prerequisite_name_bias if named else model.pending_name_bias
            name_prior[tool] = max(name_prior[tool], top) + (bias if k == 0 or named else bias / 2)
        for tool in step.served:  # a part done is not done again while another is left
            name_prior[tool] -= model.pending_name_bias
    elif name_prior and len(set(steps)) > 1:
        # A fresh ask of several steps starts at its first, however well the later ones fit the whole.
        name_prior[steps[0]] = max(name_prior.values()) + model.pending_name_bias
    elif name_prior and (runner := command_runner(request_text(messages), tools)) is not None:
        # "Run the command …" with one tool that takes a command: that tool, however its words fit.
        name_prior[runner] = max(name_prior.values()) + model.pending_name_bias
    max_calls = enumerated_items(request_text(messages)) if cap and not in_loop else None
    plan = steps if step is None else () if step.named else step.todo
    if cap and _in_turns(plan):  # a step that comes again after another waits for that one's result
        max_calls = leading_run(plan)
    # Items one call can hold ("a triangle with sides 3, 4 and 5") do not ask for more calls.
    several = max_calls is not None and max_calls > 1 and not any(_holds(t, max_calls) for t in tools)
    return Steering(
        call_prior=prior,
        decide=decide,
        name_prior=name_prior,
        max_calls=max_calls,
        end_repeats=True,
        short_list_bias=model.short_list_bias if several else 0.0,
    )


def _in_turns(plan: Sequence[str]) -> bool:
    """Does a tool of ``plan`` come again after another tool ("read, record, read, record")?"""
    return any(tool in plan[:k] and tool != plan[k - 1] for k, tool in enumerate(plan) if k)


def _holds(tool: ToolSpec, items: int) -> bool:
    """Can one call of ``tool`` take ``items`` values: as many extractive parameters, or a list of them?"""
    props = tool.parameters.get("properties") or {}
    kinds = [(extractive_kind(spec, key), spec) for key, spec in props.items()]
    if any(kind and isinstance(spec, dict) and "array" in schema_types(spec) for kind, spec in kinds):
        return True
    return sum(1 for kind, _ in kinds if kind) >= items
