"""Plain logits processors for the request's own sampling settings: ``logit_bias`` and penalties.

Each is a ``LogitsProcessor`` callable, as in mlx-lm; ``chain`` composes them with the
layer-0 constraint, which always comes last so that no bias can re-open a masked token.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tether.engine.base import LogitsProcessor, SamplingParams

__all__ = ["Chain", "chain", "sampling_processors"]


def _bias(pairs: Sequence[tuple[int, float]]) -> LogitsProcessor:
    ids = np.asarray([i for i, _ in pairs], dtype=np.intp)
    values = np.asarray([v for _, v in pairs], dtype=np.single)

    def apply(_: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        logits[ids] += values
        return logits

    return apply


def _penalties(presence: float, frequency: float, prompt_len: int) -> LogitsProcessor:
    """OpenAI's definition: ``logit -= frequency * count + presence * (count > 0)`` over generated tokens."""

    def apply(ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        generated = ids[prompt_len:]
        if generated.size:
            seen, counts = np.unique(generated, return_counts=True)
            keep = seen < logits.shape[0]
            seen, counts = seen[keep], counts[keep]
            logits[seen] -= frequency * counts.astype(np.single) + presence
        return logits

    return apply


def sampling_processors(params: SamplingParams, prompt_len: int) -> list[LogitsProcessor]:
    """The processors ``params`` asks for (none for plain sampling)."""
    out: list[LogitsProcessor] = []
    if params.logit_bias:
        out.append(_bias(params.logit_bias))
    if params.presence_penalty or params.frequency_penalty:
        out.append(_penalties(params.presence_penalty, params.frequency_penalty, prompt_len))
    return out


class Chain:
    """Processors applied in order; ``parts`` lets an engine find the last one (layer 0)."""

    parts: tuple[LogitsProcessor, ...]

    def __init__(self, parts: Sequence[LogitsProcessor]) -> None:
        flat: list[LogitsProcessor] = []
        for p in parts:
            flat.extend(p.parts if isinstance(p, Chain) else [p])
        self.parts = tuple(flat)

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        for p in self.parts:
            logits = p(ids, logits)
        return logits


def chain(processors: Sequence[LogitsProcessor | None]) -> LogitsProcessor | None:
    """One processor applying ``processors`` in order (None entries skipped); None when there are none."""
    active = [p for p in processors if p is not None]
    if not active:
        return None
    if len(active) == 1:
        return active[0]
    return Chain(active)
