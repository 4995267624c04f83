"""Usage across the generations of one reply: sums for the work done, the largest prompt for the window."""

from __future__ import annotations

from tether.chat import Usage


def test_a_sum_keeps_the_largest_prompt_and_its_cache_for_the_window() -> None:
    turn = Usage(2058, 166, 21, generations=1)  # the client's prompt, mostly cached
    recall = Usage(3465, 28, 1, generations=1)  # the answer decided again, on a longer prompt
    repair = Usage(900, 10, 900, generations=1)
    total = Usage() + turn + recall + repair
    assert (total.prompt_tokens, total.completion_tokens, total.generations) == (6423, 204, 3)
    assert total.prompt_tokens_evaluated == 922 and total.cached_tokens == 5501
    assert (total.window_prompt_tokens, total.window_cached_tokens) == (3465, 3464)
    assert (repair + turn).window_prompt_tokens == 2058  # the order does not matter


def test_one_generation_is_its_own_window() -> None:
    one = Usage(120, 9, 20)
    assert (one.window_prompt_tokens, one.window_cached_tokens) == (120, 100)
    assert Usage().window_prompt_tokens == 0
