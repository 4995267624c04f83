"""Sharing engine slots between concurrent requests.

Each slot is one engine instance with its own context, so two generations never
interleave on one context. Waiting requests are served by priority (lower value
first), FIFO within a priority; a full queue is refused with ``QueueFullError``
(HTTP 429). Among free slots, the one already holding the longest prefix of the
prompt wins, so prefix reuse survives several slots.

With ``preempt=True`` a waiter may preempt a running generation of lower priority
(higher value). The running generation stops at a token boundary (never inside a
UTF-8 character), gives up its slot, is requeued at its priority with its original
place in line, and later resumes with ``prompt + tokens generated so far``: the
consumer's event stream simply pauses and continues, and prefix reuse makes the
resume cheap. The logits processor is shared by the segments; it sees the same
``ids`` sequence it would have seen without the pause.
"""

from __future__ import annotations

import asyncio
import codecs
import heapq
import itertools
import threading
import time
from collections.abc import AsyncGenerator, Iterator, Sequence
from dataclasses import dataclass, field, replace

import structlog

from tether.engine.base import Done, Engine, GenerationEvent, LogitsProcessor, SamplingParams, Token
from tether.errors import EngineError, QueueFullError

__all__ = ["Scheduler", "SchedulerStats"]

log = structlog.get_logger(__name__)


@dataclass
class SchedulerStats:
    """Counters exposed on ``/health`` and in logs."""

    started: int = 0
    completed: int = 0
    rejected: int = 0
    cancelled: int = 0
    preempted: int = 0
    resumed: int = 0
    total_wait_s: float = 0.0
    max_wait_s: float = 0.0
    resume_wait_s: float = 0.0
    max_queue_depth: int = 0

    def as_dict(self, queue_depth: int, busy: int, slots: int) -> dict[str, float | int]:
        mean = self.total_wait_s / self.started if self.started else 0.0
        return {
            "slots": slots,
            "busy_slots": busy,
            "queue_depth": queue_depth,
            "max_queue_depth": self.max_queue_depth,
            "started": self.started,
            "completed": self.completed,
            "rejected": self.rejected,
            "cancelled": self.cancelled,
            "preempted": self.preempted,
            "resumed": self.resumed,
            "mean_wait_s": round(mean, 4),
            "max_wait_s": round(self.max_wait_s, 4),
            "resume_wait_s": round(self.resume_wait_s, 4),
        }


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    prompt: Sequence[int] = field(compare=False)
    future: asyncio.Future[int] = field(compare=False)


@dataclass
class _Run:
    """A generation that holds a slot; ``preempt`` asks its engine thread to stop at a token boundary."""

    priority: int
    seq: int
    preempt: threading.Event = field(default_factory=threading.Event)


_SENTINEL_ERROR = object()
_PREEMPTED = object()


def _close(gen: Iterator[GenerationEvent]) -> None:
    """Close an engine's generator (a plain iterator has nothing to close)."""
    close = getattr(gen, "close", None)
    if close is not None:
        close()


