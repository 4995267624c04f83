"""Retry policy and nudge wording: when to retry, when to give up, what to tell the model.

The decision is a pure function of :class:`TurnFacts`, so it can be tested as a
table. Its central rule: **a plain text answer is legitimate** unless the request
requires a tool (``tool_choice`` is ``"required"`` or names a function, or an active
workflow step needs one). A good text reply is never replaced by a worse retry.

Retries are bounded by ``max_retries`` and their wording escalates over three tiers
(attempt 1: state the problem; 2: insist on the exact fix; 3: last attempt, spell
out the allowed shape). Every text here goes to the model, never to a log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal

from tether.guardrails.arguments import FieldError, compact_json

__all__ = [
    "Action",
    "TurnFacts",
    "UnknownToolMode",
    "Verdict",
    "decide",
    "invalid_arguments_text",
    "not_executed_text",
    "nudge_tier",
    "tool_required_text",
    "unknown_tool_text",
]

Action = Literal["execute", "retry", "fail", "answer"]
UnknownToolMode = Literal["tool_error", "text"]


@dataclass(frozen=True)
class TurnFacts:
    """What a checked assistant turn looked like.

    ``calls``: tool calls found (structured or rescued from text); ``unresolved``:
    calls whose name could not be resolved to an offered tool; ``invalid``: resolved
    calls whose arguments fail the schema; ``tool_required``: the request demands a
    tool call; ``attempt``: retries already spent on this turn.
    """

    calls: int
    unresolved: int = 0
    invalid: int = 0
    tool_required: bool = False
    attempt: int = 0
    max_retries: int = 2
    unknown_tool: UnknownToolMode = "tool_error"


@dataclass(frozen=True)
class Verdict:
    """``action`` plus a machine-readable ``reason`` and the nudge ``tier`` (1-3) for retries."""

    action: Action
    reason: str
    tier: int = 0


def nudge_tier(attempt: int) -> int:
    """Wording tier for the retry that follows ``attempt`` retries: 1, 2, then 3 for good."""
    return min(max(attempt, 0) + 1, 3)


def decide(facts: TurnFacts) -> Verdict:
    """The action for one assistant turn.

    * no calls: ``answer`` unless a tool is required (then retry, or fail when out of retries);
    * an unresolvable name with ``unknown_tool="text"``: ``answer`` with the error text;
    * an unresolvable name or invalid arguments: ``retry`` while retries remain, else ``fail``;
    * otherwise ``execute``.
    """
    retry_left = facts.attempt < facts.max_retries
    tier = nudge_tier(facts.attempt)
    if facts.calls == 0:
        if not facts.tool_required:
            return Verdict("answer", "text_answer")
        if retry_left:
            return Verdict("retry", "tool_required", tier)
        return Verdict("fail", "tool_required")
    if facts.unresolved and facts.unknown_tool == "text":
        return Verdict("answer", "unknown_tool")
    if facts.unresolved or facts.invalid:
        reason = "unknown_tool" if facts.unresolved else "invalid_arguments"
        if retry_left:
            return Verdict("retry", reason, tier)
        return Verdict("fail", reason)
    return Verdict("execute", "ok")


def _names(offered: Sequence[str]) -> str:
    return ", ".join(offered) if offered else "(none)"


def unknown_tool_text(
    name: str, offered: Sequence[str], *, candidates: Sequence[str] = (), tier: int = 1
) -> str:
    """``Error: unknown tool 'X'. Available tools: a, b, c.`` plus escalating advice."""
    text = f"Error: unknown tool '{name}'. Available tools: {_names(offered)}."
    if candidates:
        text += f" Did you mean one of: {', '.join(candidates)}?"
    if tier >= 2:
        text += " Call one of the available tools by its exact name."
    if tier >= 3:
        text += " Last attempt: use a name from the list above exactly as written."
    return text


def invalid_arguments_text(
    tool: str, errors: Sequence[FieldError], *, schema: Any = None, tier: int = 1
) -> str:
    """The precise nudge for bad arguments: one line per field with its path, what was
    expected, the offending value and the schema fragment (compact JSON)."""
    lines = [f"Error: invalid arguments for tool '{tool}':"]
    for err in errors:
        lines.append(
            f"- {err.path or '(arguments)'}: {err.message}; schema: {compact_json(err.schema_fragment)}"
        )
    if tier >= 2:
        lines.append(f"Fix exactly these fields and call '{tool}' again with all required fields.")
    if tier >= 3 and schema is not None:
        lines.append(f"Last attempt: the arguments must match this JSON schema: {compact_json(schema, 1200)}")
    return "\n".join(lines)


def tool_required_text(offered: Sequence[str], *, named: str | None = None, tier: int = 1) -> str:
    """The nudge after a text reply when the request requires a tool call."""
    target = f"the tool '{named}'" if named else f"one of these tools: {_names(offered)}"
    if tier <= 1:
        return f"This step requires a tool call. Call {target}."
    if tier == 2:
        return (
            f"You replied with text, but this step must be a tool call. Reply by calling {target}, no prose."
        )
    return f"Last attempt: reply with only a tool call to {target}."


def not_executed_text() -> str:
    """Tool-role reply for a valid call that shares a turn with a rejected one."""
    return (
        "Not executed: another tool call in this turn was rejected. "
        "Repeat this call together with the corrected one if it is still needed."
    )
