"""``TokenVocab`` lookups that every constraint shares, computed once per vocabulary."""

from __future__ import annotations

from tether.grammar.vocab import TokenVocab


def test_closing_brackets_counts_each_tokens_closers_once_per_vocabulary() -> None:
    vocab = TokenVocab.from_pieces([b"<eos>", b"}", b"a", b"}]}", b"]", b'"}', b"x}}"], eos_ids=[0])
    ids, counts = vocab.closing_brackets()
    assert ids.tolist() == [1, 3, 5, 6]  # only tokens holding a `}`: a lone `]` never ends a call object
    assert counts.tolist() == [1, 3, 1, 2]
    again = vocab.closing_brackets()
    assert again[0] is ids and again[1] is counts  # cached: a constraint per request reuses it
