"""Helpers shared by the MLX tests."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tether.engine.base import Engine, SamplingParams, Token

GREEDY = SamplingParams(max_tokens=1, temperature=0.0)


def step_logits(engine: Engine, ids: Sequence[int], n: int = 1) -> list[npt.NDArray[np.float32]]:
    """The logits the engine hands its processor at each of the first ``n`` greedy steps."""
    seen: list[npt.NDArray[np.float32]] = []

    def record(_ids: npt.NDArray[np.intc], logits: npt.NDArray[np.float32]) -> npt.NDArray[np.float32]:
        seen.append(np.array(logits, dtype=np.float32, copy=True))
        return logits

    params = SamplingParams(max_tokens=n, temperature=0.0)
    for _ in engine.generate(ids, params, logits_processor=record):
        pass
    return seen[:n]


def greedy(engine: Engine, ids: Sequence[int], n: int) -> list[int]:
    params = SamplingParams(max_tokens=n, temperature=0.0)
    return [ev.id for ev in engine.generate(ids, params) if isinstance(ev, Token) and ev.id >= 0]


def margin(logits: npt.NDArray[np.float32]) -> float:
    """Gap between the best and the second-best logit (how firm a greedy choice is)."""
    top2 = np.partition(logits, -2)[-2:]
    return float(top2[1] - top2[0])
