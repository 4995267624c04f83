"""Running one scenario: the agent loop, context compaction, and the verdict.

The loop is the same for every preset: send the history, execute each returned
tool call on the scenario's :class:`~tether.evals.backend.Backend` and append its
result (errors included), until the model answers in text or ``max_turns`` model
turns are spent. ``tool_choice`` from the scenario applies to the first turn only,
so the model can always finish with an answer.

Compaction is what agent harnesses do when a conversation outgrows its window:
when the serialized history exceeds the scenario's ``context_budget`` (characters),
or the server answers ``context_length_exceeded``, the history goes through tether's
one compaction (:mod:`tether.turns.compaction`, counting characters here): old tool
results are truncated, then the oldest exchanges are elided whole. The system prompt,
the user's request and the newest exchange are always kept.

The loop itself is deliberately local to the evals (the workflow runner adds its own
guardrails — prerequisite enforcement, step nudges — which would make ``bare``
no longer bare).
"""

from __future__ import annotations

import json
import tempfile
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.chat import Message
from tether.evals.backend import Backend, CallOutcome
from tether.evals.checks import check_expect
from tether.evals.client import ChatClient, Reply
from tether.evals.scenario_spec import Scenario, ToolSpecModel
from tether.turns.compaction import CompactionPolicy
from tether.turns.compaction import compact as compact_messages

__all__ = ["EpisodeResult", "compact", "replay_reference", "run_episode", "tools_of"]


@dataclass
class EpisodeResult:
    """What happened in one scenario run and whether its expectations held."""

    passed: bool
    failures: list[str]
    calls: list[CallOutcome]
    answer: str | None
    turns: int = 0
    model_calls: int = 0
    retries: int = 0
    compactions: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cached_tokens: int = 0
    interventions: Counter[str] = field(default_factory=Counter)
    error: str = ""

    @property
    def tool_errors(self) -> int:
        return sum(not c.ok for c in self.calls)

    def add(self, reply: Reply) -> None:
        self.model_calls += reply.model_calls
        self.retries += reply.retries
        self.prompt_tokens += reply.prompt_tokens
        self.completion_tokens += reply.completion_tokens
        self.cached_tokens += reply.cached_tokens
        self.interventions.update(str(n.get("kind")) for n in reply.interventions)

    def summary(self) -> dict[str, Any]:
        return {
            "calls": [
                {"name": c.name, "arguments": c.arguments, "ok": c.ok, "result": c.text[:200]}
                for c in self.calls
            ],
            "answer": self.answer,
            "failures": self.failures,
        }


def tools_of(scenario: Scenario, library: Mapping[str, ToolSpecModel]) -> list[dict[str, Any]]:
    """The OpenAI tool list a scenario offers."""
    return [
        {
            "type": "function",
            "function": {
                "name": name,
                "description": library[name].description,
                "parameters": dict(library[name].parameters),
            },
        }
        for name in scenario.tools
    ]


def _size(messages: Sequence[Mapping[str, Any]]) -> int:
    return len(json.dumps(list(messages), ensure_ascii=False))


# Recent exchanges are what an agent acts on; older ones may be truncated, then elided.
_POLICY = CompactionPolicy(keep_last=1)


def compact(messages: list[dict[str, Any]], budget: int | None, *, force: bool = False) -> bool:
    """Shrink ``messages`` (OpenAI dicts, in place) to ``budget`` characters with tether's one
    compaction (``force``: at least one step smaller). Returns whether anything changed.

    The system prompt, the user's request and the newest exchange are never touched; an
    assistant turn is only ever removed together with its tool results.
    """
    size = _size(messages)
    target = size if budget is None else budget
    if force:
        target = min(target, size - 1)
    if size <= target:
        return False
    result = compact_messages(
        [Message.from_openai(m) for m in messages],
        target,
        lambda msgs: _size([m.to_openai() for m in msgs]),
        policy=_POLICY,
    )
    if not result.changed or result.tokens >= size:
        return False
    messages[:] = [m.to_openai() for m in result.messages]
    return True


async def run_episode(
    client: ChatClient,
    scenario: Scenario,
    library: Mapping[str, ToolSpecModel],
    preset: str,
    *,
    temperature: float = 0.0,
    seed: int | None = None,
    max_tokens: int | None = 256,
) -> EpisodeResult:
    """Run ``scenario`` under ``preset`` and check its expectations against the final state."""
    with tempfile.TemporaryDirectory(prefix="tether-scenario-") as work:
        backend = Backend(scenario, library, Path(work))
        tools = tools_of(scenario, library)
        messages: list[dict[str, Any]] = []
        if scenario.system:
            messages.append({"role": "system", "content": scenario.system})
        messages.append({"role": "user", "content": scenario.prompt})
        result = EpisodeResult(False, [], [], None)
        turn = 0
        while turn < scenario.max_turns:
            if compact(messages, scenario.context_budget):
                result.compactions += 1
            choice = scenario.tool_choice if turn == 0 and scenario.tool_choice != "auto" else None
            reply = await client.chat(
                messages,
                tools,
                preset,
                tool_choice=choice,
                temperature=temperature,
                seed=seed,
                max_tokens=max_tokens,
            )
            result.add(reply)
            if reply.error:
                if reply.error_code == "context_length_exceeded" and compact(
                    messages, scenario.context_budget, force=True
                ):
                    result.compactions += 1
                    continue
                result.error = reply.error
                break
            turn += 1
            calls = reply.tool_calls
            if not calls:
                result.answer = reply.text
                break
            messages.append({"role": "assistant", "content": reply.text or None, "tool_calls": calls})
            for call in calls:
                fn = call.get("function") or {}
                outcome = backend.call(str(fn.get("name", "")), fn.get("arguments", "{}"))
                result.calls.append(outcome)
                messages.append({"role": "tool", "tool_call_id": call.get("id", ""), "content": outcome.text})
        result.turns = turn
        result.failures = check_expect(scenario.expect, result.calls, backend, result.answer)
        if result.error:
            result.failures.insert(0, f"request failed: {result.error}")
        result.passed = not result.failures
        return result


def replay_reference(
    scenario: Scenario,
    library: Mapping[str, ToolSpecModel],
    calls: Sequence[tuple[str, Mapping[str, Any]]] | None = None,
    answer: str | None = None,
) -> list[str]:
    """Execute ``calls`` (default: the scenario's reference) on a fresh backend and check the
    expectations with ``answer`` as the final text; returns the failures (empty: passed)."""
    if calls is None:
        calls = [(c.tool, c.args) for c in scenario.reference.calls]
        answer = scenario.reference.answer if answer is None else answer
    with tempfile.TemporaryDirectory(prefix="tether-scenario-") as work:
        backend = Backend(scenario, library, Path(work))
        outcomes = [backend.call(name, dict(args)) for name, args in calls]
        return check_expect(scenario.expect, outcomes, backend, answer)
