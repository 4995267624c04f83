"""Continuous batching: one thread advances every active sequence of one context per decode.

Each step the runner puts into one ``llama_batch``: every decoding sequence's pending tokens
(the token it sampled, plus any the grammar forced after it, plus a draft to verify), then
prefill chunks of joining requests in arrival order — small ones while others are decoding,
so running streams keep flowing. After the decode each sequence samples with its own
processor chain and :class:`~tether.engine.batch.sampler.Sampler`, and hands its tokens to its
consumer's queue; the consumer (the slot's ``generate``) runs the engine token loop over them.

A request placed on a sequence keeps the longest prefix that sequence already holds, or — when
another sequence holds a longer one — gets a shared copy of it (``BatchContext.share``); one
that shares a long prefix with a request still prefilling it waits for that prefill instead of
computing the same prefix twice.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

import numpy as np
import structlog

from tether.engine.base import common_prefix_len
from tether.engine.batch.context import BatchContext
from tether.engine.batch.draft import forced_tokens, forcing_of, lookup_draft, text_draft
from tether.engine.batch.jobs import BatchOptions, BatchStats, Job
from tether.engine.batch.sampler import Sampler
from tether.engine.prefix import PrefixCache
from tether.errors import EngineError

__all__ = ["BatchOptions", "BatchRunner", "BatchStats", "Job"]  # the records live in jobs.py

log = structlog.get_logger(__name__)


class BatchRunner:
    """Owns ``ctx`` and its thread; ``submit`` a job, read ``job.tokens()``, ``release`` it."""

    def __init__(
        self,
        ctx: BatchContext,
        *,
        n_seq: int,
        eos: frozenset[int],
        options: BatchOptions,
        control: frozenset[int] = frozenset(),
        pieces: Sequence[bytes] = (),
        tokenize: Callable[[bytes], list[int]] | None = None,
        cache: PrefixCache | None = None,
    ) -> None:
        self.ctx = ctx
        self.cache = cache
        self._pieces, self._tokenize = pieces, tokenize  # for drafts matched on text (text_draft)
        self.eos = eos
        self.options = options
        self._draft_stops = eos | control  # a draft never runs on into the template's markers
        self.held: list[list[int]] = [[] for _ in range(n_seq)]  # what each sequence's cells hold
        self._cv = threading.Condition()
        self._inbox: list[Job] = []
        self._jobs: list[Job] = []
        self._touched: list[Job] = []  # the jobs the current step placed or put in the batch
        self._closing = False
        self.stats = BatchStats()
        # Forced tokens per sequence and step: every sequence's pending tokens must fit one batch.
        self._jump_cap = max(0, min(32, ctx.n_batch // n_seq - 1 - options.draft_tokens))
        self._seq_cells = ctx.n_ctx // n_seq  # a sequence's own KV stream
        self._thread = threading.Thread(target=self._run, name="tether-batch", daemon=True)
        self._thread.start()

    def submit(self, job: Job) -> None:
        with self._cv:
            if self._closing:
                raise EngineError("the engine is closing")
            self._inbox.append(job)
            self._cv.notify()

    def release(self, job: Job) -> None:
        """The consumer is done with ``job`` (finished, cancelled or hung up)."""
        with self._cv:
            job.closed = True
            self._cv.notify()

    def close(self) -> None:
        with self._cv:
            self._closing = True
            self._cv.notify()
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            with self._cv:
                while not self._closing and not self._inbox and not self._jobs:
                    self._cv.wait()
                if self._closing:
                    for job in [*self._inbox, *self._jobs]:
                        job.end(EngineError("the engine is closing"))
                    return
                for job in self._inbox:
                    self._start(job)
                self._jobs.extend(self._inbox)
                self._inbox.clear()
                done = [j for j in self._jobs if self._gone(j)]
                self._jobs = [j for j in self._jobs if j not in done]
            for job in done:
                self._save(job)
            if self._jobs:
                self._touched = []
                try:
                    self._step()
                except Exception as exc:  # a failed step fails the jobs in it, never the thread
                    log.error("batch_step_failed", error=repr(exc))
                    self._fail_step(exc)

    def _gone(self, job: Job) -> bool:
        if job.closed:
            return True
        if job.cancel is not None and job.cancel.is_set():
            job.end()
            return True
        return False

    def _save(self, job: Job) -> None:
        """Offer what a finished job's sequence holds to the prefix cache."""
        job.restore = None
        if self.cache is None or not job.placed:
            return
        held = self.held[job.seq]
        try:
            chain = self.cache.wants(held)
            if chain is not None:
                started = time.perf_counter()
                state = self.ctx.save_state(job.seq)
                self.cache.put(held, state, chain, save_s=time.perf_counter() - started)
        except Exception as exc:  # the cache is an optimization: never the runner's failure
            log.warning("prefix_cache_save_failed", error=repr(exc))

    def _start(self, job: Job) -> None:
        if not job.prompt or len(job.prompt) >= self._seq_cells:
            what = "an empty prompt" if not job.prompt else f"a prompt of {len(job.prompt)} tokens"
            self._fail_job(job, EngineError(f"{what} leaves nothing to generate in {self._seq_cells} cells"))
            return
        size = len(job.prompt) + job.params.max_tokens + self.options.draft_tokens + 2
        job.ids = np.zeros(size, dtype=np.intc)
        job.ids[: len(job.prompt)] = job.prompt
        job.n = len(job.prompt)
        job.sampler = Sampler(job.params)
        job.forcing = (
            forcing_of(job.processor) if self.options.jump_forward or self.options.draft_tokens else None
        )

    # Placement: what of the prompt is already in the cache, here or on another sequence.
    def _place(self, job: Job) -> bool:
        self._touched.append(job)
        prompt, seq = job.prompt, job.seq
        best, donor = self._cached(seq, prompt)
        if job.restore is not None:
            self._restore(job, best)
            best, donor = self._cached(seq, prompt)  # what the sequence holds now
        for other_job in self._jobs:
            if other_job is job or not other_job.placed or not other_job.todo:
                continue
            shared = common_prefix_len(other_job.prompt, prompt)
            if shared - best >= self.options.share_min:
                return False  # its prefill is computing our prefix: take a copy once it has
        keep = min(best, len(prompt) - 1)
        if donor is not None:
            self.ctx.keep(seq, 0)
            self.ctx.share(donor, seq, keep)
            self.stats.shared += keep
        else:
            self.ctx.keep(seq, keep)
        self.held[seq] = list(prompt[:keep])
        job.todo = list(prompt[keep:])
        job.evaluated = len(prompt) - keep
        job.placed, job.placed_at = True, time.monotonic()
        if self.options.jump_forward and job.forcing is not None:
            # A reply the grammar opens for it (`{"tool_calls": [{"name": "`) is prefilled with the prompt.
            limit = min(self._jump_cap, job.params.max_tokens - 1)
            for token in self._forced(job, limit):
                self.stats.forced += 1
                if token not in self.eos:
                    job.todo.append(token)
                if not self._emit(job, token, stored=True):
                    break
        return True

    def _cached(self, seq: int, prompt: list[int]) -> tuple[int, int | None]:
        """The longest prefix of ``prompt`` in the cache's cells, and the other sequence holding
        it (None: ``seq`` itself)."""
        best = common_prefix_len(self.held[seq], prompt)
        donor: int | None = None
        for other, cells in enumerate(self.held):
            if other != seq and (c := common_prefix_len(cells, prompt)) > best:
                best, donor = c, other
        return best, donor

    def _restore(self, job: Job, best: int) -> bool:
        """Restore the job's cached prefix into its sequence when it covers more than ``best``."""
        hit, job.restore = job.restore, None
        assert hit is not None and self.cache is not None
        keep = min(common_prefix_len(hit.entry.tokens, job.prompt), len(job.prompt) - 1)
        if keep <= best:
            return False
        started = time.perf_counter()
        self.held[job.seq] = []
        if not self.ctx.load_state(job.seq, hit.entry.state):
            self.cache.restore_failed()
            log.warning("prefix_cache_restore_failed", seq=job.seq, tokens=len(hit.entry.tokens))
            return False
        self.ctx.keep(job.seq, keep)
        self.held[job.seq] = list(job.prompt[:keep])
        self.cache.restored(keep, hit.load_s + time.perf_counter() - started)
        return True

    def _forced(self, job: Job, limit: int) -> list[int]:
        """What the job's grammar forces next; a grammar that fails ends that job only."""
        assert job.forcing is not None
        try:
            return forced_tokens(job.forcing, job.ids, job.n, limit=limit, eos=self.eos)
        except Exception as exc:
            self._fail_job(job, EngineError(f"the logits processor failed: {exc!r}"))
            return []

    def _step(self) -> None:
        started = time.perf_counter()
        self._fill_and_run()
        self.stats.step_s += time.perf_counter() - started

    def _fill_and_run(self) -> None:
        ctx = self.ctx
        # What each job puts in this step, chosen in policy order (decoding first, then prefill in
        # arrival order) and added to the batch by sequence id: (seq, job index, first position,
        # tokens, index of the first token whose logits are read).
        plan: list[tuple[int, int, int, list[int], int]] = []
        drafts: dict[int, list[int]] = {}
        chunks: dict[int, int] = {}  # job index -> prompt tokens in this batch
        room = ctx.room
        for i, job in enumerate(self._jobs):
            if job.closed or not job.placed or job.todo or not job.pending or room < len(job.pending):
                continue
            self._touched.append(job)
            draft = self._draft(job, room)
            plan.append((job.seq, i, len(self.held[job.seq]), [*job.pending, *draft], len(job.pending) - 1))
            drafts[i] = draft
            room -= len(job.pending) + len(draft)
        budget = min(room, self.options.prefill_chunk) if plan else room
        for i, job in enumerate(self._jobs):
            if budget <= 0:
                break
            if not job.placed and not self._place(job):
                continue
            if job.closed or not job.todo:
                continue
            chunk = job.todo[:budget]
            complete = len(chunk) == len(job.todo)
            plan.append(
                (job.seq, i, len(self.held[job.seq]), chunk, len(chunk) - 1 if complete else len(chunk))
            )
            chunks[i] = len(chunk)
            if complete:
                drafts[i] = []
            budget -= len(chunk)
        # llama.cpp splits a decode over separate KV streams into one pass over the weights per run
        # of consecutive, ascending sequence ids: rows in arrival order cost up to one pass per
        # sequence (31-42 ms instead of 26 for 8 streams). Sorted, a step of equal-length
        # sequences is one pass.
        rows: dict[int, list[int]] = {}  # job index -> batch rows whose logits it reads
        for seq, i, pos, tokens, first in sorted(plan):
            wanted = [ctx.add(t, pos + k, seq, logits=k >= first) for k, t in enumerate(tokens)]
            if first < len(tokens):
                rows[i] = wanted[first:]
        stats = self.stats
        stats.steps += 1
        stats.decoded += ctx.size
        stats.max_batch = max(stats.max_batch, len(plan))
        stats.drafted += sum(len(d) for d in drafts.values())
        decoding_started = time.perf_counter()
        ctx.decode()
        stats.decode_s += time.perf_counter() - decoding_started
        for i, job in enumerate(self._jobs):
            if i in chunks:
                self.held[job.seq].extend(job.todo[: chunks[i]])
                job.todo = job.todo[chunks[i] :]
            if i not in rows:
                continue
            self.held[job.seq].extend(job.pending)
            job.pending = []
            if not job.closed:
                self._advance(job, rows[i], drafts[i])

    def _draft(self, job: Job, room: int) -> list[int]:
        """Tokens to verify after ``job``'s pending ones; ``room``: what is left of the step's batch."""
        left = job.params.max_tokens - job.produced
        if not self.options.draft_tokens or job.sampler is None or not job.sampler.greedy or left <= 1:
            return []
        try:
            copying = job.forcing is not None and job.forcing.copying(job.ids[: job.n])
        except Exception as exc:
            self._fail_job(job, EngineError(f"the logits processor failed: {exc!r}"))
            return []
        if not copying:
            job.run_start, job.run_missed, job.text_tried = None, False, False
            return []
        if job.run_start is None:
            job.run_start = job.n - 1  # the token just sampled opened the run
        # Only the run itself says what is being copied: the tokens before it are the grammar's
        # (`": "`), which match the prompt's schemas and instructions everywhere. Its text places it
        # from its first token on (once); after that, an n-gram of its own ids.
        cells = self._seq_cells - job.n  # the draft's last token must still find a cell
        limit = min(self.options.draft_tokens, left - 1, room - len(job.pending) - 1, cells)
        if job.run_missed or limit <= 0:
            return []
        job.text_draft = False
        if not job.text_tried and self._tokenize is not None:
            found = text_draft(
                job.ids[: job.n], job.run_start, pieces=self._pieces, tokenize=self._tokenize, max_draft=limit
            )
            job.text_tried = found is not None
            if found:
                job.text_draft = True
                return self._until_stop(found)
        if job.n - job.run_start < self.options.ngram:
            return []
        return self._until_stop(lookup_draft(job.ids[: job.n], ngram=self.options.ngram, max_draft=limit))

    def _until_stop(self, draft: list[int]) -> list[int]:
        stop = next((k for k, t in enumerate(draft) if t in self._draft_stops), len(draft))
        return draft[:stop]

    def _advance(self, job: Job, rows: list[int], draft: list[int]) -> None:
        """Sample from the first row, then verify the draft row by row; emit what is accepted."""
        accepted = 0
        for k, row in enumerate(rows):
            token = self._sample(job, row)
            if token is None:
                return
            self.stats.sampled += 1
            if not self._emit(job, token):
                break
            if k < len(draft) and token == draft[k]:
                accepted += 1
                self.stats.accepted += 1
                self.held[job.seq].append(token)
                continue
            job.pending = [token]
            break
        if accepted < len(draft):
            self.ctx.keep(job.seq, len(self.held[job.seq]))  # drop the rejected draft's cells
            # An n-gram draft that missed means the copy has left its source; a text one may only
            # have placed the copy wrongly, so the run's own n-grams still get their chance.
            job.run_missed = job.run_missed or not job.text_draft
        if job.pending and self.options.jump_forward and job.forcing is not None:
            room = min(job.params.max_tokens - job.produced, self._jump_cap)
            forced = self._forced(job, room)
            self.stats.forced += len(forced)
            for token in forced:
                if not self._emit(job, token, stored=True):
                    return  # a forced EOS: the reply ends here and its pending tokens need no decode
                job.pending.append(token)

    def _sample(self, job: Job, row: int) -> int | None:
        assert job.sampler is not None
        # Only a processor or the repeat penalty writes to the row: plain sampling reads llama.cpp's own.
        edits = job.processor is not None or job.params.repeat_penalty != 1.0
        logits = self.ctx.logits(row, copy=edits)
        ids = job.ids[: job.n]
        if job.processor is not None:
            try:
                logits = job.processor(ids, logits)
            except Exception as exc:
                self._fail_job(job, EngineError(f"the logits processor failed: {exc!r}"))
                return None
        job.sampler.penalize(logits, ids[len(job.prompt) :])
        return job.sampler.pick(logits)

    def _emit(self, job: Job, token: int, *, stored: bool = False) -> bool:
        """Hand ``token`` to the consumer; False when the job has ended with it."""
        if not stored:
            job.ids[job.n] = token
        job.n += 1
        job.produced += 1
        job.out.put(token)
        # A full sequence ends the reply as its budget would (the proxy never lets it get that far).
        if token in self.eos or job.produced >= job.params.max_tokens or job.n >= self._seq_cells:
            job.end()
            job.closed = True
            job.pending = []
            return False
        return True

    def _fail_job(self, job: Job, error: EngineError) -> None:
        job.end(error)
        job.closed = True
        job.pending = []

    def _fail_step(self, exc: Exception) -> None:
        """A step that failed (a decode llama.cpp refused, a cache operation): the jobs it touched end
        with the error and their cells are dropped; the batch is emptied; every other job goes on."""
        error = exc if isinstance(exc, EngineError) else EngineError(f"the batched decode failed: {exc!r}")
        self.ctx.clear()
        for job in self._touched:
            if not job.closed:
                self._fail_job(job, error)
            self.held[job.seq] = []
            try:
                self.ctx.keep(job.seq, 0)
            except EngineError:
                log.error("batch_sequence_not_cleared", seq=job.seq)
