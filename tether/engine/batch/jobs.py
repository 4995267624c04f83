"""The batched runner's records: its options, its counters and one job per generation.

Kept apart from :mod:`tether.engine.batch.runner`, which holds the policy (filling a step,
placement and sharing, jump-forward and drafts); these are only its bookkeeping types.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from tether.engine.base import LogitsProcessor, SamplingParams
from tether.engine.batch.draft import Forcing
from tether.engine.batch.sampler import Sampler
from tether.engine.prefix import Hit

__all__ = ["END", "BatchOptions", "BatchStats", "Job"]

END = object()  # the runner is done with a job (its consumer decides the finish reason)


@dataclass(frozen=True)
class BatchOptions:
    """How the runner fills a step. ``draft_tokens = 0`` turns prompt-lookup speculation off."""

    prefill_chunk: int = 128  # prompt tokens per step while other sequences are decoding
    jump_forward: bool = True
    draft_tokens: int = 8
    ngram: int = 3
    share_min: int = 32  # wait for another request's prefill only to share at least this many tokens
    # Seconds a generation's thread lets tokens gather before it wakes for them (the end wakes it at
    # once): one wake-up per window instead of one per token on the cores ggml's threads spin on.
    handoff_window: float = 0.0


@dataclass
class BatchStats:
    """What the runner did: decode steps, tokens per kind, and prefix cells shared instead of computed."""

    steps: int = 0
    decoded: int = 0  # tokens evaluated (prompt chunks, sampled, forced and draft tokens)
    sampled: int = 0
    forced: int = 0  # appended by jump-forward without a sampling step
    drafted: int = 0
    accepted: int = 0  # draft tokens the model's own greedy choice confirmed
    shared: int = 0  # prompt tokens copied from another sequence's cells
    max_batch: int = 0  # the most sequences in one decode
    decode_s: float = 0.0  # time inside llama_decode
    step_s: float = 0.0  # time of whole steps: the rest is filling batches, sampling, masks, drafts

    def as_dict(self) -> dict[str, float | int]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in vars(self).items()}


@dataclass(eq=False)
class Job:
    """One generation on one sequence, from the runner's side."""

    seq: int
    prompt: list[int]
    params: SamplingParams
    processor: LogitsProcessor | None
    cancel: threading.Event | None
    out: queue.SimpleQueue[object] = field(default_factory=queue.SimpleQueue)
    ended: threading.Event = field(default_factory=threading.Event)  # END or an error is in ``out``
    evaluated: int = 0
    closed: bool = False
    # Runner state: ids (prompt + emitted tokens) and the tokens emitted but not yet in the KV cache.
    ids: npt.NDArray[np.intc] = field(default_factory=lambda: np.zeros(0, dtype=np.intc))
    n: int = 0
    todo: list[int] = field(default_factory=list)
    pending: list[int] = field(default_factory=list)
    produced: int = 0
    placed: bool = False
    placed_at: float = 0.0  # time.monotonic() when its prefill began
    sampler: Sampler | None = None
    forcing: Forcing | None = None
    # Drafting: where the current free-text run began (None outside one), and whether a draft
    # already failed in it (the copy left its source: no more guessing until the next run).
    run_start: int | None = None
    run_missed: bool = False
    text_tried: bool = False  # the run's text has been looked up (text_draft), once per run
    text_draft: bool = False  # the draft being verified came from that lookup
    restore: Hit | None = None  # a cached prefix to restore at placement (loaded by the consumer)

    def end(self, item: object = END) -> None:
        """The runner's side: the job's last item (``END`` or an error), waking its consumer."""
        self.out.put(item)
        self.ended.set()

    def tokens(self, window: float = 0.0) -> Iterator[int]:
        """The consumer's side: token ids as the runner emits them; after the first, with ``window``,
        an empty queue is left to fill that long (or until the end) before this thread blocks on it."""
        first = True
        while True:
            if window > 0 and not first and self.out.empty():
                self.ended.wait(window)
            first = False
            item = self.out.get()
            if item is END:
                return
            if isinstance(item, BaseException):
                raise item
            assert isinstance(item, int)
            yield item
