"""Grounding in an agent loop: the next call's values come from the round it is in.

A name this tool already read is not begun again in any case (denied ``READ``, a small model wrote
``readME.md``); a name begun goes on into one not read yet; a number comes from the latest result
and, where the text labels one with the parameter's name, is that one ("TOTAL 9875" for ``total``);
an ``enum`` option the last call named is preferred (``q2`` after reading ``reports/q2.txt``).
"""

from __future__ import annotations

import numpy as np

from tests.unit.test_clauses import READ, RECORD
from tether.grammar.formats.base import ToolSpec
from tether.grammar.grounding import GroundingProcessor
from tether.grammar.recent import LatestRound
from tether.grammar.spans import counted_by, labelled_by, number_spans
from tether.grammar.vocab import TokenVocab
from tether.schema_kinds import counted_nouns

WORDS = [b"READ", b"read", b"Read", b"logs", b"reports"]
PIECES = [bytes([i]) for i in range(256)] + [b"", *WORDS]
VOCAB = TokenVocab.from_pieces(PIECES, [256])


def tid(piece: bytes) -> int:
    return PIECES.index(piece)


def _step(g: GroundingProcessor, text: bytes) -> np.ndarray:
    return g(np.asarray(list(text), dtype=np.intc), np.zeros(len(PIECES), dtype=np.single))


def test_a_name_this_tool_read_is_not_begun_again_in_any_case() -> None:
    source = "Read README.md for background, then read logs/server.log.\nBackground: billing."
    g = GroundingProcessor(
        VOCAB, source, [READ], prompt_len=0, answered=frozenset({("read_file", "path", "README.md")})
    )
    out = _step(g, b'{"name": "read_file", "arguments": {"path": "')
    assert out[tid(b"logs")] > 0
    assert out[tid(b"READ")] < 0 and out[tid(b"read")] < 0 and out[tid(b"Read")] < 0


def test_a_name_begun_goes_on_into_one_not_read_yet() -> None:
    source = "For each of reports/q1.txt, reports/q2.txt and reports/q3.txt: read it.\nTOTAL 10500"
    answered = frozenset({("read_file", "path", "reports/q1.txt")})
    g = GroundingProcessor(VOCAB, source, [READ], prompt_len=0, answered=answered)
    out = _step(g, b'{"name": "read_file", "arguments": {"path": "reports/q')
    assert out[tid(b"2")] > 0 and out[tid(b"3")] > 0 and out[tid(b"1")] == 0


def test_labelled_numbers_are_those_right_after_a_label() -> None:
    text = b"line item 12: shipped\nTOTAL 9875\namount: 50"
    spans = number_spans(text)
    assert [n for _, _, n in labelled_by(text, spans, (), {"total"})] == [b"9875"]
    assert [n for _, _, n in labelled_by(text, spans, (), {"amount"})] == [b"50"]


INT = {"type": "integer"}


def test_a_count_is_the_number_right_before_what_the_parameter_counts() -> None:
    text = b"A house from May 22nd, 2023 for two adults, 3-bedroom, 6 games"
    spans = number_spans(text)
    assert counted_nouns("number_of_adults") == {"adult"} and counted_nouns("nights") == {"night"}
    assert counted_nouns("point1") is None and counted_nouns("side3") is None
    assert [n for _, _, n in counted_by(text, spans, {"adult"})] == [b"2"]
    assert [n for _, _, n in counted_by(text, spans, {"bedroom"})] == [b"3"]
    assert counted_by(text, spans, {"nights"}) == []
    book = ToolSpec(
        "book_house",
        "Book a house",
        {"type": "object", "properties": {"number_of_adults": {"type": "integer"}}},
    )
    g = GroundingProcessor(VOCAB, text.decode(), [book], prompt_len=0)
    out = _step(g, b'{"name": "book_house", "arguments": {"number_of_adults": ')
    assert out[tid(b"2")] > 0 and out[tid(b"3")] == 0 and out[tid(b"6")] == 0  # not another count
    g = GroundingProcessor(VOCAB, text.decode(), [book], prompt_len=0)
    out = _step(g, b'{"name": "book_house", "arguments": {"number_of_adults": 2')
    assert out[tid(b"0")] == 0  # nor the year
    # A point is not a count of points: "two points" says nothing about point1's numbers.
    source = "The distance between two points A(3,4) and B(1,2)."
    line = ToolSpec(
        "distance", "", {"type": "object", "properties": {"point1": {"type": "array", "items": INT}}}
    )
    g = GroundingProcessor(VOCAB, source, [line], prompt_len=0)
    out = _step(g, b'{"name": "distance", "arguments": {"point1": [')
    assert out[tid(b"3")] > 0 and out[tid(b"2")] > 0


def test_in_a_loop_the_number_comes_from_the_latest_result_and_the_option_its_call_named() -> None:
    request = "For each of reports/q1.txt and reports/q2.txt: read it, then record its total."
    older, latest = "item 1\nTOTAL 10500", "item 2\nTOTAL 9875"
    source = f"{request}\n{older}\n{latest}"
    round_ = LatestRound.of(source, request, "reports/q2.txt", latest)
    assert round_ is not None and round_.named(["q1", "q2", "q3"]) == ["q2"]
    g = GroundingProcessor(VOCAB, source, [RECORD], prompt_len=0, request=request, latest=round_)
    out = _step(g, b'{"name": "record_total", "arguments": {"quarter": "q')
    assert out[tid(b"2")] > 0 and out[tid(b"1")] == 0 and out[tid(b"3")] == 0
    g = GroundingProcessor(VOCAB, source, [RECORD], prompt_len=0, request=request, latest=round_)
    out = _step(g, b'{"name": "record_total", "arguments": {"quarter": "q2", "total": ')
    assert out[tid(b"9")] > 0 and out[tid(b"1")] == 0  # 10500 was an earlier round's
    # Outside a loop, both totals are the conversation's.
    g = GroundingProcessor(VOCAB, source, [RECORD], prompt_len=0, request=request)
    out = _step(g, b'{"name": "record_total", "arguments": {"quarter": "q2", "total": ')
    assert out[tid(b"9")] > 0 and out[tid(b"1")] > 0


def test_a_round_is_only_where_the_results_end_the_source() -> None:
    assert LatestRound.of("ask\nresult", "ask", "a.txt", "other") is None
    assert LatestRound.of("ask\nresult", "ask", "a.txt", "") is None
    assert LatestRound.of("ask", "ask", "a.txt", "x") is None
    whole = LatestRound.of("sult", "", "", "a long result")
    assert whole is not None and whole.results_from == 0  # a result longer than the source covers it
