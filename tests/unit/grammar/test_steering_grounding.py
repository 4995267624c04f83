"""Layer 0's steering (the call-or-answer decision, the name prior, call-list length) and grounding,
on a synthetic byte vocabulary: the mechanisms, deterministically; the real model has its own tests."""

from __future__ import annotations

import numpy as np

from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.grounding import ArgsTracker, GroundingProcessor, SpanIndex, extractive_kind
from tether.grammar.masks import MaskCache
from tether.grammar.plan import build_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.steering import CallList, Steering, apply_decision, log_odds
from tether.grammar.vocab import TokenVocab

EOS = 256
WORDS = [
    b'{"',
    b"tool",
    b"response",
    b'_calls": [',
    b'{"name": "',
    b"get_weather",
    b"get_time",
    b'", "arguments": ',
    b'": "',
    b"Paris",
    b"Par",
    b"is",
    b"Lon",
    b'}}, {"',
    b"}}]}",
]
PIECES = [bytes([i]) for i in range(256)] + [b"", *WORDS]
VOCAB = TokenVocab.from_pieces(PIECES, [EOS])
TOOLS = [
    ToolSpec(
        "get_weather",
        "weather",
        {"type": "object", "properties": {"city": {"type": "string"}, "days": {"type": "integer"}}},
    ),
    ToolSpec(
        "get_time",
        "time",
        {"type": "object", "properties": {"tz": {"type": "string", "enum": ["UTC", "CET"]}}},
    ),
]


def tid(piece: bytes) -> int:
    return PIECES.index(piece)


def constraint(steering: Steering) -> ToolConstraint:
    plan = build_plan(get_format("generic"), TOOLS, "names", RegexCompiler(VOCAB))
    return ToolConstraint(plan, VOCAB, MaskCache(plan.automaton, VOCAB), 0, steering=steering)


def step(c: ToolConstraint, ids: list[int], logits: np.ndarray) -> np.ndarray:
    return c(np.asarray(ids, dtype=np.intc), logits.copy())


def test_the_decision_combines_the_models_log_odds_with_the_prior() -> None:
    logits = np.zeros(len(PIECES), dtype=np.single)
    logits[tid(b"tool")] = 2.0  # the model leans toward a call
    logits[tid(b"response")] = 1.0
    for prior, calls in [(0.0, True), (-3.0, False)]:
        c = constraint(Steering(call_prior=prior, decide=True))
        out = step(c, [tid(b'{"')], logits)
        assert (
            c.decision is not None
            and abs(
                c.decision.log_odds
                - log_odds(
                    logits,
                    np.asarray([tid(b"tool"), ord("t")], dtype=np.int32),
                    np.asarray([tid(b"response"), ord("r")], dtype=np.int32),
                )
            )
            < 1e-3
        )
        assert c.decision.called is calls and c.decision.overridden is (not calls)
        assert bool(np.isfinite(out[tid(b"tool")])) is calls and bool(np.isfinite(out[tid(b"response")])) is (
            not calls
        )


def test_apply_decision_keeps_one_branch() -> None:
    logits = np.asarray([0.0, 1.0, 2.0, 3.0], dtype=np.single)
    out, d = apply_decision(
        logits, np.asarray([0, 1], dtype=np.int32), np.asarray([2, 3], dtype=np.int32), prior=5.0
    )
    assert d.called and np.isfinite(out[:2]).all() and not np.isfinite(out[2:]).any()


def test_name_prior_lifts_the_relevant_name_where_the_name_starts() -> None:
    c = constraint(Steering(name_prior={"get_time": 5.0, "get_weather": 0.0}))
    prefix = [tid(b'{"'), tid(b"tool"), tid(b'_calls": ['), tid(b'{"name": "')]
    for k in range(1, len(prefix)):
        step(c, prefix[:k], np.zeros(len(PIECES), dtype=np.single))
    out = step(c, prefix, np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"get_time")] == 5.0 and out[tid(b"get_weather")] == 0.0


