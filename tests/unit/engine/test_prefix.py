"""``common_prefix_len``: the chunked comparison agrees with a plain walk, for every input type engines pass."""

from __future__ import annotations

import random

import numpy as np

from tether.engine.base import common_prefix_len


def walk(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def test_matches_a_plain_walk_across_chunk_boundaries_and_types() -> None:
    rng = random.Random(7)
    for _ in range(500):
        a = [rng.randint(0, 3) for _ in range(rng.randint(0, 700))]
        b = a[: rng.randint(0, len(a))] + [rng.randint(0, 3) for _ in range(rng.randint(0, 600))]
        want = walk(a, b)
        assert common_prefix_len(a, b) == want
        assert common_prefix_len(tuple(a), np.asarray(b, dtype=np.intc)) == want
        assert common_prefix_len(iter(a), b) == want


def test_edges() -> None:
    assert common_prefix_len([], [1]) == 0
    assert common_prefix_len(list(range(600)), list(range(600))) == 600
    assert common_prefix_len(list(range(600)), [*range(511), -1]) == 511
