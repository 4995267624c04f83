"""Sharing engine slots between concurrent requests.

Each slot is one engine instance with its own context, so two generations never
interleave on one context. Waiting requests are served by priority (lower value
first), FIFO within a priority; a full queue is refused with ``QueueFullError``
(HTTP 429). Among free slots, the one already holding the longest prefix of the
prompt wins, so prefix reuse survives several slots.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import threading
import time
from collections.abc import AsyncGenerator, Sequence
from dataclasses import dataclass, field

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
    total_wait_s: float = 0.0
    max_wait_s: float = 0.0

    def as_dict(self, queue_depth: int, busy: int, slots: int) -> dict[str, float | int]:
        mean = self.total_wait_s / self.started if self.started else 0.0
        return {
            "slots": slots,
            "busy_slots": busy,
            "queue_depth": queue_depth,
            "started": self.started,
            "completed": self.completed,
            "rejected": self.rejected,
            "cancelled": self.cancelled,
            "mean_wait_s": round(mean, 4),
            "max_wait_s": round(self.max_wait_s, 4),
        }


@dataclass(order=True)
class _Waiter:
    priority: int
    seq: int
    prompt: Sequence[int] = field(compare=False)
    future: asyncio.Future[int] = field(compare=False)


_SENTINEL_ERROR = object()


class Scheduler:
    """Runs generations on a fixed set of engine slots."""

    def __init__(self, engines: Sequence[Engine], *, queue_limit: int = 16) -> None:
        if not engines:
            raise ValueError("at least one engine slot is required")
        self.engines = list(engines)
        self.queue_limit = queue_limit
        self.stats = SchedulerStats()
        self._free = set(range(len(self.engines)))
        self._waiting: list[_Waiter] = []
        self._seq = itertools.count()

    @property
    def queue_depth(self) -> int:
        return sum(1 for w in self._waiting if not w.future.done())

    def snapshot(self) -> dict[str, float | int]:
        busy = len(self.engines) - len(self._free)
        return self.stats.as_dict(self.queue_depth, busy, len(self.engines))

    def _best_free(self, prompt: Sequence[int]) -> int:
        return max(sorted(self._free), key=lambda i: self.engines[i].cached_prefix_len(prompt))

    async def _acquire(self, prompt: Sequence[int], priority: int) -> int:
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
        waiter = _Waiter(priority, next(self._seq), prompt, asyncio.get_running_loop().create_future())
        heapq.heappush(self._waiting, waiter)
        try:
            return await waiter.future
        except asyncio.CancelledError:
            if waiter.future.done() and not waiter.future.cancelled():
                self._release(waiter.future.result())
            raise

    def _release(self, slot: int) -> None:
        while self._waiting:
            waiter = heapq.heappop(self._waiting)
            if not waiter.future.done():
                waiter.future.set_result(slot)
                return
        self._free.add(slot)

    async def generate(
        self,
        prompt: Sequence[int],
        params: SamplingParams,
        *,
        logits_processor: LogitsProcessor | None = None,
        priority: int = 0,
    ) -> AsyncGenerator[GenerationEvent, None]:
        """Stream events for one generation; closing the iterator early cancels it."""
        queued = time.monotonic()
        slot = await self._acquire(prompt, priority)
        wait = time.monotonic() - queued
        self.stats.started += 1
        self.stats.total_wait_s += wait
        self.stats.max_wait_s = max(self.stats.max_wait_s, wait)
        engine = self.engines[slot]
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[object] = asyncio.Queue()
        cancel = threading.Event()

        def work() -> None:
            try:
                for event in engine.generate(
                    prompt, params, logits_processor=logits_processor, cancel=cancel
                ):
                    loop.call_soon_threadsafe(queue.put_nowait, event)
            except BaseException as exc:  # reported to the consumer, never lost in the thread
                loop.call_soon_threadsafe(queue.put_nowait, (_SENTINEL_ERROR, exc))
            finally:
                loop.call_soon_threadsafe(queue.put_nowait, None)

        thread = threading.Thread(target=work, name=f"tether-slot-{slot}", daemon=True)
        thread.start()
        finished = False
        try:
            while True:
                item = await queue.get()
                if item is None:
                    break
                if isinstance(item, tuple) and item and item[0] is _SENTINEL_ERROR:
                    exc = item[1]
                    log.error("engine_failed", slot=slot, error=repr(exc))
                    raise EngineError(f"the engine failed: {exc}") from exc
                assert isinstance(item, (Token, Done))
                if isinstance(item, Done):
                    finished = True
                yield item
        finally:
            if not finished:
                cancel.set()
                self.stats.cancelled += 1
            # The slot is only free once the engine thread has let go of the context.
            await asyncio.to_thread(thread.join)
            self.stats.completed += 1
            self._release(slot)

    def close(self) -> None:
        for engine in self.engines:
            engine.close()
