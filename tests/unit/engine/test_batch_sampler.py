"""The batched engine's numpy sampler (``tether.engine.batch.sampler``) on hand-made logits rows.

Each rule of llama.cpp's chain is checked on a row built so that the rule, and only it, decides
which tokens can come out; draws use fixed seeds, so every count below is reproducible.
"""

from __future__ import annotations

from collections import Counter

import numpy as np
import numpy.typing as npt
import pytest

from tether.engine.base import SamplingParams
from tether.engine.batch.sampler import REPEAT_WINDOW, Sampler

DRAWS = 2000


def row(*values: float) -> npt.NDArray[np.single]:
    return np.asarray(values, dtype=np.single)


def log_probs(*probs: float) -> npt.NDArray[np.single]:
    """A logits row whose softmax is ``probs`` (a zero probability is a masked token)."""
    with np.errstate(divide="ignore"):
        return np.log(np.asarray(probs, dtype=np.single))


def draws(sampler: Sampler, logits: npt.NDArray[np.single], n: int = DRAWS) -> list[int]:
    return [sampler.pick(logits.copy()) for _ in range(n)]


def plain(
    *,
    seed: int = 7,
    temperature: float = 1.0,
    top_k: int = 0,
    top_p: float = 1.0,
    min_p: float = 0.0,
    repeat_penalty: float = 1.0,
) -> SamplingParams:
    """Sampling with every filter off unless asked for."""
    return SamplingParams(
        temperature=temperature,
        top_k=top_k,
        top_p=top_p,
        min_p=min_p,
        repeat_penalty=repeat_penalty,
        seed=seed,
    )


def test_greedy_picks_the_argmax() -> None:
    sampler = Sampler(SamplingParams(temperature=0.0))
    assert sampler.greedy
    assert sampler.pick(row(0.1, 3.0, -np.inf, 2.9)) == 1
    assert sampler.pick(row(-np.inf, -5.0, -np.inf, -4.0)) == 3


def test_a_seed_gives_the_same_draws_and_another_seed_other_draws() -> None:
    logits = np.zeros(10, dtype=np.single)  # uniform: every draw is up to the generator
    first = draws(Sampler(plain(seed=123)), logits, 100)
    assert first == draws(Sampler(plain(seed=123)), logits, 100)
    assert len(set(first)) == 10
    assert first != draws(Sampler(plain(seed=124)), logits, 100)


def test_two_samplers_with_one_seed_agree_while_interleaved() -> None:
    """Each sequence owns its generator: drawing for a neighbour does not shift this one's draws."""
    logits = np.zeros(10, dtype=np.single)
    a, b = Sampler(plain(seed=5)), Sampler(plain(seed=5))
    alone = draws(Sampler(plain(seed=5)), logits, 50)
    assert [(a.pick(logits.copy()), b.pick(logits.copy())) for _ in range(50)] == [(t, t) for t in alone]


def test_top_k_one_is_the_argmax_even_when_hot() -> None:
    logits = row(1.0, 1.2, 0.9, 1.1, -np.inf)
    assert set(draws(Sampler(plain(temperature=5.0, top_k=1)), logits)) == {1}
    assert len(set(draws(Sampler(plain(temperature=5.0)), logits))) == 4  # the row itself is flat


def test_top_p_keeps_the_smallest_head_reaching_p() -> None:
    logits = log_probs(0.3, 0.25, 0.2, 0.15, 0.1)  # cumulative 0.3, 0.55: p=0.5 keeps two tokens
    assert set(draws(Sampler(plain(top_p=0.5)), logits)) == {0, 1}
    dominant = log_probs(0.9, 0.04, 0.03, 0.02, 0.01)
    assert set(draws(Sampler(plain(top_p=0.5)), dominant)) == {0}
    assert set(draws(Sampler(plain()), dominant)) == {0, 1, 2, 3, 4}  # without top_p the tail shows


