"""The MLX engine on its own: prefix reuse, resumption, stops, cancellation, sampling, the processor seam."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pytest

from tests.mlx._util import greedy, step_logits
from tether.engine.base import Done, Engine, SamplingParams, Token
from tether.engine.template import ChatTemplate
from tether.errors import EngineError

if TYPE_CHECKING:
    from tether.engine.mlx import MlxEngine

SYSTEM = "You are a terse assistant. Answer in one short sentence. " * 4


def chat(engine: MlxEngine, user: str, system: str = SYSTEM) -> list[int]:
    template = ChatTemplate(engine.info.chat_template)
    return engine.tokenize(
        template.render([{"role": "system", "content": system}, {"role": "user", "content": user}])
    )


def events(engine: Engine, ids: list[int], params: SamplingParams, **kw: object) -> tuple[list[Token], Done]:
    out = list(engine.generate(ids, params, **kw))  # type: ignore[arg-type]
    done = out[-1]
    assert isinstance(done, Done) and all(isinstance(e, Token) for e in out[:-1])
    return [e for e in out[:-1] if isinstance(e, Token)], done


def test_protocol_and_info(mlx_engine: MlxEngine) -> None:
    assert isinstance(mlx_engine, Engine)
    info = mlx_engine.info
    assert info.n_ctx == 4096 and info.n_vocab == 49152 == len(mlx_engine.token_pieces())
    assert info.metadata["engine"] == "mlx" and info.metadata["mlx.blas"]


def test_prefix_reuse_evaluates_only_the_tail(mlx_engine: MlxEngine) -> None:
    engine = mlx_engine.sibling()  # an empty cache, whatever ran before
    first, second = chat(engine, "Name a colour."), chat(engine, "Name a fruit.")
    common = next(i for i, (a, b) in enumerate(zip(first, second, strict=False)) if a != b)
    assert common > 40
    _, done = events(engine, first, SamplingParams(max_tokens=2, temperature=0))
    assert done.prompt_tokens_evaluated == len(first)
    assert engine.cached_prefix_len(second) == common
    _, done = events(engine, second, SamplingParams(max_tokens=1, temperature=0))
    assert done.prompt_tokens_evaluated == len(second) - common  # only the tail, on top of the kept cache
    reused = step_logits(engine, second)[0]
    assert engine.cached_prefix_len(second) == len(second)
    fresh = engine.sibling()
    assert fresh.cached_prefix_len(second) == 0  # siblings share weights, not caches
    _, done = events(fresh, second, SamplingParams(max_tokens=1, temperature=0))
    assert done.prompt_tokens_evaluated == len(second)
    np.testing.assert_allclose(reused, step_logits(fresh, second)[0], atol=2e-3)
    # The same prompt again: everything but the last token comes from the cache.
    _, done = events(engine, second, SamplingParams(max_tokens=1, temperature=0))
    assert (done.prompt_tokens, done.prompt_tokens_evaluated) == (len(second), 1)


def test_resume_after_close_continues_the_same_text(mlx_engine: MlxEngine) -> None:
    ids = chat(mlx_engine, "Describe the sea.")
    whole = greedy(mlx_engine.sibling(), ids, 6)
    gen = mlx_engine.generate(ids, SamplingParams(max_tokens=6, temperature=0))
    head = [next(gen), next(gen), next(gen)]
    gen.close()  # what the scheduler does on preemption
    assert [t.id for t in head if isinstance(t, Token)] == whole[:3]
    tokens, done = events(mlx_engine, ids + whole[:3], SamplingParams(max_tokens=3, temperature=0))
    assert done.prompt_tokens_evaluated == 1
    assert [t.id for t in tokens] == whole[3:]


def test_stop_on_eos_length_and_context_cap(mlx_engine: MlxEngine, mlx_dir: Path) -> None:
    ids = chat(mlx_engine, "Reply with the single word: yes", system="Be brief.")
    tokens, done = events(mlx_engine, ids, SamplingParams(max_tokens=24, temperature=0))
    assert done.finish_reason == "stop" and done.completion_tokens == len(tokens) < 24
    assert "<|im_end|>" not in "".join(t.text for t in tokens)
    tokens, done = events(mlx_engine, ids, SamplingParams(max_tokens=2, temperature=0))
    assert (done.finish_reason, done.completion_tokens, len(tokens)) == ("length", 2, 2)
    from tether.engine.mlx import MlxEngine

    small = MlxEngine(mlx_dir, n_ctx=len(ids) + 1)
    _, done = events(small, ids, SamplingParams(max_tokens=50, temperature=0))
    assert (done.finish_reason, done.completion_tokens) == ("length", 1)
    _, done = events(small, ids + ids[:5], SamplingParams(max_tokens=50, temperature=0))
    assert (done.finish_reason, done.completion_tokens, done.prompt_tokens_evaluated) == ("length", 0, 0)


def test_cancel_stops_after_the_current_token(mlx_engine: MlxEngine) -> None:
    cancel = threading.Event()
    out = []
    for ev in mlx_engine.generate(
        chat(mlx_engine, "Count to ten."), SamplingParams(max_tokens=20), cancel=cancel
    ):
        out.append(ev)
        if isinstance(ev, Token) and len(out) == 2:
            cancel.set()
    done = out[-1]
    assert isinstance(done, Done) and done.finish_reason == "cancelled" and done.completion_tokens == 2


def test_busy_engine_refuses_a_second_generation(mlx_engine: MlxEngine) -> None:
    ids = chat(mlx_engine, "Hi")
    gen = mlx_engine.generate(ids, SamplingParams(max_tokens=3, temperature=0))
    next(gen)
    with pytest.raises(EngineError):
        next(mlx_engine.generate(ids, SamplingParams(max_tokens=1)))
    gen.close()
    assert greedy(mlx_engine, ids, 1)  # released once the first one is closed


def test_seeded_sampling_reproduces(mlx_engine: MlxEngine) -> None:
    ids = chat(mlx_engine, "Invent a name for a cat.")

    def sample(seed: int) -> list[int]:
        params = SamplingParams(max_tokens=4, temperature=1.5, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
        return [t.id for t in events(mlx_engine, ids, params)[0]]

    assert sample(7) == sample(7)
    assert len({tuple(sample(s)) for s in range(3)}) > 1  # it does sample


def test_processor_sees_full_ids_and_masks(mlx_engine: MlxEngine) -> None:
    ids = chat(mlx_engine, "Say something.")
    forced = mlx_engine.tokenize(" ok")[0]
    for _ in range(2):  # the second run reuses the cache: the processor must still see the whole prompt
        force = _Force(forced)
        tokens, done = events(
            mlx_engine, ids, SamplingParams(max_tokens=4, temperature=0.7), logits_processor=force
        )
        assert [t.id for t in tokens] == [forced] * 4 and done.completion_tokens == 4
        assert [len(s) for s in force.seen[:4]] == [len(ids) + k for k in range(4)]
        assert force.seen[0].tolist() == ids and force.seen[3].tolist() == [*ids, forced, forced, forced]


class _Force:
    """A processor that allows one token only and records the ids it is shown."""

    def __init__(self, token: int) -> None:
        self.token = token
        self.seen: list[npt.NDArray[np.intc]] = []

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        self.seen.append(ids.copy())
        logits[:] = -np.inf
        logits[self.token] = 0.0
        return logits
