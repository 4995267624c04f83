"""Layer 0's steering (the call-or-answer decision, the name prior, call-list length) and grounding,
on a synthetic byte vocabulary: the mechanisms, deterministically; the real model has its own tests."""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from tether.grammar.args_tracker import ArgsTracker
from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.masks import MaskCache
from tether.grammar.plan import build_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.spans import SpanIndex
from tether.grammar.steering import LOG_ODDS_BOUND, CallList, Steering, apply_decision, log_odds
from tether.grammar.vocab import TokenVocab
from tether.schema_kinds import composed, extractive_kind

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


def test_the_models_log_odds_count_up_to_a_bound_so_a_prior_beyond_it_settles_the_answer() -> None:
    call, answer = np.asarray([0], dtype=np.int32), np.asarray([1], dtype=np.int32)
    sure = np.asarray([40.0, 0.0], dtype=np.single)  # log-odds of a call 40: beyond any real model's
    _, d = apply_decision(sure, call, answer, prior=-(LOG_ODDS_BOUND + 1))
    assert not d.called and d.log_odds == 40.0  # reported as measured, decided within the bound
    _, d = apply_decision(sure, call, answer, prior=-(LOG_ODDS_BOUND - 1))
    assert d.called
    assert Steering(call_prior=-(LOG_ODDS_BOUND + 0.5), decide=True).settled_answer
    assert not Steering(call_prior=-(LOG_ODDS_BOUND - 0.5), decide=True).settled_answer
    assert not Steering(call_prior=-100.0).settled_answer  # no decision asked for


def _walk(c: ToolConstraint, ids: list[int], start: int = 1) -> np.ndarray:
    """Step ``c`` through every prefix of ``ids`` from ``start`` on; the last step's logits."""
    out = np.zeros(len(PIECES), dtype=np.single)
    for k in range(start, len(ids) + 1):
        out = step(c, ids[:k], np.zeros(len(PIECES), dtype=np.single))
    return out


def test_name_prior_lifts_the_relevant_name_and_decides_where_names_part() -> None:
    prefix = [tid(b'{"'), tid(b"tool"), tid(b'_calls": ['), tid(b'{"name": "')]
    out = _walk(constraint(Steering(name_prior={"get_time": 5.0, "get_weather": 0.0})), prefix)
    assert out[tid(b"get_time")] == 5.0 and out[tid(b"get_weather")] == 0.0
    c = constraint(Steering(name_prior={"get_time": 5.0, "get_weather": 1.0}))
    out = _walk(c, prefix)
    assert out[ord("g")] == 5.0  # "g" begins both names: the better prior, the same for either path
    ids = [*prefix, *b"get_"]
    out = _walk(c, ids, len(prefix) + 1)
    assert out[ord("t")] == 5.0 and out[ord("w")] == 1.0  # where they part, each name's own prior


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


def test_composed_parameters_are_the_models_to_write() -> None:
    text = {"type": "string"}
    for name in ("content", "contents", "command", "newCommand", "source_code", "regex", "body", "CMD"):
        assert composed(name) and extractive_kind(text, name) is None, name
    for name in ("city", "filePath", "location", "name", "query", "contentious"):
        assert not composed(name) and extractive_kind(text, name) == "string", name
    assert extractive_kind({"type": "integer"}, "code") == "number"  # a number is still named
    # A code of some kind is a name, not a program: an error code, a country code.
    for name in ("country_code", "zipCode", "error_code"):
        assert not composed(name), name
    assert not composed("code", "Error code, e.g. E1234") and composed("code", "Python code to run")
    assert composed("code") and composed("code", "The code to execute") and composed("code_snippet")


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
        VOCAB, "What is the weather in Paris for 3 of the years from 1941?", TOOLS, prompt_len=0, bias=4.0
    )
    text = b'{"tool_calls": [{"name": "get_weather", "arguments": {"city": "'
    ids = [b for b in text]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"Paris")] == 4.0 and out[tid(b"Par")] == 4.0 and out[tid(b"Lon")] == 0.0
    ids += [tid(b"Par")]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    # "Par" is not a whole word yet: a word begun is finished, at twice the preference.
    assert out[tid(b"is")] == 8.0 and out[ord('"')] == 0.0
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