class Scheduler:
    """Runs generations on a fixed set of engine slots; ``preempt`` enables priority preemption."""

    def __init__(self, engines: Sequence[Engine], *, queue_limit: int = 16, preempt: bool = False) -> None:
        if not engines:
            raise ValueError("at least one engine slot is required")
        self.engines = list(engines)
        self.queue_limit = queue_limit
        self.preempt = preempt
        self.stats = SchedulerStats()
        self._free = set(range(len(self.engines)))
        self._waiting: list[_Waiter] = []
        self._running: dict[int, _Run] = {}
        self._pieces: dict[int, list[bytes]] = {}
        self._seq = itertools.count()

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    def snapshot(self) -> dict[str, float | int]:
        busy = len(self.engines) - len(self._free)
        return self.stats.as_dict(self.queue_depth, busy, len(self.engines))

    def _best_free(self, prompt: Sequence[int]) -> int:
        return max(sorted(self._free), key=lambda i: self.engines[i].cached_prefix_len(prompt))

    def _enqueue(self, prompt: Sequence[int], priority: int, seq: int) -> _Waiter:
        waiter = _Waiter(priority, seq, prompt, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.queue_depth)
        return waiter

    async def _wait(self, waiter: _Waiter) -> int:
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())
            raise

    async def _acquire(self, prompt: Sequence[int], priority: int, seq: int) -> int:
        if self._free and not self.queue_depth:
            slot = self._best_free(prompt)
            self._free.discard(slot)
            return slot
        if self.queue_depth >= self.queue_limit:
            self.stats.rejected += 1
            raise QueueFullError(
                f"all {len(self.engines)} slot(s) are busy and {self.queue_limit} request(s) are waiting; retry shortly",
                retry_after=1,
            )
        waiter = self._enqueue(prompt, priority, seq)
        self._maybe_preempt()
        return await self._wait(waiter)

    def _release(self, slot: int) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if not waiter.future.done():
                waiter.future.set_result(slot)
                return
        self._free.add(slot)

    def _maybe_preempt(self) -> None:
        """Flag the lowest-priority running generations that waiters outrank (one per waiter)."""
        if not self.preempt:
            return
        waiting = sorted(w for w in self._waiting if not w.future.done())
        flagged = sum(1 for r in self._running.values() if r.preempt.is_set())
        candidates = sorted(
            (r for r in self._running.values() if not r.preempt.is_set()),
            key=lambda r: (-r.priority, -r.seq),
        )
        for waiter in waiting[flagged + len(self._free) :]:
            if not candidates or waiter.priority >= candidates[0].priority:
                break
            victim = candidates.pop(0)
            victim.preempt.set()
            log.info("generation_preempt_requested", victim_priority=victim.priority, by=waiter.priority)

    def _engine_pieces(self, slot: int) -> list[bytes]:
        if slot not in self._pieces:
            self._pieces[slot] = self.engines[slot].token_pieces()
        return self._pieces[slot]

    def _start(
        self,
        slot: int,
        prompt: Sequence[int],
        params: SamplingParams,
        processor: LogitsProcessor | None,
        cancel: threading.Event,
        run: _Run,
        queue: asyncio.Queue[object],
    ) -> threading.Thread:
        engine = self.engines[slot]
        loop = asyncio.get_running_loop()
        pieces = self._engine_pieces(slot) if self.preempt else None

        def post(item: object) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, item)

        def work() -> None:
            gen = engine.generate(prompt, params, logits_processor=processor, cancel=cancel)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            count = 0
            try:
                for event in gen:
                    post(event)
                    if pieces is None or not isinstance(event, Token):
                        continue
                    count += 1
                    if 0 <= event.id < len(pieces):
                        decoder.decode(pieces[event.id])
                    # A token boundary that is also a character boundary, with budget left to resume.
                    at_boundary = decoder.getstate()[0] == b""
                    if run.preempt.is_set() and at_boundary and count < params.max_tokens:
                        _close(gen)  # the engine stops before sampling the next token
                        post(_PREEMPTED)
                        return
            except BaseException as exc:  # reported to the consumer, never lost in the thread
                post((_SENTINEL_ERROR, exc))
            finally:
                _close(gen)
                post(None)

        thread = threading.Thread(target=work, name=f"tether-slot-{slot}", daemon=True)
        thread.start()
        return thread

    async def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        logits_processor: LogitsProcessor | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[GenerationEvent, None]:
        """Stream events for one generation; closing the iterator early cancels it.

        A preempted generation is invisible to the consumer except as a pause: its
        tokens continue after the resume and the final ``Done`` counts all of them.
        """
        queued = time.monotonic()
        seq = next(self._seq)
        held: int | None = await self._acquire(prompt, priority, seq)
        wait = time.monotonic() - queued
        self.stats.started += 1
        self.stats.total_wait_s += wait
        self.stats.max_wait_s = max(self.stats.max_wait_s, wait)
        run = _Run(priority, seq)
        produced: list[int] = []
        first_evaluated: int | None = None
        finished = False
        thread: threading.Thread | None = None
        cancel = threading.Event()
        try:
            while held is not None:
                before = len(produced)
                segment = [*prompt, *produced]
                seg_params = replace(params, max_tokens=params.max_tokens - before) if before else params
                queue: asyncio.Queue[object] = asyncio.Queue()
                cancel = threading.Event()
                run.preempt.clear()
                self._running[held] = run
                thread = self._start(held, segment, seg_params, logits_processor, cancel, run, queue)
                preempted = False
                while True:
                    item = await queue.get()
                    if item is None:
                        break
                    if item is _PREEMPTED:
                        preempted = True
                        continue
                    if isinstance(item, tuple) and item and item[0] is _SENTINEL_ERROR:
                        exc = item[1]
                        log.error("engine_failed", slot=held, error=repr(exc))
                        raise EngineError(f"the engine failed: {exc}") from exc
                    if isinstance(item, Token):
                        if item.id >= 0:
                            produced.append(item.id)
                        yield item
                    else:
                        assert isinstance(item, Done)
                        if first_evaluated is None:
                            first_evaluated = item.prompt_tokens_evaluated
                        finished = True
                        yield Done(
                            item.finish_reason,
                            len(prompt),
                            first_evaluated,
                            before + item.completion_tokens,
                        )
                await asyncio.to_thread(thread.join)
                thread = None
                self._running.pop(held, None)
                if finished or not preempted:
                    break
                # Preempted: take our place in line again, then hand the slot to whoever is first.
                self.stats.preempted += 1
                if first_evaluated is None:
                    first_evaluated = len(prompt)
                waiter = self._enqueue([*prompt, *produced], priority, seq)
                self._release(held)
                held = None
                self._maybe_preempt()  # with several slots it may outrank another running generation
                log.info("generation_preempted", priority=priority, produced=len(produced))
                paused = time.monotonic()
                held = await self._wait(waiter)
                self.stats.resumed += 1
                self.stats.resume_wait_s += time.monotonic() - paused
                log.info("generation_resumed", priority=priority, slot=held, produced=len(produced))
        finally:
            if thread is not None:
                cancel.set()
                # The slot is only free once the engine thread has let go of the context.
                await asyncio.to_thread(thread.join)
            if held is not None:
                self._running.pop(held, None)
                self._release(held)
            if not finished:
                self.stats.cancelled += 1
            self.stats.completed += 1

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
