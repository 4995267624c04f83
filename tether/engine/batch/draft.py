"""Where a step's extra tokens come from: text the constraint forces, and drafts from the conversation.

Both are plain functions of a request's ids and its logits processor, so the runner stays
about batches. *Jump-forward* (:func:`forced_tokens`) asks the processor chain's last member
(layer 0) which single token its grammar allows next; such a token is what any sampler picks,
so appending it without a decode step changes nothing. *Prompt lookup* (:func:`lookup_draft`)
proposes the tokens that followed the latest earlier occurrence of the last few ids; the
runner verifies a draft against the model's own greedy choice under the mask, step by step.
A copy that has just begun has no ids of its own to match yet, and its first token rarely
equals the source's (``"src`` inside a JSON string, `` src`` in the sentence), so
:func:`text_draft` matches its *text* instead and drafts the source's continuation in the
model's own tokenization.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from tether.engine.base import LogitsProcessor
from tether.engine.processors import Chain

__all__ = ["Forcing", "forced_tokens", "forcing_of", "lookup_draft", "text_draft"]


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
    last: LogitsProcessor | None = processor
    while isinstance(last, Chain) and last.parts:
        last = last.parts[-1]
    return last if isinstance(last, Forcing) else None


def forced_tokens(
    forcing: Forcing, ids: npt.NDArray[np.intc], n: int, *, limit: int, eos: frozenset[int]
) -> list[int]:
    """Up to ``limit`` tokens the grammar forces after ``ids[:n]``; ``ids`` has room for them and
    receives them (the processor reads its ids from this buffer). A forced EOS is the last one:
    it ends the reply, so neither it nor the tokens before it need a decode."""
    out: list[int] = []
    while len(out) < limit and n < ids.shape[0]:
        token = forcing.forced_next(ids[:n])
        if token is None:
            break
        ids[n] = token
        n += 1
        out.append(token)
        if token in eos:
            break
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


def text_draft(
    ids: npt.NDArray[np.intc],
    run_start: int,
    *,
    pieces: Sequence[bytes],
    tokenize: Callable[[bytes], list[int]],
    max_draft: int,
    min_bytes: int = 2,
    tail_bytes: int = 64,
) -> list[int] | None:
    """A draft for the copy ``ids[run_start:]`` from where its text last occurs in ``ids[:run_start]``:
    the source's next ``tail_bytes``, tokenized together with the copy so far (which must come out
    as the copy's own ids). The copy's opening quote is not part of what it copies. None while the
    copy has fewer than ``min_bytes`` of text (too little to place it); an empty list when it was
    placed nowhere."""
    n = len(pieces)
    run = [int(t) for t in ids[run_start:]]
    said = b"".join(pieces[t] for t in run if 0 <= t < n)
    copied = said.lstrip(b" \t\"'")
    if len(copied.strip()) < min_bytes:
        return None
    before = b"".join(pieces[t] for t in ids[:run_start].tolist() if 0 <= t < n)
    at = before.rfind(copied)
    if at < 0:
        return []
    end = at + len(copied)
    tokens = tokenize(said + before[end : end + tail_bytes])
    if tokens[: len(run)] != run:
        return []
    return tokens[len(run) : len(run) + max_draft]
