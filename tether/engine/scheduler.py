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
import contextlib
import heapq
import itertools
import threading
import time
from collections.abc import AsyncGenerator, AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import anyio
import structlog

from tether.engine.base import (
    Constraint,
    Done,
    Engine,
    GenerationEvent,
    LogitsProcessor,
    ReportsPrefill,
    SamplingParams,
    Token,
)
from tether.engine.handoff import Mailbox, hand_over
from tether.engine.slots import PREEMPTED, SENTINEL_ERROR, Lease, Run, Waiter
from tether.engine.stats import SchedulerStats
from tether.errors import EngineError, QueueFullError, QueueTimeoutError, ShuttingDownError

__all__ = ["Lease", "Scheduler", "SchedulerStats"]

log = structlog.get_logger(__name__)


class Scheduler:
    """Runs generations on a fixed set of engine slots; ``preempt`` enables priority preemption.

    ``queue_timeout_s`` bounds how long a request may wait for a slot (``QueueTimeoutError``, 503);
    ``shutdown()`` refuses new work and cancels what waits and runs (``ShuttingDownError``);
    ``stream_window_s`` gathers a generation's tokens that long before handing them over together
    (``Mailbox``, ``Token.batched``; 0: as each comes).
    """

    def __init__(
        self,
        engines: Sequence[Engine],
        *,
        queue_limit: int = 16,
        preempt: bool = False,
        queue_timeout_s: float | None = None,
        stream_window_s: float = 0.0,
    ) -> None:
        if not engines:
            raise ValueError("at least one engine slot is required")
        self.engines = list(engines)
        self.queue_limit = queue_limit
        self.preempt = preempt
        self.queue_timeout_s = queue_timeout_s
        self.stream_window_s = stream_window_s
        self.stats = SchedulerStats()
        self._free = set(range(len(self.engines)))
        self._waiting: list[Waiter] = []
        self._running: dict[int, Run] = {}
        self._threads: set[threading.Thread] = set()
        self._pieces: dict[int, list[bytes]] = {}
        self._seq = itertools.count()
        self._closing = False
        self.release_wait_s = 5.0

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    @property
    def closing(self) -> bool:
        return self._closing

    def snapshot(self) -> dict[str, float | int]:
        busy = len(self.engines) - len(self._free)
        return self.stats.as_dict(self.queue_depth, busy, len(self.engines))

    def prefilling(self) -> list[dict[str, Any]]:
        """The running generations whose prompt is being evaluated: slot, request id, tokens done of
        the tokens to evaluate, and the rate so far (engines that report it: ``ReportsPrefill``)."""
        out = []
        for slot, run in sorted(self._running.items()):
            engine = self.engines[slot]
            progress = engine.prefill_progress() if isinstance(engine, ReportsPrefill) else None
            if progress is not None:
                out.append(
                    {
                        "slot": slot,
                        "request_id": run.request_id,
                        "done": progress.done,
                        "total": progress.total,
                        "tok_s": round(progress.rate, 1),
                    }
                )
        return out

    def _best_free(self, prompt: Sequence[int]) -> int:
        return max(sorted(self._free), key=lambda i: self.engines[i].cached_prefix_len(prompt))

    def _enqueue(self, prompt: Sequence[int], priority: int, seq: int, *, timed: bool = True) -> Waiter:
        loop = asyncio.get_running_loop()
        waiter = Waiter(priority, seq, prompt, loop.create_future())
        heapq.heappush(self._waiting, waiter)
        self.stats.max_queue_depth = max(self.stats.max_queue_depth, self.queue_depth)
        if timed and self.queue_timeout_s is not None:
            limit = self.queue_timeout_s
            timer = loop.call_later(limit, self._expire, waiter, limit)
            waiter.future.add_done_callback(lambda _: timer.cancel())
        return waiter

    def _expire(self, waiter: Waiter, limit: float) -> None:
        if not waiter.future.done():
            self.stats.timed_out += 1
            waiter.future.set_exception(
                QueueTimeoutError(
                    f"waited {limit:g} s for one of {len(self.engines)} busy slot(s); retry shortly",
                    retry_after=max(1, round(limit)),
                )
            )

    async def _wait(self, waiter: Waiter) -> int:
        try:
            return await waiter.future
        except asyncio.CancelledError:
            future = waiter.future
            if future.done() and not future.cancelled() and future.exception() is None:
                self._release(future.result())  # the slot arrived as we were cancelled: pass it on
            else:
                future.cancel()
            raise

    async def _acquire(self, prompt: Sequence[int], priority: int, seq: int) -> int:
        if self._closing:
            raise ShuttingDownError("the server is shutting down")
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

    def _thread_exited(self, run: Run) -> None:
        """On the loop, once the engine thread has let go of its context."""
        run.exited.set()
        if run.thread is not None:
            self._threads.discard(run.thread)
        if run.orphaned:
            self._running.pop(run.slot, None)
            self._release(run.slot)
            log.info("slot_released_after_cancel", slot=run.slot)

    def _start(
        self,
        run: Run,
        prompt: Sequence[int],
        params: SamplingParams,
        processor: LogitsProcessor | None,
        box: Mailbox,
        constraint: Constraint | None = None,
    ) -> None:
        engine = self.engines[run.slot]
        loop = asyncio.get_running_loop()
        pieces = self._engine_pieces(run.slot) if self.preempt else None

        def work() -> None:
            gen = engine.generate(
                prompt, params, constraint=constraint, cancel=run.cancel, logits_processor=processor
            )
            try:
                hand_over(gen, box, run.preempt, pieces, params.max_tokens)
            finally:
                with contextlib.suppress(RuntimeError):
                    loop.call_soon_threadsafe(self._thread_exited, run)

        thread = threading.Thread(target=work, name=f"tether-slot-{run.slot}", daemon=True)
        run.thread = thread
        self._threads.add(thread)
        thread.start()

    async def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        logits_processor: LogitsProcessor | None = None,
        priority: int = 0,
        constraint: Constraint | None = None,
    ) -> AsyncGenerator[GenerationEvent, None]:
        """Stream events for one generation; closing the iterator early cancels it.

        A preempted generation is invisible to the consumer except as a pause: its
        tokens continue after the resume and the final ``Done`` counts all of them.
        A consumer cancelled mid-stream (a client that hung up) still frees its slot: at once
        when it was waiting, within one token when it was running (the engine thread hands the
        slot back itself, so even a consumer that is never closed cannot keep it past its end).
        """
        queued = time.monotonic()
        seq = next(self._seq)
        request_id = str(structlog.contextvars.get_contextvars().get("request_id", ""))
        try:
            held: int | None = await self._acquire(prompt, priority, seq)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        self._count_start(time.monotonic() - queued)
        produced: list[int] = []
        first_evaluated: int | None = None
        finished = False
        run: Run | None = None
        mark = self.stream_window_s > 0
        try:
            while held is not None:
                before = len(produced)
                segment = [*prompt, *produced]
                seg_params = replace(params, max_tokens=params.max_tokens - before) if before else params
                box = Mailbox(asyncio.get_running_loop(), window=self.stream_window_s)
                run = Run(held, priority, seq, request_id=request_id)
                self._running[held] = run
                self._start(run, segment, seg_params, logits_processor, box, constraint)
                preempted = False
                ended = False
                while not ended:
                    batch = await box.take()
                    last = len(batch) - 1
                    for i, item in enumerate(batch):
                        if isinstance(item, Token):
                            if item.id >= 0:
                                produced.append(item.id)
                            if mark and i < last and isinstance(batch[i + 1], Token):
                                item = replace(item, batched=True)
                            yield item
                        elif item is None:
                            ended = True
                        elif item is PREEMPTED:
                            preempted = True
                        elif isinstance(item, Done):
                            if item.finish_reason == "cancelled" and self._closing:
                                raise ShuttingDownError("the server is shutting down; generation cancelled")
                            if first_evaluated is None:
                                first_evaluated = item.prompt_tokens_evaluated
                            finished = True
                            yield Done(
                                item.finish_reason,
                                len(prompt),
                                first_evaluated,
                                before + item.completion_tokens,
                            )
                        else:
                            assert isinstance(item, tuple) and item[0] is SENTINEL_ERROR
                            exc = item[1]
                            log.error("engine_failed", slot=held, error=repr(exc))
                            raise EngineError(f"the engine failed: {exc}") from exc
                await run.exited.wait()
                self._running.pop(held, None)
                if finished or not preempted:
                    break
                # Preempted: take our place in line again, then hand the slot to whoever is first.
                self.stats.preempted += 1
                if first_evaluated is None:
                    first_evaluated = len(prompt)
                # No queue timeout: a preempted reply has already streamed; it only pauses.
                waiter = self._enqueue([*prompt, *produced], priority, seq, timed=False)
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
            if held is not None:
                if run is not None and run.slot == held and not run.exited.is_set():
                    # The engine thread still holds the context: stop it; it frees the slot on exit
                    # (within one token). Wait for that, shielded and bounded, so that a consumer that
                    # is cancelled or closed returns only once its slot is free.
                    run.cancel.set()
                    run.orphaned = True
                    with anyio.move_on_after(self.release_wait_s, shield=True):
                        await run.exited.wait()
                else:
                    self._running.pop(held, None)
                    self._release(held)
            if not finished:
                self.stats.cancelled += 1
            self.stats.completed += 1

    @contextlib.asynccontextmanager
    async def lease(self, *, priority: int = 0) -> AsyncIterator[Lease]:
        """A slot for work that runs on the event loop instead of an engine thread (a chat backend's
        request: no token ids to hand over). The same queue, limit, timeout and counters as
        ``generate``; leaving the block any way but normally counts as cancelled."""
        queued = time.monotonic()
        seq = next(self._seq)
        try:
            slot = await self._acquire((), priority, seq)
        except asyncio.CancelledError:
            self.stats.cancelled += 1
            raise
        self._count_start(time.monotonic() - queued)
        run = self._running[slot] = Run(slot, priority, seq)  # so that shutdown() sets its cancel
        finished = False
        try:
            yield Lease(slot, self.engines[slot], run.cancel)
            finished = True
        finally:
            self._running.pop(slot, None)
            self._release(slot)
            self.stats.cancelled += not finished
            self.stats.completed += 1

    def _count_start(self, wait: float) -> None:
        self.stats.started += 1
        self.stats.total_wait_s += wait
        self.stats.max_wait_s = max(self.stats.max_wait_s, wait)

    def shutdown(self) -> None:
        """Refuse new generations and cancel every waiting and running one (idempotent)."""
        if self._closing:
            return
        self._closing = True
        for waiter in self._waiting:
            if not waiter.future.done():
                waiter.future.set_exception(ShuttingDownError("the server is shutting down"))
        for run in self._running.values():
            run.cancel.set()
        log.info("scheduler_shutdown", running=len(self._running))

    def close(self, timeout_s: float = 5.0) -> None:
        """Stop everything, wait (bounded) for engine threads to let go, then close the engines."""
        self._closing = True
        for run in self._running.values():
            run.cancel.set()
        deadline = time.monotonic() + timeout_s
        for thread in list(self._threads):
            thread.join(max(0.0, deadline - time.monotonic()))
        busy = [t.name for t in self._threads if t.is_alive()]
        if busy:
            log.warning("engine_threads_still_running", threads=busy)
            return  # closing a context under a running thread would crash the process
        for engine in self.engines:
            engine.close()
