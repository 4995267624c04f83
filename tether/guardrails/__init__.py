"""Guardrails: make small models' tool calls land on offered tools with valid arguments.

The rule throughout is *a wrong guess is worse than no guess*.

* Layer 1, :func:`resolve_name`: deterministic name normalization (exact, case,
  namespace prefix, separator squash, a closed alias table, split), unique hits only.
* Layer 2, :class:`Repicker`: a constrained re-pick of the name, implemented by the
  proxy with the engine's grammar.
* Arguments, :func:`check_arguments`: Draft 2020-12 validation, lossless recorded
  coercions, precise field errors.
* Policy, :func:`decide`: bounded, escalating retries; a text answer is legitimate
  unless the request requires a tool.
* :class:`Guardrails` ties them together for one chat completion; :func:`wrap`
  applies it to an ``openai`` client. See ``docs/guardrails.md``.
"""

from __future__ import annotations

from tether.guardrails.aliases import ALIASES, CANONICAL_GROUPS, CANONICAL_NAMES, alias_targets, squash
from tether.guardrails.arguments import ArgCheck, ArgumentChecker, FieldError, check_arguments
from tether.guardrails.decision import CheckedCall, Decision
from tether.guardrails.guard import Guardrails, ToolChoiceLike, ToolLike
from tether.guardrails.interventions import KINDS, GuardrailStats, Intervention
from tether.guardrails.names import (
    NAMESPACE_PREFIXES,
    Resolution,
    ResolutionMethod,
    resolve_name,
    strip_namespace,
)
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
from tether.guardrails.repick import Repicker, messages_from_openai
from tether.guardrails.response import interventions_of
from tether.guardrails.wrap import finalize, wrap

__all__ = [
    "ALIASES",
    "CANONICAL_GROUPS",
    "CANONICAL_NAMES",
    "KINDS",
    "NAMESPACE_PREFIXES",
    "Action",
    "ArgCheck",
    "ArgumentChecker",
    "CheckedCall",
    "Decision",
    "FieldError",
    "GuardrailStats",
    "Guardrails",
    "Intervention",
    "Repicker",
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
    "interventions_of",
    "invalid_arguments_text",
    "messages_from_openai",
    "not_executed_text",
    "nudge_tier",
    "resolve_name",
    "squash",
    "strip_namespace",
    "tool_required_text",
    "unknown_tool_text",
    "wrap",
]
