"""Workflow progress kept outside the message history, and the rules checked against it.

``WorkflowState`` records which steps are done and which arguments each tool
succeeded with, so compaction (or a client that trims its history) cannot erase
progress. ``check(tool, args)`` returns a ``Violation`` for a premature terminal
call or a missing prerequisite, and ``violation_text`` words it for the model
with three escalating tiers. The runner and the proxy sessions share all of it.
"""

from __future__ import annotations

import json
from collections import OrderedDict
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from tether.chat import reads_as_failure
from tether.workflows.spec import Prerequisite, Step, Workflow

__all__ = ["Violation", "ViolationKind", "WorkflowState", "args_label", "violation_text"]

ViolationKind = Literal["premature_terminal", "missing_prerequisite"]

_MAX_ARGS_PER_TOOL = 256


def _norm(value: Any) -> Any:
    """Arguments compared for equality: strings stripped, mappings key-sorted."""
    if isinstance(value, str):
        return value.strip()
    if isinstance(value, Mapping):
        return {str(k): _norm(v) for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))}
    if isinstance(value, list | tuple):
        return [_norm(v) for v in value]
    return value


def _key(args: Mapping[str, Any]) -> str:
    return json.dumps(_norm(args), sort_keys=True, ensure_ascii=False, default=str)


def args_label(tool: str, args: Mapping[str, Any]) -> str:
    """``read_file(path='a.txt')``; long values are shortened."""
    if not args:
        return tool
    parts = []
    for k, v in args.items():
        text = repr(v)
        parts.append(f"{k}={text if len(text) <= 60 else text[:57] + '...'}")
    return f"{tool}({', '.join(parts)})"


@dataclass(frozen=True)
class Violation:
    """Why a call must not run. ``missing``: labels of what has to succeed first; ``next_call``:
    the single call the model should make now; ``key``: identifies repeats for escalation."""

    kind: ViolationKind
    tool: str
    args: Mapping[str, Any]
    missing: tuple[str, ...]
    next_call: str
    next_tool: str
    key: str

    def reason(self) -> str:
        """One line for logs and interventions."""
        what = "terminal tool called early" if self.kind == "premature_terminal" else "missing prerequisite"
        return f"{what}: {args_label(self.tool, self.args)} needs {', '.join(self.missing)}"


def violation_text(violation: Violation, tier: int) -> str:
    """The tool-role error the model reads instead of a result; ``tier`` 1-3 escalates."""
    call = args_label(violation.tool, violation.args)
    missing = ", ".join(violation.missing)
    if violation.kind == "premature_terminal":
        text = (
            f"Not executed: {violation.tool} finishes the task, but these required steps are not done yet: "
            f"{missing}. The next one is {violation.next_call}."
        )
        if tier >= 2:
            text += f" Call {violation.next_call} now. Do not call {violation.tool} until every step is done."
        if tier >= 3:
            text += f" Last warning: your next reply must be a call to {violation.next_call}."
        return text
    text = f"Not executed: {call} requires {missing} first, and that has not succeeded yet."
    if tier >= 2:
        text += f" Call {violation.next_call} now, then call {violation.tool} again."
    if tier >= 3:
        text += f" Last warning: your next reply must be a call to {violation.next_call}."
    return text


