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
