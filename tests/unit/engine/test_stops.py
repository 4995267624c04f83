"""Incremental stop-string matching holds back only possible prefixes."""

from __future__ import annotations

import random

import pytest

from tether.engine.stops import StopMatcher


def run(stops: list[str], pieces: list[str]) -> tuple[str, str | None]:
    m = StopMatcher(stops)
    out = "".join(m.feed(p) for p in pieces)
    if m.matched is None:
        out += m.flush()
    return out, m.matched


def test_no_stops_passes_through() -> None:
    assert run([], ["a", "b"]) == ("ab", None)


def test_holds_only_a_possible_prefix() -> None:
    m = StopMatcher(["</end>"])
    assert m.feed("hello </") == "hello "
    assert m.feed("x") == "</x"


@pytest.mark.parametrize("seed", range(20))
def test_split_invariance(seed: int) -> None:
    rng = random.Random(seed)
    text = "alpha beta ##STOP## gamma"
    cuts = sorted(rng.sample(range(1, len(text)), 6))
    pieces = [text[i:j] for i, j in zip([0, *cuts], [*cuts, len(text)], strict=True)]
    assert run(["##STOP##", "zzz"], pieces) == ("alpha beta ", "##STOP##")


def test_earliest_stop_wins() -> None:
    assert run(["b", "a"], ["xxab"]) == ("xx", "a")


def test_repetition_stop_cuts_a_loop_not_varied_text() -> None:
    from tether.engine.stops import RepetitionStop

    loop = RepetitionStop()
    fed = ["The score was a 62-point"] + [" 6-point"] * 60
    assert [loop.feed(t) for t in fed].index(True) > 40  # only once 400 characters repeat
    varied = RepetitionStop()
    words = " ".join(f"item{i} costs {i * 7 % 13} dollars;" for i in range(200))
    assert not any(varied.feed(words[i : i + 5]) for i in range(0, len(words), 5))
    rule = RepetitionStop()
    assert not rule.feed("| a | b |\n|" + "---|" * 20)  # a table rule is far shorter than the span