def test_a_short_call_list_costs_its_end_and_a_full_one_does_not() -> None:
    c = constraint(Steering(max_calls=2, end_repeats=True, short_list_bias=3.0))
    first = [*b'{"tool_calls": [', *b'{"name": "get_weather", "arguments": {"city": "Paris"']
    out = None
    for k in range(1, len(first) + 1):
        out = step(c, first[:k], np.zeros(len(PIECES), dtype=np.single))
    assert out is not None  # inside the first of two calls: closing the list with it costs 3
    assert out[tid(b"}}]}")] == -3.0 and out[tid(b'}}, {"')] == 0.0 and out[ord("}")] == 0.0
    ids = [*first, ord("}"), ord("}")]  # the call is written; the list is at its fork
    out = step(c, ids, np.zeros(len(PIECES), dtype=np.single))
    assert out[ord("]")] == -3.0 and out[ord(",")] == 0.0
    ids += [*b', {"name": "get_weather", "arguments": {"city": "Lon"']
    for k in range(len(first) + 3, len(ids) + 1):
        out = step(c, ids[:k], np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"}}]}")] == 0.0  # two calls: the list may end (the cap ends it)
    plain = constraint(Steering(max_calls=2, end_repeats=True))
    for k in range(1, len(first) + 1):
        out = step(plain, first[:k], np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"}}]}")] == 0.0  # no bias asked: no preference


def _grounding_step(g: GroundingProcessor, text: bytes) -> np.ndarray:
    return g(np.asarray(list(text), dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))


LOAN = ToolSpec(
    "loan",
    "a loan",
    {
        "type": "object",
        "properties": {
            "amount": {"type": "number"},
            "rate": {"type": "number", "description": "in percent per year"},
        },
    },
)


def test_a_whole_number_of_the_conversation_is_ended_there() -> None:
    g = GroundingProcessor(VOCAB, "Borrow 5000 at 7% for 3 years", [LOAN], prompt_len=0)
    head = b'{"tool_calls": [{"name": "loan", "arguments": {"amount": '
    out = _grounding_step(g, head + b"3")
    assert out[ord(",")] == 4.0 and out[ord("}")] == 4.0 and out[ord("0")] == 0.0
    g = GroundingProcessor(VOCAB, "Borrow 5000 at 7% for 3 years", [LOAN], prompt_len=0)
    out = _grounding_step(g, head + b"500")
    assert out[ord("0")] == 4.0 and out[ord(",")] == 0.0  # 500 is not the conversation's: go on to 5000


def test_within_a_call_each_span_fills_one_parameter() -> None:
    g = GroundingProcessor(VOCAB, "Borrow 5000 at 5% for 3 years", [LOAN], prompt_len=0)
    head = b'{"tool_calls": [{"name": "loan", "arguments": {"amount": 5000, "rate": '
    out = _grounding_step(g, head)
    assert out[ord("5")] == 4.0 and out[ord("3")] == 4.0
    out = _grounding_step(g, head + b"5")  # the 5 of "5%", not the 5000 the amount took
    assert out[ord("0")] == 0.0 and out[ord(",")] == 4.0
    fresh = GroundingProcessor(VOCAB, "Borrow 5000 at 5% for 3 years", [LOAN], prompt_len=0)
    out = _grounding_step(fresh, b'{"tool_calls": [{"name": "loan", "arguments": {"rate": 5')
    assert out[ord("0")] == 4.0 and out[ord(",")] == 4.0  # nothing taken yet: 5000 and 5 both fit


