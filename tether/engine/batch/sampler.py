"""Per-request sampling over one logits row, in numpy: the batched engine's sampler.

The same chain, in the same order, as the serial engine's (``llama-cpp-python``'s): the
request's logits processors (biases, penalties, then layer 0), llama.cpp's ``repeat_penalty``
over the last 64 generated tokens, then greedy at ``temperature == 0``, else top-k, top-p,
min-p, temperature and a draw from the request's own seeded generator. Each sequence of a
batch has its own :class:`Sampler`, so one request's seed never depends on its neighbours.
"""

from __future__ import annotations

import secrets

import numpy as np
import numpy.typing as npt

from tether.engine.base import SamplingParams

__all__ = ["REPEAT_WINDOW", "Sampler"]

REPEAT_WINDOW = 64  # llama-cpp-python's last_n_tokens_size: the repeat penalty's window


class Sampler:
    """Picks one token from a processed logits row under ``params``."""

    def __init__(self, params: SamplingParams) -> None:
        self.params = params
        self.greedy = params.temperature == 0
        seed = params.seed if params.seed is not None else secrets.randbits(31)
        self._rng = np.random.default_rng(seed)

    def penalize(self, logits: npt.NDArray[np.single], generated: npt.NDArray[np.intc]) -> None:
        """llama.cpp's repeat penalty, in place: shrink the logits of recently generated tokens."""
        penalty = self.params.repeat_penalty
        if penalty == 1.0 or generated.size == 0:
            return
        seen = np.unique(generated[-REPEAT_WINDOW:])
        seen = seen[(seen >= 0) & (seen < logits.shape[0])]
        row = logits[seen]
        logits[seen] = np.where(row > 0, row / penalty, row * penalty)

    def pick(self, logits: npt.NDArray[np.single]) -> int:
        if self.greedy:
            return int(np.argmax(logits))
        p = self.params
        if p.temperature < 0:  # llama-cpp-python: a plain draw from the whole distribution
            return self._draw(logits[np.isfinite(logits)], np.flatnonzero(np.isfinite(logits)))
        n = logits.shape[0]
        ids = np.argpartition(-logits, p.top_k - 1)[: p.top_k] if 0 < p.top_k < n else np.arange(n)
        vals = logits[ids]
        order = np.argsort(-vals, kind="stable")
        ids, vals = ids[order], vals[order]
        finite = np.isfinite(vals)
        if not finite[0]:
            return int(ids[0])  # nothing allowed: the caller's constraint handles dead ends
        ids, vals = ids[finite], vals[finite]
        if p.top_p < 1.0:
            probs = _softmax(vals)
            cut = int(np.searchsorted(np.cumsum(probs), p.top_p)) + 1
            ids, vals = ids[:cut], vals[:cut]
        if p.min_p > 0.0:
            keep = vals >= vals[0] + np.log(p.min_p)
            ids, vals = ids[keep], vals[keep]
        return self._draw(vals / p.temperature, ids)

    def _draw(self, vals: npt.NDArray[np.single], ids: npt.NDArray[np.intp]) -> int:
        probs = _softmax(vals)
        return int(ids[int(self._rng.choice(len(ids), p=probs))])


def _softmax(vals: npt.NDArray[np.single]) -> npt.NDArray[np.float64]:
    shifted = np.asarray(vals, dtype=np.float64) - float(np.max(vals))
    e = np.exp(shifted)
    out: npt.NDArray[np.float64] = e / e.sum()
    return out
