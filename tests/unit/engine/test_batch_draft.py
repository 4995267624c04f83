"""Where the batched engine's extra tokens come from (``tether.engine.batch.draft``): prompt-lookup
drafts, finding the constraint at the end of a processor chain, and jump-forward over forced text."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tests.unit.grammar.test_constraint import TOOLS, constraint_for
from tether.engine.batch.draft import Forcing, forced_tokens, forcing_of, lookup_draft, text_draft
from tether.engine.processors import Chain, chain


def ids(*values: int) -> npt.NDArray[np.intc]:
    return np.asarray(values, dtype=np.intc)


def test_lookup_draft_returns_what_followed_the_last_three_ids() -> None:
    assert lookup_draft(ids(1, 2, 3, 4, 5, 9, 1, 2, 3)) == [4, 5, 9, 1, 2, 3]
    assert lookup_draft(ids(1, 2, 3, 4, 5, 9, 1, 2, 3), max_draft=2) == [4, 5]


def test_lookup_draft_takes_the_latest_earlier_occurrence() -> None:
    seq = ids(1, 2, 3, 7, 1, 2, 3, 8, 6, 1, 2, 3)
    assert lookup_draft(seq, max_draft=3) == [8, 6, 1]


def test_lookup_draft_falls_back_to_two_ids_only_when_asked() -> None:
    seq = ids(5, 2, 3, 6, 9, 2, 3)  # (9, 2, 3) never came before, (2, 3) did
    assert lookup_draft(seq, min_ngram=2) == [6, 9, 2, 3]
    assert lookup_draft(seq) == []  # the default: a 3-gram or nothing (2-grams of JSON match everywhere)


def test_lookup_draft_prefers_the_longer_match_over_a_later_shorter_one() -> None:
    seq = ids(1, 2, 3, 4, 0, 2, 3, 5, 1, 2, 3)  # (2, 3) last came before 5; (1, 2, 3) before 4
    assert lookup_draft(seq, max_draft=1, min_ngram=2) == [4]


def test_lookup_draft_is_empty_without_a_match_or_with_too_few_ids() -> None:
    assert lookup_draft(ids(1, 2, 3, 4, 5)) == []
    for short in (ids(), ids(4), ids(4, 4)):
        assert lookup_draft(short) == []


def test_lookup_draft_never_matches_the_tail_with_itself() -> None:
    assert lookup_draft(ids(4, 5, 6), min_ngram=2) == []  # the only (5, 6) is the tail
    assert lookup_draft(ids(7, 7, 7), min_ngram=2) == [7]  # (7, 7) at 0 overlaps the tail but starts earlier
    assert lookup_draft(ids(7, 7, 7, 7)) == [7]


class Script:
    """A processor that forces ``target`` token by token, reading what came before from ``ids``."""

    def __init__(self, target: Sequence[int], *, copying: bool = True) -> None:
        self.target = list(target)
        self._copying = copying
        self.asked: list[list[int]] = []

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        return self._copying

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        seen = ids.tolist()
        self.asked.append(seen)
        n = len(seen)
        if n >= len(self.target) or seen != self.target[:n]:
            return None
        return self.target[n]

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        return logits


def plus_one(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
    return logits + 1


def test_forcing_of_finds_the_last_member_of_a_chain() -> None:
    script = Script([])
    assert isinstance(script, Forcing)
    assert forcing_of(script) is script
    assert forcing_of(Chain([plus_one, script])) is script
    assert forcing_of(Chain([plus_one, Chain([plus_one, script])])) is script
    assert forcing_of(chain([None, plus_one, script])) is script


def test_forcing_of_a_real_constraint_behind_sampling_processors() -> None:
    _vocab, constraint = constraint_for("hermes", tools=TOOLS[:1])
    assert forcing_of(chain([plus_one, constraint])) is constraint


def test_forcing_of_is_none_when_the_chain_ends_with_anything_else() -> None:
    script = Script([])
    assert forcing_of(Chain([script, plus_one])) is None  # a later processor must see every step
    assert forcing_of(Chain([plus_one, Chain([script, plus_one])])) is None
    assert forcing_of(plus_one) is None
    assert forcing_of(None) is None


def buffer(prompt: Sequence[int], size: int) -> npt.NDArray[np.intc]:
    out = np.full(size, -1, dtype=np.intc)
    out[: len(prompt)] = prompt
    return out


def test_forced_tokens_fill_the_buffer_until_nothing_is_forced() -> None:
    script = Script([1, 2, 3, 10, 11, 12])
    buf = buffer([1, 2, 3], 10)
    assert forced_tokens(script, buf, 3, limit=8, eos=frozenset()) == [10, 11, 12]
    assert buf.tolist() == [1, 2, 3, 10, 11, 12, -1, -1, -1, -1]
    # Each question saw the tokens forced before it: the processor reads them from the buffer.
    assert script.asked == [[1, 2, 3], [1, 2, 3, 10], [1, 2, 3, 10, 11], [1, 2, 3, 10, 11, 12]]


def test_forced_tokens_stop_at_the_limit() -> None:
    buf = buffer([1, 2, 3], 10)
    assert forced_tokens(Script([1, 2, 3, 10, 11, 12]), buf, 3, limit=2, eos=frozenset()) == [10, 11]
    assert buf.tolist()[5:] == [-1] * 5
    assert forced_tokens(Script([1, 2, 3, 10]), buffer([1, 2, 3], 10), 3, limit=0, eos=frozenset()) == []


def test_a_forced_eos_is_the_last_forced_token() -> None:
    buf = buffer([1, 2, 3], 10)
    assert forced_tokens(Script([1, 2, 3, 10, 0, 12]), buf, 3, limit=8, eos=frozenset({0})) == [10, 0]
    assert buf.tolist()[3:6] == [10, 0, -1]  # nothing is asked after EOS: the reply ends there


def test_forced_tokens_stop_at_the_end_of_the_buffer() -> None:
    buf = buffer([1, 2, 3], 5)
    assert forced_tokens(Script([1, 2, 3, 10, 11, 12]), buf, 3, limit=8, eos=frozenset()) == [10, 11]
    assert buf.tolist() == [1, 2, 3, 10, 11]


def test_forced_tokens_start_after_n_not_after_the_buffer() -> None:
    buf = np.asarray([1, 2, 3, 99, 99], dtype=np.intc)  # stale ids past n are not read
    assert forced_tokens(Script([1, 2, 3, 10, 11]), buf, 3, limit=8, eos=frozenset()) == [10, 11]
    assert buf.tolist() == [1, 2, 3, 10, 11]


PIECES = [b"", b" src", b"src", b"/", b"app", b".py", b' "', b"Read", b" the", b" file", b",", b"B", b"Bu", b"enos"]  # fmt: skip


def toy(data: bytes) -> list[int]:
    """Greedy longest-piece tokenizer over ``PIECES`` (enough for these texts)."""
    out, i = [], 0
    while i < len(data):
        k = max(
            (k for k, p in enumerate(PIECES) if p and data.startswith(p, i)), key=lambda k: len(PIECES[k])
        )
        out.append(k)
        i += len(PIECES[k])
    return out


def test_text_draft_places_a_copy_whose_first_token_differs_from_its_source() -> None:
    prompt = toy(b"Read the file src/app.py,")  # " src" in the sentence
    run = toy(b' "src')  # `"src` in the value: the opening quote is not copied
    seq = ids(*prompt, *run)
    got = text_draft(seq, len(prompt), pieces=PIECES, tokenize=toy, max_draft=8)
    assert got == toy(b"/app.py,")


def test_text_draft_waits_for_enough_text_and_gives_up_where_it_is_not_found() -> None:
    prompt = toy(b"Read the file src/app.py")

    def draft(copy: bytes) -> list[int] | None:
        return text_draft(ids(*prompt, *toy(copy)), len(prompt), pieces=PIECES, tokenize=toy, max_draft=8)

    assert draft(b' "B') is None
    assert draft(b' "Bu') == []


def test_text_draft_needs_the_copy_to_tokenize_as_the_model_wrote_it() -> None:
    prompt = toy(b"Read the file src/app.py")
    written = [6, 11, 12]  # ' "', "B", "Bu": not how the tokenizer would split "BBu"
    seq = ids(*prompt, *written)
    assert text_draft(seq, len(prompt), pieces=PIECES, tokenize=toy, max_draft=8) == []
    seq = ids(*toy(b"Bu/app.py"), *toy(b' "Bu'))  # the same text, split the tokenizer's way
    assert text_draft(seq, 4, pieces=PIECES, tokenize=toy, max_draft=2) == toy(b"/app")
