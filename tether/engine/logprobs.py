"""Log-probabilities of sampled tokens: the one place they are computed, for every engine.

:func:`recorded` chains a :class:`LogprobRecorder` after the generation's logits processors
(the request's ``logit_bias`` and penalties, then layer 0's mask, steering and grounding), so
it sees the row the token is actually sampled from. It keeps that row's log-softmax by
position (``len(ids)``: the index of the token about to be sampled; engines that compute one
step ahead, as mlx-lm does, stay aligned) and hands it to the token when the token loop emits it.

The distribution is ``log_softmax(processed logits)`` at temperature 1: before temperature,
top-k, top-p and min-p (llama.cpp's ``repeat_penalty``, applied inside its own sampler chain,
is not in it either). A token the constraint masked has probability 0 there and never shows up
among the top tokens; greedy decoding picks the top-1 entry. Nothing here runs unless
``SamplingParams.logprobs`` asks for it.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator, Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt

from tether.engine.base import Generation, GenerationEvent, Token, TokenChoice, TokenLogprob
from tether.engine.processors import chain

__all__ = ["FLOOR", "MAX_TOP_LOGPROBS", "LogprobRecorder", "log_softmax", "recorded", "top_ids"]

MAX_TOP_LOGPROBS = 20  # OpenAI's limit for top_logprobs
FLOOR = -9999.0  # what OpenAI reports for a token of (numerically) zero probability


def log_softmax(logits: npt.NDArray[np.single]) -> npt.NDArray[np.float64]:
    """``logits - logsumexp(logits)`` in float64; masked (``-inf``) entries stay ``-inf``."""
    row = np.asarray(logits, dtype=np.float64)
    top = float(row.max()) if row.size else -np.inf
    if not np.isfinite(top):
        return np.full(row.shape, -np.inf)
    shifted = row - top
    return shifted - float(np.log(np.exp(shifted).sum()))


def top_ids(row: npt.NDArray[np.float64], k: int) -> npt.NDArray[np.intp]:
    """The ``k`` most likely ids of ``row`` (masked ones left out), most likely first, ties by id.

    O(vocab): a partition finds the k-th value; only the ids at or above it are sorted."""
    k = min(k, row.size)
    if k <= 0:
        return np.empty(0, dtype=np.intp)
    kth = np.partition(row, row.size - k)[row.size - k]
    above = np.flatnonzero(row > kth)
    tied = np.flatnonzero(row == kth)[: k - above.size]
    ids = np.concatenate([above, tied])
    ids = ids[np.isfinite(row[ids])]
    ordered: npt.NDArray[np.intp] = ids[np.lexsort((ids, -row[ids]))]
    return ordered


class LogprobRecorder:
    """A logits processor, chained last, that keeps each step's log-softmax until its token is emitted."""

    def __init__(self, top: int, pieces: Sequence[bytes]) -> None:
        self.top = max(0, min(top, MAX_TOP_LOGPROBS))
        self.pieces = pieces
        self._rows: dict[int, npt.NDArray[np.float64]] = {}

    def __call__(self, ids: npt.NDArray[np.intc], logits: npt.NDArray[np.single]) -> npt.NDArray[np.single]:
        self._rows[len(ids)] = log_softmax(logits)
        return logits

    def _choice(self, row: npt.NDArray[np.float64], token: int) -> TokenChoice:
        value = float(row[token]) if 0 <= token < row.size else -np.inf
        piece = self.pieces[token] if 0 <= token < len(self.pieces) else b""
        return TokenChoice(token, piece, max(value, FLOOR))

    def entry(self, position: int, token: int) -> TokenLogprob | None:
        """The log-probabilities of ``token`` sampled at ``position`` (None if no row was seen)."""
        row = self._rows.pop(position, None)
        for stale in [p for p in self._rows if p < position]:
            del self._rows[stale]
        if row is None:
            return None
        top = tuple(self._choice(row, int(i)) for i in top_ids(row, self.top))
        return TokenLogprob(self._choice(row, token), top)

    def annotate(self, events: Iterator[GenerationEvent], prompt_len: int) -> Iterator[GenerationEvent]:
        """``events`` with each sampled ``Token`` carrying its ``TokenLogprob``."""
        position = prompt_len
        for event in events:
            if isinstance(event, Token) and event.id >= 0:
                event = replace(event, logprob=self.entry(position, event.id))
                position += 1
            yield event


def recorded(
    run: Generation,
    generate: Callable[[Generation], Iterator[GenerationEvent]],
    pieces: Sequence[bytes],
) -> Iterator[GenerationEvent]:
    """``generate(run)`` with a recorder after ``run``'s processors and logprobs on its tokens."""
    recorder = LogprobRecorder(run.params.logprobs or 0, pieces)
    processor = chain([run.logits_processor, recorder])
    events = generate(replace(run, logits_processor=processor))
    try:
        yield from recorder.annotate(events, len(run.prompt))
    finally:
        if isinstance(events, Generator):
            events.close()
