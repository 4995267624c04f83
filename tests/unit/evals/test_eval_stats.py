"""Wilson intervals, Newcombe paired deltas and the exact McNemar test."""

from __future__ import annotations

import math

import pytest

from tether.evals.stats import mcnemar_exact, paired_delta, wilson


def test_wilson_matches_newcombes_published_example() -> None:
    # Newcombe (1998), "Two-sided confidence intervals for the single proportion", 81/263.
    low, high = wilson(81, 263)
    assert round(low, 4) == 0.2553
    assert round(high, 4) == 0.3662


def test_wilson_edges() -> None:
    assert wilson(0, 0) == (0.0, 1.0)
    low, high = wilson(0, 10)
    assert low == 0.0 and 0.25 < high < 0.35
    low, high = wilson(10, 10)
    assert high == pytest.approx(1.0) and 0.65 < low < 0.75
    with pytest.raises(ValueError):
        wilson(11, 10)


def test_mcnemar_exact_binomial_values() -> None:
    # 1 vs 9 discordant: 2 * P(X <= 1), X ~ Bin(10, 1/2) = 2 * 11/1024.
    assert mcnemar_exact(1, 9) == pytest.approx(22 / 1024)
    assert mcnemar_exact(9, 1) == pytest.approx(22 / 1024)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(5, 5) == 1.0
    assert mcnemar_exact(0, 6) == pytest.approx(2 / 64)


def test_paired_delta_counts_and_interval() -> None:
    a = [True] * 30 + [False] * 70
    b = [True] * 30 + [True] * 20 + [False] * 50
    d = paired_delta(a, b)
    assert d.n == 100 and d.only_a == 0 and d.only_b == 20
    assert d.delta == pytest.approx(0.2)
    assert d.low < 0.2 < d.high and d.low > 0  # a clear improvement excludes zero
    assert d.p_value == pytest.approx(mcnemar_exact(0, 20))


def test_paired_delta_is_antisymmetric_and_bounded() -> None:
    a = [True, False, True, True, False, False, True, False]
    b = [False, True, True, False, True, True, True, False]
    ab, ba = paired_delta(a, b), paired_delta(b, a)
    assert ab.delta == pytest.approx(-ba.delta)
    assert ab.low == pytest.approx(-ba.high) and ab.high == pytest.approx(-ba.low)
    assert -1 <= ab.low <= ab.delta <= ab.high <= 1


def test_identical_outcomes_give_no_evidence() -> None:
    same = [True, False] * 10
    d = paired_delta(same, same)
    assert d.delta == 0 and d.p_value == 1.0 and d.low <= 0 <= d.high
    assert not math.isnan(d.low)
    with pytest.raises(ValueError):
        paired_delta([True], [True, False])
