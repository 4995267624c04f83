"""Log-probabilities at the engine seam (``ContextEngine.generate``), which every engine shares.

They are the log-softmax of the row the token is sampled from, after every logits processor:
a masked token never shows up and the rest renormalize; rows are matched to tokens by position,
also for an engine that computes one step ahead (as mlx-lm does); nothing is recorded unless asked.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np
import numpy.typing as npt

from tether.engine.base import ContextEngine, Generation, GenerationEvent, SamplingParams, Token
from tether.engine.logprobs import FLOOR, MAX_TOP_LOGPROBS, log_softmax, top_ids
from tether.engine.loop import token_loop
from tether.engine.scripted import EOS_ID, ScriptedEngine


def tokens(events: Iterator[GenerationEvent]) -> list[Token]:
    return [e for e in events if isinstance(e, Token)]


def test_log_softmax_and_top_ids_match_a_full_sort() -> None:
    rng = np.random.default_rng(7)
    for _ in range(50):
        logits = rng.normal(size=300).astype(np.single)
        logits[rng.integers(0, 300, size=40)] = -np.inf  # masked
        logits[rng.integers(0, 300, size=20)] = 1.5  # ties
        row = log_softmax(logits)
        assert math.isclose(float(np.exp(row).sum()), 1.0, rel_tol=1e-9)
        for k in (0, 1, 5, 20, 299):
            want = [i for i in sorted(range(300), key=lambda i: (-row[i], i)) if np.isfinite(row[i])][:k]
            assert top_ids(row, k).tolist() == want
    assert np.isneginf(log_softmax(np.full(4, -np.inf, dtype=np.single))).all()


def test_a_masked_token_never_appears_and_the_rest_renormalize() -> None:
    allowed = np.array([ord("a"), ord("b"), ord("c"), EOS_ID])

    def mask(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        masked = np.full_like(logits, -np.inf)
        masked[allowed] = logits[allowed]
        return masked

    engine = ScriptedEngine(["xb"])  # "x" is masked: the sampler takes the best allowed token
    out = tokens(engine.generate([1, 2], SamplingParams(logprobs=MAX_TOP_LOGPROBS), logits_processor=mask))
    assert [t.text for t in out] == ["a", "b"]
    first, second = (t.logprob for t in out)
    assert first is not None and second is not None
    # Step 1: "x" (logit 10) masked, four allowed tokens at 0: uniform over them.
    assert math.isclose(first.chosen.logprob, -math.log(4))
    assert [c.id for c in first.top] == sorted(allowed)
    # Step 2: "b" keeps its 10 against three zeros; only allowed ids are listed, most likely first.
    assert math.isclose(second.chosen.logprob, 10 - math.log(math.exp(10) + 3), rel_tol=1e-6)
    assert [c.id for c in second.top] == [ord("b"), ord("a"), ord("c"), EOS_ID]
    assert second.top[0] == second.chosen and second.chosen.piece == b"b"
    for lp in (first, second):
        assert all(c.logprob > FLOOR for c in lp.top)
        assert sum(math.exp(c.logprob) for c in lp.top) <= 1 + 1e-9


class _AheadEngine(ContextEngine):
    """Calls the processor for step k+1 before it yields token k, as mlx-lm's pipelined loop does.
    Step k's row favours token k with logit k + 1, so a row paired with the wrong token shows."""

    VOCAB = 8

    def token_pieces(self) -> list[bytes]:
        return [bytes([ord("A") + i]) for i in range(self.VOCAB)]

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        ids = list(run.prompt)

        def step(k: int) -> int:
            logits = np.zeros(self.VOCAB, dtype=np.single)
            logits[k] = k + 1
            assert run.logits_processor is not None
            processed = run.logits_processor(np.asarray(ids, dtype=np.intc), logits)
            token = int(np.argmax(processed))
            ids.append(token)
            return token

        def sampled() -> Iterator[int]:
            token = step(0)
            for k in range(1, 5):
                ahead = step(k)  # the next row is computed before this token is handed out
                yield token
                token = ahead
            yield token

        yield from token_loop(
            sampled(),
            piece=lambda t: self.token_pieces()[t],
            eos=frozenset(),
            max_tokens=run.params.max_tokens,
            cancel=None,
            prompt_tokens=len(run.prompt),
            evaluated=len(run.prompt),
        )


def test_rows_follow_their_tokens_when_the_engine_samples_ahead() -> None:
    out = tokens(_AheadEngine().generate([0, 0, 0], SamplingParams(logprobs=1)))
    assert [t.id for t in out] == [0, 1, 2, 3, 4]
    for k, t in enumerate(out):
        assert t.logprob is not None
        want = (k + 1) - math.log(math.exp(k + 1) + 7)
        assert math.isclose(t.logprob.chosen.logprob, want, rel_tol=1e-6), k
        assert t.logprob.top == (t.logprob.chosen,)


class _Seen(ScriptedEngine):
    """Records the processor each generation ran with."""

    def __init__(self) -> None:
        super().__init__(["hi"])
        self.processors: list[object] = []

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        self.processors.append(run.logits_processor)
        return super()._generate(run)


def test_nothing_is_recorded_unless_asked() -> None:
    engine = _Seen()
    plain = tokens(engine.generate([1], SamplingParams()))
    assert engine.processors == [None]  # no processor at all: no per-token work
    assert all(t.logprob is None for t in plain)
    asked = tokens(engine.generate([1], SamplingParams(logprobs=0)))
    assert engine.processors[1] is not None
    assert [t.text for t in asked] == ["h", "i"]
    assert all(t.logprob is not None and t.logprob.top == () for t in asked)
