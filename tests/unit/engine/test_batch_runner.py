"""The continuous-batching runner (``tether.engine.batch.runner``) over a scripted context.

:class:`ScriptedContext` is the model: it counts up (or follows a given rule), holds each
sequence's cells and refuses what llama.cpp refuses, and records every decode's batch, so each
test checks what the runner put into which step as well as what each consumer received.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pytest

from tests.unit.engine.scripted_context import (
    WAIT,
    Cell,
    Grammar,
    Rig,
    ScriptedContext,
    at_decode,
    cells_of,
    digest,
    drain,
    job,
    settle,
    submit_all,
    tokens,
    wait_until,
)
from tether.engine.batch.runner import BatchOptions, BatchRunner
from tether.errors import EngineError


def fail() -> None:
    raise EngineError("the batched decode failed: injected")


@pytest.fixture
def rig() -> Iterator[Rig]:
    made = Rig()
    yield made
    made.close_all()


def test_one_greedy_job_runs_the_script_to_max_tokens(rig: Rig) -> None:
    runner, ctx = rig()
    runner.submit(j := job(0, [1, 2, 3], 5))
    assert tokens(j) == [4, 5, 6, 7, 8]
    settle(runner)
    assert j.evaluated == 3
    assert ctx.batches[0] == [Cell(0, 0, 1, False), Cell(0, 1, 2, False), Cell(0, 2, 3, True)]
    assert ctx.batches[1:] == [[Cell(0, 3 + k, 4 + k, True)] for k in range(4)]
    assert runner.held[0] == ctx.cells[0] == [1, 2, 3, 4, 5, 6, 7]  # the last token is never decoded


def test_an_eos_id_is_emitted_and_ends_the_job(rig: Rig) -> None:
    runner, ctx = rig(eos={6})
    runner.submit(j := job(0, [1, 2, 3], 20))
    assert tokens(j) == [4, 5, 6]  # the EOS reaches the consumer (token_loop strips it), then the end
    settle(runner)
    assert runner.held[0] == ctx.cells[0] == [1, 2, 3, 4, 5]


def test_jobs_on_different_sequences_share_every_decode(rig: Rig) -> None:
    runner, ctx = rig(ScriptedContext(n_seq=3))
    jobs = [job(0, [1, 2, 3], 4), job(1, [10, 11], 4), job(2, [20, 21, 22, 23], 4)]
    submit_all(runner, *jobs)
    assert [tokens(j) for j in jobs] == [[4, 5, 6, 7], [12, 13, 14, 15], [24, 25, 26, 27]]
    settle(runner)
    assert len(ctx.batches) == 4  # one prefill for all three, then one token each per step
    assert [len(cells_of(ctx.batches[0], seq)) for seq in range(3)] == [3, 2, 4]
    for batch in ctx.batches[1:]:
        assert sorted((c.seq, c.logits) for c in batch) == [(0, True), (1, True), (2, True)]
    assert runner.stats.max_batch == 3
    assert runner.held == ctx.cells


def test_every_decode_is_sorted_by_sequence_whatever_the_order_jobs_arrive_in(rig: Rig) -> None:
    # llama.cpp decodes separate KV streams in one pass only for ascending, consecutive sequence ids;
    # rows in arrival order cost a pass per run of them (a quarter slower at 8 streams).
    runner, ctx = rig(ScriptedContext(n_seq=4))
    first = [job(3, [30, 31], 6), job(1, [10, 11, 12], 6)]
    late = [job(2, [20], 4), job(0, [1, 2, 3, 4, 5], 4)]
    at_decode(ctx, 2, lambda: submit_all(runner, *late))  # they join while the first two decode
    submit_all(runner, *first)
    assert [tokens(j) for j in first + late] == [
        [32, 33, 34, 35, 36, 37], [13, 14, 15, 16, 17, 18], [21, 22, 23, 24], [6, 7, 8, 9]
    ]  # fmt: skip
    settle(runner)
    assert [c.seq for c in ctx.batches[0]] == [1, 1, 1, 3, 3]
    assert any(sorted({c.seq for c in b}) == [0, 1, 2, 3] for b in ctx.batches)  # all four in one step
    assert ctx.unsorted == []  # (the rig checks this for every test)
    assert runner.held == ctx.cells


def test_a_prompt_extending_what_the_sequence_holds_evaluates_only_the_tail(rig: Rig) -> None:
    runner, ctx = rig()
    runner.submit(first := job(0, [1, 2, 3], 3))
    assert tokens(first) == [4, 5, 6]
    settle(runner)
    before = len(ctx.batches)
    runner.submit(second := job(0, [1, 2, 3, 4, 5, 9, 10], 2))
    assert tokens(second) == [11, 12]
    assert second.evaluated == 2
    assert ctx.batches[before] == [Cell(0, 5, 9, False), Cell(0, 6, 10, True)]
    settle(runner)
    before = len(ctx.batches)
    runner.submit(same := job(0, runner.held[0], 2))  # exactly what is held: its last token is redone
    assert tokens(same) == [12, 13]
    assert same.evaluated == 1
    assert ctx.batches[before] == [Cell(0, 7, 11, True)]


def test_a_prefix_another_sequence_holds_is_shared_not_recomputed(rig: Rig) -> None:
    prefix = list(range(1, 13))
    runner, ctx = rig(ScriptedContext(rule=digest))
    runner.submit(first := job(0, [*prefix, 40], 2))
    tokens(first)
    settle(runner)
    before = len(ctx.batches)
    runner.submit(second := job(1, [*prefix, 41, 42], 3))
    out = tokens(second)
    assert (ctx.shares, runner.stats.shared, second.evaluated) == ([(0, 1, 12)], 12, 2)
    assert ctx.batches[before] == [Cell(1, 12, 41, False), Cell(1, 13, 42, True)]
    cold_runner, _ = rig(ScriptedContext(rule=digest))
    cold_runner.submit(cold := job(1, [*prefix, 41, 42], 3))
    assert out == tokens(cold)
    assert cold.evaluated == 14


def test_a_job_sharing_a_prefix_still_being_prefilled_waits_and_shares_it(rig: Rig) -> None:
    prefix = list(range(1, 41))  # longer than one batch: its prefill takes two steps
    runner, ctx = rig(ScriptedContext(n_batch=32, rule=digest), options=BatchOptions(share_min=4))
    first, second = job(0, [*prefix, 45], 3), job(1, [*prefix, 46], 3)
    submit_all(runner, first, second)
    outs = [tokens(first), tokens(second)]
    settle(runner)
    prompt_cells = [sum(1 for b in ctx.batches for c in cells_of(b, seq) if c.pos < 41) for seq in (0, 1)]
    assert prompt_cells == [41, 1]  # the prefix once, then each tail
    assert (runner.stats.shared, second.evaluated) == (40, 1)
    for j, out in zip((first, second), outs, strict=True):
        cold_runner, _ = rig(ScriptedContext(n_batch=32, rule=digest))
        cold_runner.submit(cold := job(j.seq, j.prompt, 3))
        assert tokens(cold) == out


def test_a_joining_prompt_is_prefilled_in_chunks_while_others_keep_decoding(rig: Rig) -> None:
    runner, ctx = rig(options=BatchOptions(prefill_chunk=4))
    decoding, joining = job(0, [1, 2, 3], 30), job(1, range(10, 30), 5)
    at_decode(ctx, 4, lambda: runner.submit(joining))
    runner.submit(decoding)
    assert tokens(decoding) == list(range(4, 34))
    assert tokens(joining) == list(range(30, 35))
    settle(runner)
    assert [len(cells_of(b, 0)) for b in ctx.batches[1:30]] == [1] * 29  # a token every step
    chunks = [len(cells_of(b, 1)) for b in ctx.batches if any(c.pos < 20 for c in cells_of(b, 1))]
    assert chunks == [4, 4, 4, 4, 4]


@pytest.mark.parametrize("max_tokens", [4, 10])
def test_forced_tokens_ride_along_with_the_sampled_one(rig: Rig, max_tokens: int) -> None:
    runner, ctx = rig()
    grammar = Grammar(6, [30, 31, 32])
    runner.submit(forced := job(0, [1, 2, 3], max_tokens, processor=grammar))
    out = tokens(forced)
    settle(runner)
    assert out == [4, 5, 6, 30, 31, 32, 33, 34, 35, 36][:max_tokens]
    assert runner.stats.forced == min(3, max_tokens - 3)
    assert grammar.calls == max_tokens - runner.stats.forced  # a forced token takes no sampling step
    if max_tokens > 6:
        assert [Cell(0, 5, 6, False), Cell(0, 6, 30, False), Cell(0, 7, 31, False), Cell(0, 8, 32, True)] in (
            ctx.batches
        )
    plain_runner, _ = rig(options=BatchOptions(jump_forward=False, draft_tokens=0))
    plain_runner.submit(plain := job(0, [1, 2, 3], max_tokens, processor=(masks := Grammar(6, [30, 31, 32]))))
    assert tokens(plain) == out
    assert (plain_runner.stats.forced, masks.calls) == (0, max_tokens)


def test_a_forced_eos_ends_the_reply_without_decoding_what_it_closes(rig: Rig) -> None:
    runner, ctx = rig(eos={0})
    grammar = Grammar(6, [30, 31, 0])
    runner.submit(forced := job(0, [1, 2, 3], 20, processor=grammar))
    out = tokens(forced)
    settle(runner)
    assert out == [4, 5, 6, 30, 31, 0]
    assert (runner.stats.forced, grammar.calls) == (3, 3)
    # 6, 30 and 31 are never decoded: nothing is sampled after them.
    assert runner.held[0] == ctx.cells[0] == [1, 2, 3, 4, 5]
    assert len(ctx.batches) == 3
    plain_runner, plain_ctx = rig(eos={0}, options=BatchOptions(jump_forward=False, draft_tokens=0))
    plain_runner.submit(plain := job(0, [1, 2, 3], 20, processor=Grammar(6, [30, 31, 0])))
    assert tokens(plain) == out
    settle(plain_runner)
    assert len(plain_ctx.batches) == 6


def test_a_reply_the_grammar_ends_at_once_is_never_decoded_past_its_prompt(rig: Rig) -> None:
    runner, ctx = rig(eos={0})
    runner.submit(j := job(0, [1, 2, 6], 5, processor=Grammar(6, [30, 0])))
    assert tokens(j) == [30, 0]
    settle(runner)
    assert runner.stats.forced == 2
    assert ctx.batches == []  # the prompt alone asks for no logits: nothing to decode


def test_tokens_forced_right_after_the_prompt_are_prefilled_with_it(rig: Rig) -> None:
    runner, ctx = rig()
    runner.submit(j := job(0, [1, 2, 6], 5, processor=Grammar(6, [30, 31, 32])))
    assert tokens(j) == [30, 31, 32, 33, 34]
    assert runner.stats.forced == 3
    assert ctx.batches[0] == [Cell(0, k, t, k == 5) for k, t in enumerate([1, 2, 6, 30, 31, 32])]


REPEATING = [*range(1, 16), 1]  # after "1" the model counts up, as the prompt did: drafts match


def speculate(rig: Rig, model: ScriptedContext, max_tokens: int) -> tuple[BatchRunner, list[int]]:
    """The job with drafts on, checked against the same job without them."""
    runner, ctx = rig(model)
    runner.submit(j := job(0, REPEATING, max_tokens, processor=Grammar(copying=True)))
    out = tokens(j)
    settle(runner)
    assert runner.held[0] == ctx.cells[0]  # a rejected draft's cells are gone
    plain_runner, _ = rig(ScriptedContext(rule=model.rule), options=BatchOptions(draft_tokens=0))
    plain_runner.submit(plain := job(0, REPEATING, max_tokens, processor=Grammar(copying=True)))
    assert tokens(plain) == out
    assert plain_runner.stats.drafted == 0
    return runner, out


def test_a_draft_the_model_agrees_with_is_accepted_in_one_step(rig: Rig) -> None:
    model = ScriptedContext()
    runner, out = speculate(rig, model, 12)
    assert out == list(range(2, 14))
    assert (runner.stats.drafted, runner.stats.accepted) == (8, 8)
    assert len(model.batches) == 4  # prefill, two steps to start the run, then 5..12 verified at once
    assert model.batches[3] == [Cell(0, 18 + k, 4 + k, True) for k in range(9)]


def test_a_rejected_draft_is_trimmed_from_the_cache(rig: Rig) -> None:
    model = ScriptedContext(rule=lambda ids: 20 if ids[-1] == 8 else ids[-1] + 1)
    runner, out = speculate(rig, model, 12)
    assert out == [2, 3, 4, 5, 6, 7, 8, 20, 21, 22, 23, 24]
    assert (runner.stats.drafted, runner.stats.accepted) == (8, 4)  # 5..8 confirmed, 9 was not


def test_a_draft_never_runs_past_max_tokens(rig: Rig) -> None:
    runner, out = speculate(rig, ScriptedContext(), 8)
    assert out == list(range(2, 10))
    assert runner.stats.accepted == runner.stats.drafted == 4


def test_a_copy_is_placed_by_its_text_from_its_first_token(rig: Rig) -> None:
    model = ScriptedContext()
    runner, _ = rig(model, text=True)
    runner.submit(j := job(0, REPEATING, 12, processor=Grammar(copying=True)))
    assert tokens(j) == list(range(2, 14))
    settle(runner)
    # "<2>" is found in the prompt at once: 3..10 ride along with it, then one n-gram draft (12).
    assert (runner.stats.drafted, runner.stats.accepted) == (9, 9)
    assert model.batches[1] == [Cell(0, 16 + k, 2 + k, True) for k in range(9)]
    assert len(model.batches) == 3  # an n-gram alone needs a step more (test above)


def test_a_text_draft_that_missed_leaves_the_copy_its_n_gram_drafts(rig: Rig) -> None:
    # The prompt has 2 before 30, but the model goes on counting after 2: the text draft (30..) is
    # rejected at once; then the run's own 3-gram (2, 3, 4) is found in the prompt and drafts 5.. .
    prompt = [2, 30, 31, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 1]
    model = ScriptedContext()
    runner, _ = rig(model, text=True)
    runner.submit(j := job(0, prompt, 12, processor=Grammar(copying=True)))
    assert tokens(j) == list(range(2, 14))
    settle(runner)
    assert runner.stats.accepted >= 5  # 5..9 after the 3-gram, despite the text draft's miss
    plain_runner, _ = rig(ScriptedContext(), options=BatchOptions(draft_tokens=0))
    plain_runner.submit(plain := job(0, prompt, 12, processor=Grammar(copying=True)))
    assert tokens(plain) == list(range(2, 14))


@pytest.mark.parametrize(
    ("processor", "temperature"),
    [(Grammar(copying=True), 0.8), (Grammar(copying=False), 0.0), (None, 0.0)],
    ids=["sampling", "not-copying", "no-constraint"],
)
def test_no_drafts_unless_greedy_and_copying(rig: Rig, processor: Grammar | None, temperature: float) -> None:
    runner, _ = rig()
    runner.submit(j := job(0, REPEATING, 12, processor=processor, temperature=temperature))
    assert tokens(j) == list(range(2, 14))  # one clear maximum: sampling picks it too
    assert runner.stats.drafted == 0


def test_a_cancelled_job_stops_within_a_step(rig: Rig) -> None:
    runner, ctx = rig()
    cancel = threading.Event()
    at_decode(ctx, 4, cancel.set)
    runner.submit(j := job(0, [1, 2, 3], 40, cancel=cancel))
    assert tokens(j) == [4, 5, 6, 7]  # the step under way finishes, then the job ends
    settle(runner)
    assert len(ctx.batches) == 4


def test_a_released_job_leaves_and_the_others_continue(rig: Rig) -> None:
    runner, ctx = rig()
    left, stays = job(0, [1, 2, 3], 30), job(1, [10, 11], 30)
    at_decode(ctx, 4, lambda: runner.release(left))
    submit_all(runner, left, stays)
    assert tokens(stays) == list(range(12, 42))
    settle(runner)
    assert [len(cells_of(b, 0)) for b in ctx.batches[3:]] == [1] + [0] * (len(ctx.batches) - 4)
    received = []
    while not left.out.empty():
        received.append(left.out.get_nowait())
    assert received == [4, 5, 6]  # released during the 4th decode: that step samples nothing more for it


class Failing:
    """A logits processor that raises from its ``after + 1``-th call on."""

    def __init__(self, after: int) -> None:
        self.after, self.calls = after, 0

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        self.calls += 1
        if self.calls > self.after:
            raise RuntimeError("mask broke")
        return logits


def test_a_failing_processor_fails_only_its_job(rig: Rig) -> None:
    runner, _ = rig()
    broken, fine = job(0, [1, 2, 3], 10, processor=Failing(2)), job(1, [10, 11], 10)
    submit_all(runner, broken, fine)
    out = drain(broken)
    assert out.tokens == [4, 5]
    assert isinstance(out.error, EngineError) and "logits processor failed" in str(out.error)
    assert tokens(fine) == list(range(12, 22))


def test_a_failed_decode_fails_its_jobs_and_the_runner_serves_on(rig: Rig) -> None:
    runner, ctx = rig()
    jobs = [job(0, [1, 2, 3], 20), job(1, [10, 11], 20)]
    at_decode(ctx, 4, fail)
    submit_all(runner, *jobs)
    outs = [drain(j) for j in jobs]
    assert [o.tokens for o in outs] == [[4, 5, 6], [12, 13, 14]]
    assert all(isinstance(o.error, EngineError) for o in outs)
    settle(runner)
    assert runner.held == ctx.cells == [[], []]
    runner.submit(after := job(0, [1, 2, 3], 3))
    assert tokens(after) == [4, 5, 6]
    assert after.evaluated == 3


def test_close_ends_running_and_waiting_jobs_with_an_error(rig: Rig) -> None:
    runner, ctx = rig()
    reached = threading.Event()

    def pause() -> None:  # hold the third decode until close() has begun
        reached.set()
        wait_until(lambda: runner._closing, "close()")

    at_decode(ctx, 3, pause)
    runner.submit(running := job(0, [1, 2, 3], 40))
    assert reached.wait(WAIT)
    runner.submit(waiting := job(1, [10, 11], 5))
    runner.close()
    assert not runner._thread.is_alive()
    ran, waited = drain(running), drain(waiting)
    assert (ran.tokens, waited.tokens) == ([4, 5, 6], [])
    assert isinstance(ran.error, EngineError) and isinstance(waited.error, EngineError)
    with pytest.raises(EngineError, match="closing"):
        runner.submit(job(0, [1], 1))


# Regression tests for runner bugs found by these tests (all fixed).


def test_stats_count_every_sampled_token(rig: Rig) -> None:
    runner, _ = rig()
    runner.submit(j := job(0, [1, 2, 3], 5))
    assert tokens(j) == [4, 5, 6, 7, 8]
    settle(runner)
    assert runner.stats.sampled == 5


class BrokenGrammar(Grammar):
    """A layer 0 whose ``forced_next`` raises once the reply has two tokens."""

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        if len(ids) > 4:
            raise RuntimeError("grammar broke")
        return super().forced_next(ids)


def test_a_failing_forced_next_fails_only_its_job(rig: Rig) -> None:
    runner, _ = rig()
    broken, fine = job(0, [1, 2, 3], 10, processor=BrokenGrammar()), job(1, [10, 11], 10)
    submit_all(runner, broken, fine)
    assert isinstance(drain(broken).error, EngineError)
    assert tokens(fine) == list(range(12, 22))


def test_a_step_failing_before_its_decode_leaves_no_stale_rows(rig: Rig) -> None:
    runner, ctx = rig()
    decoding, joining = job(0, [1, 2, 3], 10), job(1, [10, 11], 5)

    def refuse(seq: int, n: int) -> None:
        ctx.on_keep = None
        raise EngineError(f"llama.cpp could not trim sequence {seq} to {n} tokens")

    def join_refused() -> None:
        runner.submit(joining)
        ctx.on_keep = refuse

    at_decode(ctx, 2, join_refused)
    runner.submit(decoding)
    assert isinstance(drain(joining).error, EngineError)
    drain(decoding)
    settle(runner)
    try:
        runner.submit(after := job(0, [1, 2, 3], 3))
        assert tokens(after) == [4, 5, 6]
        assert ctx.size == 0
    finally:
        ctx.violations.clear()


def test_an_empty_prompt_ends_instead_of_hanging(rig: Rig) -> None:
    runner, _ = rig()
    runner.submit(j := job(0, [], 3))
    try:
        assert isinstance(drain(j, timeout=1.0).error, EngineError)
    finally:
        runner.release(j)


def test_pending_tokens_that_exactly_fill_the_batch_are_decoded(rig: Rig) -> None:
    runner, _ = rig(ScriptedContext(n_seq=1, n_batch=32), options=BatchOptions(draft_tokens=0))
    span = list(range(10, 45))
    runner.submit(j := job(0, [1, 2, 3], 40, processor=Grammar(5, span)))
    try:
        assert drain(j, timeout=1.0).tokens == [4, 5, *range(10, 48)]
    finally:
        runner.release(j)


def test_a_full_sequence_ends_its_reply_and_spares_its_neighbours(rig: Rig) -> None:
    """32 cells per sequence: a prompt that fills them is refused, a reply that reaches them ends there
    (drafts included), and the other sequence's job is untouched either way."""
    runner, _ = rig(ScriptedContext(n_seq=2, n_ctx=64))
    too_long, neighbour = job(0, list(range(1, 33)), 5), job(1, [10, 11], 5)
    submit_all(runner, too_long, neighbour)
    assert isinstance(drain(too_long).error, EngineError)
    assert tokens(neighbour) == [12, 13, 14, 15, 16]
    runner.submit(long_reply := job(0, [1, 2, 3], 100))
    assert tokens(long_reply) == list(range(4, 33))  # 3 prompt + 29 replies = 32 cells
    drafting, _ = rig(ScriptedContext(n_seq=2, n_ctx=48))
    drafting.submit(copy := job(0, REPEATING, 100, processor=Grammar(copying=True)))
    assert tokens(copy) == list(range(2, 10))  # 16 prompt + 8 = 24 cells, drafts kept inside them
    assert drafting.stats.drafted > 0
