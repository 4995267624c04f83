"""Enforcing a workflow on conversations the client owns (the proxy's stateless requests).

``observe(state, messages, seen)`` folds a request's history into a ``WorkflowState``:
each assistant tool call whose tool result is present counts once (by call id), as
a success unless the result text matches the workflow's ``error_pattern``.
``check_calls(state, calls)`` splits a new reply's calls into allowed and blocked
ones; ``Enforcement`` then gives the messages for a regeneration and the text that
replaces the reply when the model keeps breaking the rules.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass

from tether.calls import ToolCall
from tether.chat import Message
from tether.guardrails import not_executed_text
from tether.guardrails.interventions import Intervention
from tether.workflows.state import Violation, WorkflowState, args_label, violation_text

__all__ = ["Blocked", "Enforcement", "check_calls", "observe"]

_MAX_SEEN = 4096


def observe(state: WorkflowState, messages: Sequence[Message], seen: OrderedDict[str, None]) -> int:
    """Record every completed call in ``messages`` not seen before; returns how many were new."""
    calls: dict[str, ToolCall] = {}
    new = 0
    for msg in messages:
        if msg.role == "assistant":
            calls.update({c.id: c for c in msg.tool_calls})
        elif msg.role == "tool" and msg.tool_call_id and msg.tool_call_id not in seen:
            call = calls.get(msg.tool_call_id)
            if call is None:
                continue
            state.record(call.name, dict(call.arguments), not state.is_error_text(msg.content), msg.content)
            seen[msg.tool_call_id] = None
            new += 1
            while len(seen) > _MAX_SEEN:
                seen.popitem(last=False)
    return new


@dataclass(frozen=True)
class Blocked:
    """A call that must not reach the client: ``text`` is the tool-role error for the model."""

    call: ToolCall
    violation: Violation
    tier: int
    text: str

    @property
    def reason(self) -> str:
        return self.violation.reason()


@dataclass(frozen=True)
class Enforcement:
    """The verdict on one reply's calls."""

    workflow: str
    calls: tuple[ToolCall, ...]
    allowed_calls: tuple[ToolCall, ...]
    blocked: tuple[Blocked, ...]

    @property
    def ok(self) -> bool:
        return not self.blocked

    @property
    def next_tool(self) -> str | None:
        """The tool the model should call instead (from the first blocked call)."""
        return self.blocked[0].violation.next_tool if self.blocked else None

    def retry_messages(self, content: str = "") -> tuple[Message, ...]:
        """The reply as written plus one tool turn per call: the violation for blocked calls,
        "not executed" for the others. Append to the history and generate again."""
        texts = {id(b.call): b.text for b in self.blocked}
        turns = [Message("assistant", content, self.calls)]
        for call in self.calls:
            text = texts.get(id(call), not_executed_text())
            turns.append(Message("tool", text, tool_call_id=call.id, name=call.name))
        return tuple(turns)

    def fallback_text(self) -> str:
        """What the client reads instead of blocked calls: one line per call, naming what is missing."""
        lines = []
        for b in self.blocked:
            v = b.violation
            lines.append(
                f"[tether] workflow {self.workflow!r} blocked {args_label(v.tool, v.args)}: "
                f"{', '.join(v.missing)} must succeed first. Next: {v.next_call}."
            )
        return "\n".join(lines)

    def interventions(self) -> tuple[Intervention, ...]:
        """``FinishOut.interventions`` entries (``kind`` ``workflow_blocked``)."""
        return tuple(
            Intervention(
                "workflow_blocked",
                b.reason,
                b.violation.tool,
                b.violation.args,
                b.violation.next_call,
                b.tier,
            )
            for b in self.blocked
        )


def check_calls(state: WorkflowState, calls: Sequence[ToolCall]) -> Enforcement:
    """Allowed and blocked calls of one reply; each block escalates its violation's tier.

    Calls in the same reply do not satisfy each other's prerequisites: the client may run
    them in parallel, so a prerequisite must already have a result in the history.
    """
    allowed: list[ToolCall] = []
    blocked: list[Blocked] = []
    for call in calls:
        violation = state.check(call.name, dict(call.arguments))
        if violation is None:
            allowed.append(call)
            continue
        tier = state.escalate(violation)
        blocked.append(Blocked(call, violation, tier, violation_text(violation, tier)))
    return Enforcement(state.workflow.name, tuple(calls), tuple(allowed), tuple(blocked))
