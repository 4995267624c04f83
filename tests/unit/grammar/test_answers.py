"""A text answer after a tool result prefers the result's values, whole and once each."""

from __future__ import annotations

import numpy as np

from tether.grammar.answers import AnswerGrounding, result_values
from tether.grammar.vocab import TokenVocab

PIECES = [bytes([i]) for i in range(256)] + [b" 4", b" 4.2", b"beta", b""]
VOCAB = TokenVocab.from_pieces(PIECES, [len(PIECES) - 1])
READ = "<path>/work/app/VERSION.txt</path>\n<type>file</type>\n<content>\n1: 4.2.7\n\n(End of file - total 1 lines)\n</content>"


def _ids(text: bytes) -> np.ndarray:
    return np.asarray(list(text), dtype=np.intc)


def _step(g: AnswerGrounding, text: bytes, *, active: bool = True) -> np.ndarray:
    return g(_ids(text), np.zeros(len(PIECES), dtype=np.single), active=active)


def test_the_values_of_a_result_are_its_numbers_and_joined_words_less_what_was_said() -> None:
    assert result_values(READ, "Which version is in VERSION.txt?", "VERSION.txt") == ["4.2.7"]
    listing = "<path>/p/src</path>\n<entries>\nalpha.py\nbeta.py\nREADME\n\n(3 entries)\n</entries>"
    assert result_values(listing, "List the files in the src folder.", "src") == ["alpha.py", "beta.py"]
    # A word the request wrote, and a one-character number (a line number, a count) are not values.
    assert result_values("Total: 42042. Order 7 of cust_9 for 2025-03-14", "cust_9?", "") == [
        "42042",
        "2025-03-14",
    ]
    assert result_values("All done, nothing to report", "", "") == []


def test_an_answer_starts_and_goes_on_with_a_value_with_the_bias() -> None:
    g = AnswerGrounding(VOCAB, ["4.2.7", "beta.py"], prompt_len=0)
    out = _step(g, b'{"response": "')
    assert out[ord("4")] == 4.0 and out[PIECES.index(b"beta")] == 4.0 and out[ord("1")] == 0.0
    assert out[PIECES.index(b" 4")] == 0.0  # right after the quote: no space
    out = _step(g, b'{"response": "Version 4.')
    assert out[ord("2")] == 4.0 and out[ord("1")] == 0.0
    # Within a word that begins no value, a new word after a space may begin one.
    out = _step(g, b'{"response": "Version 4.2.7 and ver')
    assert out[PIECES.index(b" 4")] == 0.0  # 4.2.7 is written: not preferred again
    assert out[ord("b")] == 0.0 and out[PIECES.index(b"beta")] == 0.0


def test_nothing_is_preferred_before_the_answer_is_decided_or_inside_an_escape() -> None:
    g = AnswerGrounding(VOCAB, ["4.2.7"], prompt_len=0)
    assert not _step(g, b'{"', active=False).any()
    g = AnswerGrounding(VOCAB, ["4.2.7"], prompt_len=0)
    assert not _step(g, b'{"response": "a\\').any()
    # An escaped line break ends a word: the next may begin a value.
    assert _step(g, b'{"response": "a\\n')[ord("4")] == 4.0


def test_a_prompt_is_not_read_as_the_answer() -> None:
    prompt = b"Result of read: 4.2.7 and more"
    g = AnswerGrounding(VOCAB, ["4.2.7"], prompt_len=len(prompt))
    out = _step(g, prompt + b'{"response": "')
    assert out[ord("4")] == 4.0  # the prompt's copy is not the answer's
