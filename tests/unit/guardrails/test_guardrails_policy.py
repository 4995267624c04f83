"""The retry policy as a table, and the escalating nudge wording."""

from __future__ import annotations

import pytest

from tether.guardrails import (
    TurnFacts,
    Verdict,
    decide,
    not_executed_text,
    nudge_tier,
    tool_required_text,
    unknown_tool_text,
)


@pytest.mark.parametrize(
    ("facts", "verdict"),
    [
        # a text reply is legitimate unless a tool is required
        (TurnFacts(calls=0), Verdict("answer", "text_answer")),
        (TurnFacts(calls=0, attempt=5, max_retries=0), Verdict("answer", "text_answer")),
        (TurnFacts(calls=0, tool_required=True), Verdict("retry", "tool_required", 1)),
        (TurnFacts(calls=0, tool_required=True, attempt=1), Verdict("retry", "tool_required", 2)),
        (TurnFacts(calls=0, tool_required=True, attempt=2), Verdict("fail", "tool_required")),
        (TurnFacts(calls=0, tool_required=True, max_retries=0), Verdict("fail", "tool_required")),
        # good calls execute, required or not
        (TurnFacts(calls=2), Verdict("execute", "ok")),
        (TurnFacts(calls=1, tool_required=True, attempt=2), Verdict("execute", "ok")),
        # unknown names
        (TurnFacts(calls=1, unresolved=1), Verdict("retry", "unknown_tool", 1)),
        (TurnFacts(calls=1, unresolved=1, attempt=2, max_retries=3), Verdict("retry", "unknown_tool", 3)),
        (TurnFacts(calls=1, unresolved=1, attempt=9, max_retries=10), Verdict("retry", "unknown_tool", 3)),
        (TurnFacts(calls=1, unresolved=1, attempt=2), Verdict("fail", "unknown_tool")),
        (TurnFacts(calls=1, unresolved=1, unknown_tool="text"), Verdict("answer", "unknown_tool")),
        (TurnFacts(calls=2, unresolved=1, invalid=1, unknown_tool="text"), Verdict("answer", "unknown_tool")),
        # invalid arguments
        (TurnFacts(calls=1, invalid=1), Verdict("retry", "invalid_arguments", 1)),
        (TurnFacts(calls=1, invalid=1, unknown_tool="text"), Verdict("retry", "invalid_arguments", 1)),
        (TurnFacts(calls=1, invalid=1, attempt=2), Verdict("fail", "invalid_arguments")),
        (TurnFacts(calls=2, unresolved=1, invalid=1), Verdict("retry", "unknown_tool", 1)),
    ],
)
def test_decide(facts: TurnFacts, verdict: Verdict) -> None:
    assert decide(facts) == verdict


@pytest.mark.parametrize(("attempt", "tier"), [(0, 1), (1, 2), (2, 3), (7, 3), (-1, 1)])
def test_nudge_tier(attempt: int, tier: int) -> None:
    assert nudge_tier(attempt) == tier


def test_unknown_tool_text() -> None:
    assert unknown_tool_text("X", ["a", "b", "c"]) == "Error: unknown tool 'X'. Available tools: a, b, c."
    assert unknown_tool_text("X", []) == "Error: unknown tool 'X'. Available tools: (none)."
    with_candidates = unknown_tool_text("READ", ["Read", "read"], candidates=["Read", "read"])
    assert with_candidates.endswith("Did you mean one of: Read, read?")


def test_wording_escalates_over_three_distinct_tiers() -> None:
    unknown = [unknown_tool_text("X", ["a"], tier=t) for t in (1, 2, 3)]
    required = [tool_required_text(["a", "b"], tier=t) for t in (1, 2, 3)]
    for texts in (unknown, required):
        assert len(set(texts)) == 3
    assert all(u.startswith("Error: unknown tool 'X'. Available tools: a.") for u in unknown)
    assert "Last attempt" in unknown[2] and "Last attempt" in required[2]
    assert "a, b" in required[0]
    assert "'get_weather'" in tool_required_text(["get_weather"], named="get_weather")


def test_not_executed_text_asks_to_repeat() -> None:
    assert "Repeat this call" in not_executed_text()
