"""llama.cpp's own decode costs on this machine, with no server around them: the ceiling for batching.

One context laid out as ``tether serve --slots 8`` lays it out (8 sequences, a KV stream each), driven
directly: a 30-token prompt per sequence, then greedy steps. Measured, in alternating repetitions:

* ``1x1`` — one sequence, one token per step (what a lone stream, or serial requests, pay);
* ``8x1`` — eight sequences, one token each per step (what N = 8 pays);
* ``1xK`` — one sequence, K tokens per step (what a step carrying forced or drafted tokens pays).

``8 · t(1x1) / t(8x1)`` is the most any server can gain at N = 8 over serial decoding on this CPU, and
``(t(1xK) − t(1x1)) / (K − 1)`` is what each token appended to a step still costs.
"""

from __future__ import annotations

import statistics
import time

import numpy as np

from tether.engine.batch.context import BatchContext
from tether.engine.batch.engine import BatchedLlama

__all__ = ["kernel_costs"]

PROMPT = 30
STEPS = 64


def _steps(ctx: BatchContext, seqs: int, width: int) -> float:
    """Mean ms per decode of ``seqs`` sequences advancing ``width`` tokens each, after a fresh prompt."""
    for s in range(8):
        ctx.keep(s, 0)
    for s in range(seqs):
        for k in range(PROMPT):
            ctx.add(100 + 7 * s + k, k, s, logits=k == PROMPT - 1)
    ctx.decode()
    last = [int(np.argmax(ctx.logits(s * PROMPT + PROMPT - 1, copy=False))) for s in range(seqs)]
    pos, took = PROMPT, []
    for _ in range(STEPS // width):
        rows = []
        for s in range(seqs):
            for k in range(width):  # the sampled token, then tokens riding along (any ids: cost only)
                rows.append(ctx.add(last[s] if k == 0 else 200 + k, pos + k, s, logits=k == width - 1))
        started = time.perf_counter()
        ctx.decode()
        took.append(time.perf_counter() - started)
        last = [int(np.argmax(ctx.logits(row, copy=False))) for row in rows[width - 1 :: width]]
        pos += width
    return statistics.mean(took) * 1000


def kernel_costs(model: str, *, threads: int, reps: int = 3, ctx: int = 2048) -> dict[str, float]:
    """Median ms per step for ``1x1``, ``8x1``, ``1x2``, ``1x4`` and ``1x8`` (see the module doc)."""
    engine = BatchedLlama(model, n_seq=8, n_ctx=ctx, n_threads=threads)
    engine.runner.close()  # the context is driven directly here
    shapes = {"1x1": (1, 1), "8x1": (8, 1), "1x2": (1, 2), "1x4": (1, 4), "1x8": (1, 8)}
    took: dict[str, list[float]] = {name: [] for name in shapes}
    try:
        for r in range(reps):
            for name in shapes if r % 2 == 0 else reversed(list(shapes)):
                took[name].append(_steps(engine.ctx, *shapes[name]))
    finally:
        for slot in engine.slots():
            slot.close()
    return {name: statistics.median(values) for name, values in took.items()}