class WorkflowState:
    """Progress of one run or proxy session (mutable; one owner at a time)."""

    def __init__(self, workflow: Workflow) -> None:
        self.workflow = workflow
        self.steps_done: list[bool] = [False] * len(workflow.steps)
        self.succeeded: dict[str, OrderedDict[str, dict[str, Any]]] = {}
        self.calls = 0
        self.failures = 0
        self.finished = False
        self.terminal_result: str | None = None
        self._violations: dict[str, int] = {}

    # -- recording ------------------------------------------------------------------------

    def record(self, tool: str, args: Mapping[str, Any], ok: bool, result: str = "") -> list[Step]:
        """Note a finished call; returns the steps it completed (at most one)."""
        self.calls += 1
        if not ok:
            self.failures += 1
            return []
        seen = self.succeeded.setdefault(tool, OrderedDict())
        key = _key(args)
        seen[key] = dict(args)
        seen.move_to_end(key)
        while len(seen) > _MAX_ARGS_PER_TOOL:
            seen.popitem(last=False)
        if tool in self.workflow.terminal and not self.pending_steps():
            self.finished = True
            self.terminal_result = result
        for i, step in enumerate(self.workflow.steps):
            if self.steps_done[i]:
                continue
            if _step_matches(step, tool, args):
                self.steps_done[i] = True
                return [step]
            if self.workflow.ordered:
                break  # only the first pending step can be completed
        return []

    # -- queries --------------------------------------------------------------------------

    def pending_steps(self) -> tuple[Step, ...]:
        return tuple(s for s, done in zip(self.workflow.steps, self.steps_done, strict=True) if not done)

    def next_step(self) -> Step | None:
        pending = self.pending_steps()
        return pending[0] if pending else None

    def succeeded_with(self, tool: str) -> list[dict[str, Any]]:
        return list(self.succeeded.get(tool, {}).values())

    def _prerequisite_met(self, pre: Prerequisite, args: Mapping[str, Any]) -> bool:
        for seen in self.succeeded.get(pre.requires, {}).values():
            if all(_norm(seen.get(theirs)) == _norm(args.get(mine)) for mine, theirs in pre.match):
                return True
        return False

    def check(self, tool: str, args: Mapping[str, Any]) -> Violation | None:
        """The violation a call of ``tool`` with ``args`` would commit now, or None."""
        wf = self.workflow
        if tool in wf.terminal:
            pending = self.pending_steps()
            if pending:
                labels = tuple(s.label() for s in pending)
                return Violation(
                    "premature_terminal",
                    tool,
                    dict(args),
                    labels,
                    labels[0],
                    pending[0].tool,
                    f"terminal:{tool}",
                )
        missing: list[str] = []
        needed: list[str] = []
        for pre in wf.prerequisites_of(tool):
            if self._prerequisite_met(pre, args):
                continue
            needed.append(pre.requires)
            wanted = {theirs: args.get(mine) for mine, theirs in pre.match if args.get(mine) is not None}
            missing.append(args_label(pre.requires, wanted))
        if missing:
            key = f"prereq:{tool}:" + "|".join(missing)
            return Violation(
                "missing_prerequisite", tool, dict(args), tuple(missing), missing[0], needed[0], key
            )
        return None

    def escalate(self, violation: Violation) -> int:
        """Count one more occurrence of ``violation``; returns its tier (1-3)."""
        n = self._violations.get(violation.key, 0) + 1
        self._violations[violation.key] = n
        return min(n, 3)

    @property
    def violations(self) -> int:
        return sum(self._violations.values())

    def snapshot(self) -> dict[str, Any]:
        """A JSON-ready view: steps done and pending, tools that succeeded, counters."""
        return {
            "workflow": self.workflow.name,
            "steps": [
                {"step": s.label(), "done": done}
                for s, done in zip(self.workflow.steps, self.steps_done, strict=True)
            ],
            "pending": [s.label() for s in self.pending_steps()],
            "succeeded": {tool: list(seen.values()) for tool, seen in self.succeeded.items()},
            "calls": self.calls,
            "failures": self.failures,
            "violations": self.violations,
            "finished": self.finished,
        }

    # -- persistence (the Redis session store) ----------------------------------------------

    def to_dict(self) -> dict[str, Any]:
        """Everything needed to rebuild this state for the same workflow, JSON-ready."""
        return {
            "steps_done": list(self.steps_done),
            "succeeded": {tool: list(seen.values()) for tool, seen in self.succeeded.items()},
            "calls": self.calls,
            "failures": self.failures,
            "finished": self.finished,
            "terminal_result": self.terminal_result,
            "violations": dict(self._violations),
        }

    @staticmethod
    def from_dict(workflow: Workflow, data: Mapping[str, Any]) -> WorkflowState:
        """The inverse of ``to_dict``; ``ValueError`` when ``data`` does not fit ``workflow``
        (e.g. its steps changed since the state was saved)."""
        state = WorkflowState(workflow)
        steps_done = [bool(d) for d in data["steps_done"]]
        if len(steps_done) != len(workflow.steps):
            raise ValueError(
                f"saved state has {len(steps_done)} steps, workflow {workflow.name!r} has {len(workflow.steps)}"
            )
        state.steps_done = steps_done
        state.succeeded = {
            str(tool): OrderedDict((_key(args), dict(args)) for args in seen)
            for tool, seen in data["succeeded"].items()
        }
        state.calls = int(data["calls"])
        state.failures = int(data["failures"])
        state.finished = bool(data["finished"])
        result = data["terminal_result"]
        state.terminal_result = None if result is None else str(result)
        state._violations = {str(k): int(v) for k, v in data["violations"].items()}
        return state

    def is_error_text(self, content: str) -> bool:
        """Does a tool message's text read as a failure (``Workflow.error_pattern``)?"""
        return reads_as_failure(content, self.workflow.error_pattern)


def _step_matches(step: Step, tool: str, args: Mapping[str, Any]) -> bool:
    return step.tool == tool and all(_norm(args.get(k)) == _norm(v) for k, v in step.args.items())