def test_min_p_drops_tokens_below_a_share_of_the_best() -> None:
    logits = log_probs(0.5, 0.3, 0.1, 0.06, 0.04)  # min_p 0.15 of 0.5: 0.075, so 0.06 and 0.04 go
    assert set(draws(Sampler(plain(min_p=0.15)), logits)) == {0, 1, 2}


def test_min_p_is_applied_before_temperature() -> None:
    """llama.cpp's order: the cut is on the raw row; a high temperature only flattens what is kept."""
    logits = log_probs(0.5, 0.3, 0.1, 0.06, 0.04)
    assert set(draws(Sampler(plain(min_p=0.15, temperature=50.0)), logits)) == {0, 1, 2}


@pytest.mark.parametrize(
    "params",
    [
        plain(temperature=1.5),
        plain(temperature=-1.0),
        SamplingParams(seed=3),  # the defaults: top_k 40 reaches past the 10 finite tokens
        SamplingParams(seed=3, temperature=2.0, top_k=5, top_p=0.99, min_p=0.01),
    ],
)
def test_masked_tokens_are_never_drawn(params: SamplingParams) -> None:
    logits = np.full(100, -np.inf, dtype=np.single)
    allowed = np.arange(3, 100, 10)
    logits[allowed] = np.random.default_rng(0).normal(size=allowed.size)
    assert set(draws(Sampler(params), logits)) <= set(allowed.tolist())


def test_negative_temperature_draws_from_the_whole_finite_row() -> None:
    """llama-cpp-python's ``temp < 0``: softmax and a draw, no top-k/top-p/min-p, no temperature."""
    logits = log_probs(0.5, 0.3, 0.0, 0.15, 0.05)
    picked = draws(Sampler(plain(temperature=-1.0, top_k=1, top_p=0.1, min_p=0.9)), logits, 5000)
    counts = Counter(picked)
    assert set(counts) == {0, 1, 3, 4}
    for token, p in [(0, 0.5), (1, 0.3), (3, 0.15), (4, 0.05)]:
        assert abs(counts[token] / 5000 - p) < 0.03, counts


def test_penalize_divides_positive_and_multiplies_negative_logits() -> None:
    sampler = Sampler(plain(repeat_penalty=2.0))
    logits = row(2.0, -2.0, 1.0, 0.0, 3.0)
    sampler.penalize(logits, np.asarray([0, 1, 3, 0, 0], dtype=np.intc))
    # Repeats count once; zero stays zero; ids not generated keep their logits.
    np.testing.assert_array_equal(logits, row(1.0, -4.0, 1.0, 0.0, 3.0))


def test_penalize_only_looks_at_the_last_window_of_generated_tokens() -> None:
    sampler = Sampler(plain(repeat_penalty=2.0))
    logits = row(4.0, 4.0, 4.0)
    sampler.penalize(logits, np.asarray([0] + [1] * REPEAT_WINDOW, dtype=np.intc))  # 0 is one too old
    np.testing.assert_array_equal(logits, row(4.0, 2.0, 4.0))
    logits = row(4.0, 4.0, 4.0)
    sampler.penalize(logits, np.asarray([0] + [1] * (REPEAT_WINDOW - 1), dtype=np.intc))  # 0 just fits
    np.testing.assert_array_equal(logits, row(2.0, 2.0, 4.0))


def test_penalize_ignores_ids_outside_the_row() -> None:
    sampler = Sampler(plain(repeat_penalty=1.5))
    logits = row(3.0, -3.0)
    sampler.penalize(logits, np.asarray([-1, 2, 1000, 1], dtype=np.intc))
    np.testing.assert_array_equal(logits, row(3.0, -4.5))


def test_penalty_one_or_nothing_generated_is_a_no_op() -> None:
    logits = row(2.0, -2.0, 0.5)
    Sampler(plain(repeat_penalty=1.0)).penalize(logits, np.asarray([0, 1, 2], dtype=np.intc))
    Sampler(plain(repeat_penalty=2.0)).penalize(logits, np.zeros(0, dtype=np.intc))
    np.testing.assert_array_equal(logits, row(2.0, -2.0, 0.5))
