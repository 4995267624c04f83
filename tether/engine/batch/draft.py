"""Where a step's extra tokens come from: text the constraint forces, and drafts from the conversation.

Both are plain functions of a request's ids and its logits processor, so the runner stays
about batches. *Jump-forward* (:func:`forced_tokens`) asks the processor chain's last member
(layer 0) which single token its grammar allows next; such a token is what any sampler picks,
so appending it without a decode step changes nothing. *Prompt lookup* (:func:`lookup_draft`)
proposes the tokens that followed the latest earlier occurrence of the last few ids; the
runner verifies a draft against the model's own greedy choice under the mask, step by step.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tether.engine.base import LogitsProcessor

__all__ = ["Forcing", "forced_tokens", "forcing_of", "lookup_draft"]


@runtime_checkable
class Forcing(Protocol):
    """A logits processor that can tell, without logits, the one token it allows next."""

    def copying(self, ids: npt.NDArray[np.intc]) -> bool:
        """True where the reply after ``ids`` most likely copies the conversation (an argument
        string): the only place a draft is worth verifying (consumes ``ids`` as a call would)."""
        ...

    def forced_next(self, ids: npt.NDArray[np.intc]) -> int | None:
        """The only token allowed after ``ids`` (consuming ``ids`` as a call would), or None."""
        ...


def forcing_of(processor: LogitsProcessor | None) -> Forcing | None:
    """The chain's last member when it can force tokens (layer 0 is always chained last); a
    chain ending in anything else (a log-probability recorder) must see every step: None."""
    last: Any = processor
    while last is not None and getattr(last, "parts", None):
        last = last.parts[-1]
    return last if isinstance(last, Forcing) else None


def forced_tokens(
    forcing: Forcing, ids: npt.NDArray[np.intc], n: int, *, limit: int, eos: frozenset[int]
) -> list[int]:
    """Up to ``limit`` tokens the grammar forces after ``ids[:n]``; ``ids`` has room for them and
    receives them (the processor reads its ids from this buffer)."""
    out: list[int] = []
    while len(out) < limit and n < ids.shape[0]:
        token = forcing.forced_next(ids[:n])
        if token is None or token in eos:
            break
        ids[n] = token
        n += 1
        out.append(token)
    return out


def lookup_draft(
    ids: npt.NDArray[np.intc], *, ngram: int = 3, min_ngram: int = 3, max_draft: int = 8
) -> list[int]:
    """The ids that followed the latest earlier occurrence of the last ``ngram`` (down to
    ``min_ngram``) ids, at most ``max_draft`` of them; empty when nothing matches."""
    size = ids.shape[0]
    for n in range(ngram, min_ngram - 1, -1):
        if size <= n:
            continue
        tail = ids[size - n :]
        windows = np.lib.stride_tricks.sliding_window_view(ids[: size - 1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            start = int(hits[-1]) + n
            return [int(t) for t in ids[start : min(start + max_draft, size)]]
    return []
