"""Runaway values under ``strict``: a looping array or string may only close (``steering.ValueRuns``).

Driven on the synthetic vocabulary of ``test_constraint`` by a greedy "model" that wants a given text
and, off its script, prefers to close what is open.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

from tests.unit.grammar.test_constraint import EOS, constraint_for, drive, make_vocab
from tether.grammar.constraint import ToolConstraint
from tether.grammar.formats import get_format
from tether.grammar.formats.base import ToolSpec
from tether.grammar.masks import MaskCache
from tether.grammar.plan import build_plan
from tether.grammar.regex import RegexCompiler
from tether.grammar.steering import (
    ARRAY_MIN_ITEMS,
    STRING_MIN_BYTES,
    Steering,
    ValueRuns,
)

INTS: dict[str, Any] = {"type": "array", "items": {"type": "integer"}}


def tool(value: dict[str, Any]) -> list[ToolSpec]:
    return [ToolSpec("plot", "Plot", {"type": "object", "properties": {"v": value}, "required": ["v"]})]


def call(fmt: str, value: str) -> str:
    if fmt == "generic":
        return f'{{"tool_calls": [{{"name": "plot", "arguments": {{"v": {value}}}}}]}}'
    return f'<tool_call>{{"name": "plot", "arguments": {{"v": {value}}}}}</tool_call>'


def written(
    value: dict[str, Any], wanted: str, *, fmt: str = "generic", mode: str = "strict", bound: bool = True
) -> tuple[Any, ToolConstraint]:
    """What the model writes for ``v`` when it wants ``wanted``, parsed."""
    vocab = make_vocab()
    plan = build_plan(get_format(fmt), tool(value), mode, RegexCompiler(vocab), parallel=False)  # type: ignore[arg-type]
    c = ToolConstraint(
        plan, vocab, MaskCache(plan.automaton, vocab), prompt_len=3, steering=Steering(bound_values=bound)
    )
    out, _ = drive(vocab, c, call(fmt, wanted), steps=4000)
    body = out if fmt == "generic" else out[len("<tool_call>") : out.index("}}") + 2]
    data = json.loads(body)
    args = data["tool_calls"][0]["arguments"] if fmt == "generic" else data["arguments"]
    return args["v"], c


def listing(items: list[str]) -> str:
    return "[" + ", ".join(items) + "]"


@pytest.mark.parametrize("fmt", ["generic", "hermes"])
def test_a_repeated_array_is_closed(fmt: str) -> None:
    got, c = written(INTS, listing(["1"] * 100), fmt=fmt)
    assert got == [1] * ARRAY_MIN_ITEMS
    assert c.stats.closed_values >= 1


def test_without_the_rule_the_repeat_runs_on() -> None:
    got, _ = written(INTS, listing(["1"] * 60), bound=False)
    assert got == [1] * 60


def test_a_repeating_cycle_is_closed() -> None:
    got, _ = written(INTS, listing(["1", "2", "3"] * 30))
    assert got == [1, 2, 3] * 5 + [1]  # 16 items: five and a third cycles
    got, _ = written(INTS, listing(["1", "2"] * 40))
    assert got == [1, 2] * 8


def test_distinct_items_are_never_capped() -> None:
    items = [str(i) for i in range(60)]
    got, c = written(INTS, listing(items))
    assert got == list(range(60))
    assert c.stats.closed_values == 0
    # Repeats that stop short of the limit are not a loop either.
    short = ["7"] * (ARRAY_MIN_ITEMS - 1) + ["8"] + ["7"] * (ARRAY_MIN_ITEMS - 1)
    got, c = written(INTS, listing(short))
    assert got == [int(x) for x in short]
    assert c.stats.closed_values == 0


def test_max_items_still_bounds_the_array() -> None:
    got, _ = written({**INTS, "maxItems": 5}, listing([str(i) for i in range(40)]))
    assert got == [0, 1, 2, 3, 4]
    got, _ = written({**INTS, "maxItems": 10}, listing(["1"] * 40))
    assert got == [1] * 10  # the schema's own bound comes first
    got, _ = written({**INTS, "maxItems": 40}, listing(["1"] * 40))
    assert got == [1] * ARRAY_MIN_ITEMS  # the repeat limit comes first


def test_min_items_wins_over_the_rule() -> None:
    """Where the schema does not let the array close yet, the rule steps aside (no dead end)."""
    got, c = written({**INTS, "minItems": 20}, listing(["1"] * 60))
    assert got == [1] * 20
    assert c.stats.dead_ends == 0


def test_a_repeated_string_item_is_closed_even_by_a_quote_comma_token() -> None:
    got, _ = written({"type": "array", "items": {"type": "string"}}, listing(['"hi"'] * 60))
    assert got == ["hi"] * ARRAY_MIN_ITEMS


def test_nested_arrays_are_bounded_each_at_its_own_level() -> None:
    nested = {"type": "array", "items": INTS}
    got, _ = written(nested, listing([listing(["1", "2"])] * 40))
    assert got == [[1, 2]] * ARRAY_MIN_ITEMS
    got, _ = written(nested, listing([listing(["3"] * 40), listing(["4"])]))
    assert got[0] == [3] * ARRAY_MIN_ITEMS  # (then off its script, the model closes everything)


def test_a_looping_string_is_closed() -> None:
    got, c = written({"type": "string"}, '"' + "hi" * 200 + '"')
    assert got == "hi" * (STRING_MIN_BYTES // 2)
    assert c.stats.closed_values == 1
    got, _ = written({"type": "string"}, '"Sure! ' + "hello world" * 40 + '"')
    assert got.startswith("Sure! hello world") and len(got) < len("Sure! ") + STRING_MIN_BYTES + 11


def test_a_normal_long_string_is_not_closed() -> None:
    text = "".join(f"line {i}: the quick brown fox jumps over the lazy dog. " for i in range(30))
    got, c = written({"type": "string"}, json.dumps(text))
    assert got == text
    assert c.stats.closed_values == 0
    # A separator line shorter than the limit, and a unit longer than any counted period, pass whole.
    rule = "-" * (STRING_MIN_BYTES - 8)
    cycle = "abcdefghijklmnopqrstuvwxyz0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ" * 5
    for text in (f"# {rule}\nx = 1", cycle):
        got, _ = written({"type": "string"}, json.dumps(text))
        assert got == text


def test_a_string_with_a_pattern_keeps_its_grammar() -> None:
    """Where the schema cannot close the string, nothing is forced (no dead end)."""
    got, c = written({"type": "string", "pattern": "^(ab){80}$"}, '"' + "ab" * 80 + '"')
    assert got == "ab" * 80
    assert c.stats.dead_ends == 0


def test_names_mode_has_no_schema_and_no_rule() -> None:
    vocab, c = constraint_for("hermes", "names", tool(INTS))
    out, _ = drive(vocab, c, call("hermes", listing(["1"] * 40)), steps=4000)
    assert out.count("1") == 40
    assert c.values is None


def test_the_rule_adds_no_automaton_states() -> None:
    """The mask cache is keyed by the automaton's state alone: the rule keeps no count there, so a long
    run costs no more masks than a short one (the closing path adds the states of ``]}}]}``)."""
    counts = []
    for n, bound in ((20, False), (200, False), (200, True)):
        _, c = written(INTS, listing(["1"] * n), bound=bound)
        counts.append(c.masks.computed)
    assert counts[0] == counts[1]
    assert counts[2] <= counts[1] + 2


def test_the_tracker_follows_escapes_and_nesting() -> None:
    runs = ValueRuns()
    runs.feed(b'{"a": ["x\\"]", {"b": [1, 2]}, "y')
    assert runs.in_string and not runs.escaped
    assert [f is None for f in runs.stack] == [True, False]
    before = (bytes(runs.buf), runs.in_string, len(runs.stack))
    assert not runs.overruns(b'", ')
    assert (bytes(runs.buf), runs.in_string, len(runs.stack)) == before  # a probe leaves no trace
    runs = ValueRuns()
    runs.feed(b"[" + b"5, " * (ARRAY_MIN_ITEMS - 1) + b"5")
    assert runs.near and runs.overruns(b",") and runs.overruns(b"]],") is False
    assert not runs.overruns(b"0,")  # 50 is another item
    runs.feed(b"]")
    assert not runs.stack


def test_the_synthetic_vocabulary_has_the_tokens_the_tests_rely_on() -> None:
    vocab = make_vocab()
    assert vocab.pieces[EOS] == b"<eos>"
    for piece in (b'",', b", ", b"]", b'"'):
        assert vocab.ids_for(piece), piece
    assert np.all(vocab.lengths[vocab.ids_for(b'",')] == 2)


def test_a_repeated_sentence_is_closed_before_the_reply_repetition_stop_sees_it() -> None:
    unit = "# JSON example: {type:object}  "  # 31 bytes: what the bundled model repeated in a reply
    got, c = written({"type": "string"}, json.dumps(unit * 20))
    assert c.stats.closed_values > 0 and len(got) < 400
