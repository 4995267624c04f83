"""The batched llama.cpp engine: one model, one context, one sequence per scheduler slot.

:class:`BatchedLlama` loads the model once and owns the shared context and its
:class:`~tether.engine.batch.runner.BatchRunner`; its ``slots()`` are ``Engine`` views the
scheduler treats like separate engines (each has its own sequence, its own prefix to reuse).
A slot's ``generate`` hands the request to the runner and runs the one engine token loop over
the ids the runner emits, so EOS, budgets, cancellation and ``Done`` behave as everywhere.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import structlog

from tether.engine.base import (
    ContextEngine,
    EngineInfo,
    Generation,
    GenerationEvent,
    Prefill,
    common_prefix_len,
)
from tether.engine.batch.context import BatchContext
from tether.engine.batch.runner import BatchOptions, BatchRunner, Job
from tether.engine.llama_cpp import LlamaText, describe_llama, open_llama
from tether.engine.llama_options import LlamaOptions
from tether.engine.loop import token_loop
from tether.engine.prefix import PrefixCache
from tether.engine.stops import stop_at
from tether.grammar.local import LocalCompiler

__all__ = ["BatchSlot", "BatchedLlama"]

log = structlog.get_logger(__name__)


class BatchedLlama(LlamaText):
    """A GGUF model whose ``n_seq`` slots share one context of ``n_seq * n_ctx`` cells."""

    def __init__(
        self,
        path: str | Path,
        *,
        n_seq: int,
        n_ctx: int = 8192,
        n_threads: int | None = None,
        n_batch: int = 512,
        options: LlamaOptions | None = None,
        batch: BatchOptions | None = None,
        prefix_cache: PrefixCache | None = None,
    ) -> None:
        # The loading context only has to exist; the shared one below does the work.
        self._llm, options, threads = open_llama(
            path, n_ctx=64, n_threads=n_threads, n_batch=64, options=options
        )
        try:
            self.info = self._text_info = describe_llama(self._llm, path, options, n_ctx)
            self.ctx = BatchContext(
                self._llm, n_ctx=n_ctx * n_seq, n_seq=n_seq, n_batch=n_batch, flash_attn=options.flash_attn
            )
        except BaseException:
            self._llm.close()
            raise
        self._llm._ctx.close()  # free the loading context's cache: only its model and vocabulary are used
        self.options = batch or BatchOptions()
        self.runner = BatchRunner(
            self.ctx,
            n_seq=n_seq,
            eos=self.info.eos_token_ids,
            options=self.options,
            control=self.info.control_token_ids,
            pieces=self.token_pieces(),
            tokenize=self._tokenize_bytes,
            cache=prefix_cache,
        )
        self.cache = prefix_cache
        self.compiler = LocalCompiler(self)  # one vocabulary, one plan cache for every slot
        self._slots = [BatchSlot(self, seq) for seq in range(n_seq)]
        self._open = n_seq
        log.info(
            "model_loaded",
            path=str(path),
            n_ctx=n_ctx,
            slots=n_seq,
            batched=True,
            threads=threads,
            **options.describe(),
        )

    def _tokenize_bytes(self, data: bytes) -> list[int]:
        """Plain text to ids, no BOS, special-token text left as text (the runner's text drafts)."""
        return list(self._llm.tokenize(data, add_bos=False, special=False))

    def slots(self) -> list[BatchSlot]:
        return list(self._slots)

    def close_slot(self) -> None:
        """One slot closed; the last one closes the runner, the context and the model."""
        self._open -= 1
        if self._open == 0:
            self.runner.close()
            if self.cache is not None:
                self.cache.close()
            self.ctx.close()
            self._llm.close()


class BatchSlot(ContextEngine):
    """One sequence of a :class:`BatchedLlama`, as an ``Engine`` for the scheduler."""

    def __init__(self, owner: BatchedLlama, seq: int) -> None:
        super().__init__()
        self._owner = owner
        self.seq = seq
        self._closed = False
        self._job: Job | None = None  # the generation running on this sequence

    @property
    def info(self) -> EngineInfo:
        return self._owner.info

    def tokenize(self, text: str, *, special: bool = True) -> list[int]:
        return self._owner.tokenize(text, special=special)

    def detokenize(self, ids: Sequence[int]) -> str:
        return self._owner.detokenize(ids)

    def token_pieces(self) -> list[bytes]:
        return self._owner.token_pieces()

    @property
    def compiler(self) -> LocalCompiler:
        return self._owner.compiler

    def batch_stats(self) -> dict[str, float | int]:
        """The shared runner's counters (``/health`` shows them under ``batch``)."""
        return self._owner.runner.stats.as_dict()

    def cached_prefix_len(self, prompt: Sequence[int]) -> int:
        return common_prefix_len(self._owner.runner.held[self.seq], prompt)

    def prefix_cache_stats(self) -> dict[str, Any] | None:
        cache = self._owner.cache
        return cache.snapshot() if cache is not None else None

    def _generate(self, run: Generation) -> Iterator[GenerationEvent]:
        owner = self._owner
        job = Job(self.seq, run.prompt, run.params, run.logits_processor, run.cancel)
        cache = owner.cache
        if cache is not None:  # loaded here, so the runner only copies it into the sequence
            have = max(common_prefix_len(list(cells), run.prompt) for cells in owner.runner.held)
            job.restore = cache.lookup(run.prompt, have=have)
        self._job = job
        owner.runner.submit(job)
        pieces = owner.token_pieces()
        try:
            events = token_loop(
                job.tokens(owner.options.handoff_window),
                piece=lambda t: pieces[t] if 0 <= t < len(pieces) else b"",
                eos=owner.info.eos_token_ids,
                max_tokens=run.params.max_tokens,
                cancel=run.cancel,
                prompt_tokens=len(run.prompt),
                evaluated=lambda: job.evaluated,
            )
            if owner.model_stops:  # a model with no template of its own: the fallback's turn markers
                events = stop_at(
                    events, owner.model_stops, prompt_tokens=len(run.prompt), evaluated=lambda: job.evaluated
                )
            yield from events
        finally:
            self._job = None
            owner.runner.release(job)

    def prefill_progress(self) -> Prefill | None:
        job = self._job
        if job is None or not job.placed or not job.todo or job.produced:
            return None
        done = max(0, job.evaluated - len(job.todo))
        return Prefill(done, job.evaluated, time.monotonic() - job.placed_at)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._owner.close_slot()