def test_each_call_takes_the_next_item_of_the_enumerated_list() -> None:
    source = "Weather in Paris and London, and Paris time"
    listed = (len("Weather in "), len("Weather in Paris and London"))
    g = GroundingProcessor(VOCAB, source, TOOLS, prompt_len=0, listed=listed)
    call = b'{"name": "get_weather", "arguments": {"city": "'
    first = b'{"tool_calls": [' + call + b'Paris"}}, ' + call
    ids = [*first[: -len(call)], *call]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    # "Paris" of the list is taken; "Paris" after it (outside the list) still fits, so does London.
    assert out[tid(b"Lon")] == 4.0 and out[tid(b"Paris")] == 4.0
    ids += [*b"Paris"]
    out = g(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[ord('"')] == 4.0  # the later "Paris" is a whole span too
    unlisted = GroundingProcessor(VOCAB, "Weather in Paris and London", TOOLS, prompt_len=0, listed=listed)
    ids = [*first]
    out = unlisted(np.asarray(ids, dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))
    assert out[tid(b"Lon")] == 4.0 and out[tid(b"Paris")] == 0.0 and out[tid(b"Par")] == 0.0


def test_numbers_are_known_however_the_conversation_writes_them() -> None:
    from tether.grammar.spans import number_spans

    text = b"Borrow $200,000 at 5% for two years; 213 million people, 1.5 billion, 8 percent, a dozen"
    found = {n for _, _, n in number_spans(text)}
    assert {b"200000", b"5", b"0.05", b"2", b"213", b"213000000", b"1500000000", b"0.08", b"12"} <= found
    assert b"000" not in found and b"200" not in found  # the pieces of a grouped number are not numbers


def test_numbers_written_with_a_leading_zero_are_given_as_json_writes_them() -> None:
    import json

    from tether.grammar.spans import number_spans

    found = [n for _, _, n in number_spans(b"Agent 007 at 05:30 on 2024-03-09, 0.5 and 10")]
    assert {b"7", b"5", b"30", b"0.5", b"10"} <= set(found)
    assert all(json.loads(n) is not None for n in found)  # every one parses


def test_grouped_and_scaled_numbers_are_grounded_whole() -> None:
    g = GroundingProcessor(VOCAB, "A house for $200,000 in a town of 2 million", [LOAN], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "loan", "arguments": {"amount": 200')
    assert out[ord("0")] == 4.0 and out[ord(",")] == 0.0  # on to 200000, not ended at 200
    g = GroundingProcessor(VOCAB, "A house for $200,000 in a town of 2 million", [LOAN], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "loan", "arguments": {"amount": 2000000')
    assert out[ord(",")] == 4.0 and out[ord("}")] == 4.0


def _saving(rate: Mapping[str, object]) -> ToolSpec:
    return ToolSpec(
        "save", "a saving", {"type": "object", "properties": {"amount": {"type": "number"}, "rate": rate}}
    )


def test_the_head_of_a_grouped_number_is_not_ended_at_its_comma() -> None:
    source = "Invest $10,000 for 10 years"
    g = GroundingProcessor(VOCAB, source, [LOAN], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "loan", "arguments": {"amount": 10')
    assert out[ord("0")] == 4.0 and out[ord(",")] == 0.0  # on to 10000, though "10 years" is a 10
    g = GroundingProcessor(VOCAB, source, [LOAN], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "loan", "arguments": {"amount": 10000, "rate": 10')
    assert out[ord(",")] == 4.0  # 10,000 is taken: the 10 of "10 years" ends here


def test_a_percentage_is_a_fraction_unless_the_parameter_counts_in_percent() -> None:
    head = b'{"tool_calls": [{"name": "save", "arguments": {"rate": '
    for rate, fraction in (
        ({"type": "number"}, True),
        ({"type": "number", "description": "Enter as a decimal, e.g. 5% is 0.05"}, True),
        ({"type": "number", "description": "The rate as a percentage"}, False),
        ({"type": "integer"}, False),
    ):
        g = GroundingProcessor(VOCAB, "Save 300 at 7% for 3 years", [_saving(rate)], prompt_len=0)
        out = _grounding_step(g, head)
        assert (out[ord("0")] == 4.0, out[ord("7")] == 4.0) == (fraction, not fraction), rate
        assert out[ord("3")] == 4.0  # other numbers are untouched


def test_a_scaled_number_means_the_scaled_value_unless_the_parameter_counts_in_that_unit() -> None:
    head = b'{"tool_calls": [{"name": "save", "arguments": {"amount": 213'
    g = GroundingProcessor(VOCAB, "A town of 213 million people", [_saving({"type": "number"})], prompt_len=0)
    out = _grounding_step(g, head)
    assert out[ord("0")] == 4.0 and out[ord(",")] == -4.0  # on to 213000000: ending at 213 costs
    g = GroundingProcessor(VOCAB, "Save 5000 at 5% a year", [_saving({"type": "number"})], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "save", "arguments": {"rate": 5')
    assert out[ord(",")] == 4.0  # not this rate's reading of "5%", but the model chose it: not pushed to 5000
    tool = ToolSpec(
        "save",
        "",
        {"type": "object", "properties": {"amount": {"type": "number", "description": "in millions"}}},
    )
    g = GroundingProcessor(VOCAB, "A town of 213 million people", [tool], prompt_len=0)
    out = _grounding_step(g, head)
    assert out[ord(",")] == 4.0 and out[ord("0")] == 0.0


def test_a_mentioned_switch_prefers_true() -> None:
    route = ToolSpec(
        "route",
        "a route",
        {
            "type": "object",
            "properties": {"to": {"type": "string"}, "avoid_tolls": {"type": "boolean"}},
        },
    )
    head = b'{"tool_calls": [{"name": "route", "arguments": {"to": "Rome", "avoid_tolls": '
    flags = {"route": frozenset({"avoid_tolls"})}
    g = GroundingProcessor(VOCAB, "Route to Rome avoiding toll roads", [route], prompt_len=0, flags=flags)
    out = _grounding_step(g, head)
    assert out[ord("t")] == 4.0 and out[ord("f")] == 0.0
    out = _grounding_step(g, head + b"t")
    assert out[ord("r")] == 0.0  # the value has begun: nothing more to prefer
    plain = GroundingProcessor(VOCAB, "Route to Rome", [route], prompt_len=0)
    assert _grounding_step(plain, head)[ord("t")] == 0.0


def test_starts_outside_blocked_positions_are_the_union_over_the_free_word_starts() -> None:
    text = b"weather in Paris, then London, then Paris again; mail bob@example.com"
    index = SpanIndex(text, VOCAB)
    words = [0, *(p for p in range(1, len(text)) if not (chr(text[p - 1]).isalnum() or text[p - 1] in b"@_"))]
    for blocked in (set(), set(range(11, 16)), set(range(0, 30)), set(range(len(text)))):
        at = index._tokens_at()
        union = sorted({t for p in words if p not in blocked for t in at[p]})
        assert index.start_except(blocked).tolist() == union
    # A value begins where a word does: "bob@example.com", not "example.com" or "ob".
    start = index.start().tolist()
    assert ord("b") in start and ord("P") in start
    assert ord("e") not in start and ord("x") not in start  # "example" only after "@", "xample" mid-word


READ = ToolSpec(
    "read_file",
    "read a file",
    {"type": "object", "properties": {"path": {"type": "string"}, "note": {"type": "string"}}},
)


def test_a_file_name_parameter_begins_where_the_text_writes_a_file_name() -> None:
    g = GroundingProcessor(VOCAB, "Read Paris.txt, then src/app.py. Thanks.", [READ], prompt_len=0)
    out = _grounding_step(g, b'{"tool_calls": [{"name": "read_file", "arguments": {"path": "')
    # Each name's longest first token, at twice the bias: a file name is copied, never composed.
    assert out[tid(b"Paris")] == 8.0 and out[ord("s")] == 8.0  # Paris.txt, src/app.py
    assert out[tid(b"Par")] == 0.0 and out[ord("P")] == 0.0  # a shorter start runs on into other names
    assert out[ord("R")] == 0.0 and out[ord("T")] == 0.0  # other words are not file names
    out = _grounding_step(g, b'{"tool_calls": [{"name": "read_file", "arguments": {"path": "Par')
    assert out[tid(b"is")] == 12.0 and out[ord('"')] == 0.0  # a name begun is copied whole: three times
    out = _grounding_step(g, b'{"tool_calls": [{"name": "read_file", "arguments": {"path": "Paris.txt')
    # It ends where the text's name ends, at the plain bias: a path may go on past a directory.
    assert out[ord('"')] == 4.0 and out[ord(".")] == 0.0
    other = GroundingProcessor(VOCAB, "Read Paris.txt, then src/app.py. Thanks.", [READ], prompt_len=0)
    out = _grounding_step(other, b'{"tool_calls": [{"name": "read_file", "arguments": {"note": "')
    assert out[ord("R")] == 4.0  # another parameter: any span of the conversation
    plain = GroundingProcessor(VOCAB, "Read the notes, version 2.5 please", [READ], prompt_len=0)
    out = _grounding_step(plain, b'{"tool_calls": [{"name": "read_file", "arguments": {"path": "')
    assert out[ord("R")] == 4.0 and out[ord("n")] == 4.0  # no file name written: every span start


def test_file_name_parameters() -> None:
    from tether.schema_kinds import names_a_file

    assert all(names_a_file(n) for n in ("path", "filePath", "file_path", "filename", "target_file"))
    assert not any(names_a_file(n) for n in ("profile", "city", "content", "query"))