def test_call_list_ends_at_the_first_repeat_and_at_the_cap() -> None:
    calls = CallList(max_calls=None)
    calls.feed(b'{"tool_calls": [{"name": "a", "arguments": {"x": "}"}}')
    assert calls.must_end is False and calls.calls == [b'{"name": "a", "arguments": {"x": "}"}}']
    calls.feed(b', {"name": "a", "arguments": {"x": "}"}}')
    assert calls.repeated and calls.must_end
    capped = CallList(max_calls=1)
    capped.feed(b'{"tool_calls": [{"name": "a", "arguments": {}}')
    assert capped.must_end


def test_a_token_that_ends_a_repeated_call_cannot_run_on_into_another() -> None:
    c = constraint(Steering(end_repeats=True))
    call = b'{"name": "get_time", "arguments": {"tz": "UTC"'
    ids = [*b'{"tool_calls": [', *call, tid(b'}}, {"'), *call[2:]]
    out = None
    for k in range(1, len(ids) + 1):
        out = step(c, ids[:k], np.zeros(len(PIECES), dtype=np.single))
    assert out is not None
    assert not np.isfinite(out[tid(b'}}, {"')])  # the second call repeats the first: no third
    assert np.isfinite(out[tid(b"}}]}")]) and np.isfinite(out[ord("}")])


def test_extractive_parameters() -> None:
    assert extractive_kind({"type": "string"}) == "string"
    assert extractive_kind({"type": "integer"}) == "number"
    assert extractive_kind({"type": "array", "items": {"type": "number"}}) == "number"
    for schema in (
        {"type": "string", "enum": ["a"]},
        {"type": "string", "default": "x"},
        {"type": "boolean"},
    ):
        assert extractive_kind(schema) is None


def test_span_index_knows_exactly_the_substrings() -> None:
    index = SpanIndex(b"weather in Paris, then London", VOCAB)
    assert index.occurrences(b"Par") == [14] and index.occurrences(b"Rome") == []
    assert tid(b"is") in index.continuations(index.occurrences(b"Par")).tolist()
    assert index.at_boundary(index.occurrences(b"Paris")) and not index.at_boundary(index.occurrences(b"Par"))
    assert {tid(b"Paris"), tid(b"Lon")} <= set(index.start().tolist())


def test_args_tracker_follows_keys_values_and_the_tool() -> None:
    tr = ArgsTracker(b'"arguments":', frozenset({"get_weather"}))
    tr.feed(b'{"tool_calls": [{"name": "get_weather", "arguments": {"city": "Pa')
    assert (tr.tool, tr.value_key(), bytes(tr.string or b"")) == ("get_weather", "city", b"Pa")
    tr.feed(b'ris", "days": 1')
    assert tr.value_key() == "days" and bytes(tr.number or b"") == b"1"
    tr.feed(b"}}]}")
    assert tr.stack == [] and tr.value_key() is None


def test_grounding_prefers_the_conversations_own_values() -> None:
    g = GroundingProcessor(
        VOCAB, "What is the weather in Paris for 3 days from 1941?", TOOLS, prompt_len=0, bias=4.0
    )
    text = b'{"tool_calls": [{"name": "get_weather", "arguments": {"city": "'
    ids = [b for b in text]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"Paris")] == 4.0 and out[tid(b"Par")] == 4.0 and out[tid(b"Lon")] == 0.0
    ids += [tid(b"Par")]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"is")] == 4.0 and out[ord('"')] == 0.0  # "Par" is not a whole word yet
    ids += [tid(b"is")]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord('"')] == 4.0  # "Paris" is: closing it is preferred too
    ids += [ord('"'), *b', "days": ']
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord("3")] == 4.0 and out[ord("7")] == 0.0  # numbers from the conversation
    out = g(np.asarray([*ids, ord("1"), ord("9")], dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord("4")] == 4.0 and out[ord("1")] == 0.0  # 19… continues toward 1941, not back to 1
    ids += [ord("1")]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord("1")] == 0.0  # "1" is not a number of the conversation; nothing continues it
    masked = np.full(len(PIECES), -np.inf, dtype=np.single)
    assert not np.isfinite(g(np.asarray(ids, dtype=np.intc), masked)).any()  # a bias never re-opens a token
