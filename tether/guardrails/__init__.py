"""Guardrails: make small models' tool calls land on offered tools with valid arguments.

The rule throughout is *a wrong guess is worse than no guess*.

* Layer 1, :func:`resolve_name`: deterministic name normalization (exact, case,
  namespace prefix, separator squash, a closed alias table, split), unique hits only.
* Layer 2: a constrained re-pick of the name, asked of a :class:`Regenerator` (the
  proxy's uses the engine's grammar; ``wrap(regenerate=True)`` the client itself).
* Arguments, :func:`check_arguments`: Draft 2020-12 validation, lossless recorded
  coercions, precise field errors.
* Policy, :func:`decide`: bounded, escalating retries; a text answer is legitimate
  unless the request requires a tool.
* :mod:`~tether.guardrails.pipeline`: the one pipeline of these layers (its ``STEPS``, one
  module each under :mod:`~tether.guardrails.steps`), run by the server, :class:`Guardrails`
  (one chat completion; :func:`wrap` applies it to an ``openai`` client), the workflow runner
  and the evals. See ``docs/guardrails.md``.
"""

from __future__ import annotations

from tether.guardrails.aliases import ALIASES, CANONICAL_GROUPS, CANONICAL_NAMES, alias_targets, squash
from tether.guardrails.arguments import ArgCheck, ArgumentChecker, FieldError, check_arguments
from tether.guardrails.decision import Decision
from tether.guardrails.guard import Guardrails, ToolChoiceLike, ToolLike
from tether.guardrails.interventions import KINDS, GuardrailStats, Intervention
from tether.guardrails.names import (
    NAMESPACE_PREFIXES,
    Resolution,
    ResolutionMethod,
    resolve_name,
    strip_namespace,
)
from tether.guardrails.pipeline import CallVerdict, GuardResult, Regenerated, Regenerator, guard_steps
from tether.guardrails.policy import (
    Action,
    TurnFacts,
    UnknownToolMode,
    Verdict,
    decide,
    invalid_arguments_text,
    not_executed_text,
    nudge_tier,
    tool_required_text,
    unknown_tool_text,
)
from tether.guardrails.presets import PRESETS, GuardConfig
from tether.guardrails.response import interventions_of
from tether.guardrails.wrap import ClientRegenerator, finalize, wrap

__all__ = [
    "ALIASES",
    "CANONICAL_GROUPS",
    "CANONICAL_NAMES",
    "KINDS",
    "NAMESPACE_PREFIXES",
    "PRESETS",
    "Action",
    "ArgCheck",
    "ArgumentChecker",
    "CallVerdict",
    "ClientRegenerator",
    "Decision",
    "FieldError",
    "GuardConfig",
    "GuardResult",
    "GuardrailStats",
    "Guardrails",
    "Intervention",
    "Regenerated",
    "Regenerator",
    "Resolution",
    "ResolutionMethod",
    "ToolChoiceLike",
    "ToolLike",
    "TurnFacts",
    "UnknownToolMode",
    "Verdict",
    "alias_targets",
    "check_arguments",
    "decide",
    "finalize",
    "guard_steps",
    "interventions_of",
    "invalid_arguments_text",
    "not_executed_text",
    "nudge_tier",
    "resolve_name",
    "squash",
    "strip_namespace",
    "tool_required_text",
    "unknown_tool_text",
    "wrap",
]
