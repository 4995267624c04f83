"""The handoff from an engine thread to the event loop, with as few wake-ups as the consumer needs.

The engine thread ``put``s events; the consumer on the loop ``take``s every event waiting, in order,
as one list. The thread wakes the loop (``call_soon_threadsafe``: a byte through the loop's
self-pipe, a select, a callback) only when the consumer has taken everything posted before, so a
consumer still busy with the last events costs the thread nothing more than a ``deque.append``.

``window`` (seconds) holds a batch open that long after the event that woke the consumer, so a
fast stream arrives a few tokens at a time: one wake-up and one socket write for several tokens
(the scheduler marks all but the last of a batch ``Token.batched``). The first batch is never held
(time to first token), the end of a stream cuts a window short, and 0 disables holding. No lock:
``deque`` appends and pops are atomic, and the only shared flag is cleared by the consumer before it
looks, so an event put after the look always wakes it.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import threading
from collections import deque
from collections.abc import Callable, Iterator

from tether.engine.base import GenerationEvent, Token
from tether.engine.slots import PREEMPTED, SENTINEL_ERROR, close_generation

__all__ = ["Mailbox", "hand_over"]


class Mailbox:
    """One generation's events from one engine thread to one consumer on ``loop``."""

    def __init__(self, loop: asyncio.AbstractEventLoop, *, window: float = 0.0) -> None:
        self._loop = loop
        self._items: deque[object] = deque()
        self._ready = asyncio.Event()
        self._armed = False  # a wake-up is on its way, or the consumer is about to look
        self._window = window
        self._held_once = False
        self._hold: asyncio.Future[None] | None = None  # the window being waited out
        self._urgent = False  # an event that must not wait for the window is in
        self.wakeups = 0  # how many times the thread woke the loop (for tests and profiles)

    def put(self, item: object, *, flush: bool = False) -> None:
        """From the engine thread: append ``item``; wake the consumer unless a wake-up is pending.
        ``flush``: cut a window being waited out short (the end of a stream is never held)."""
        self._items.append(item)
        if flush:
            self._urgent = True
            if (hold := self._hold) is not None:
                self._call(_release, hold)
        if not self._armed:
            self._armed = True
            self.wakeups += 1
            self._call(self._ready.set)

    def _call(self, callback: Callable[..., None], *args: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop is gone: nobody is listening
            self._loop.call_soon_threadsafe(callback, *args)

    async def take(self) -> list[object]:
        """On the loop: every event put so far (at least one), oldest first."""
        woken = False
        while not self._items:
            self._armed = False  # from here on, any put wakes us
            if self._items:
                break
            self._ready.clear()
            await self._ready.wait()
            woken = True
        if woken and self._window > 0 and self._held_once:
            await self._wait_window()
        self._held_once = True
        self._armed = False
        items = self._items
        return [items.popleft() for _ in range(len(items))]

    async def _wait_window(self) -> None:
        # Still armed: events put meanwhile append without waking the loop. The hold is published
        # before ``_urgent`` is read, and a flushing put sets ``_urgent`` before it reads the hold,
        # so one of the two always sees the other.
        hold = self._hold = self._loop.create_future()
        timer = self._loop.call_later(self._window, _release, hold)
        try:
            if not self._urgent:
                await hold
        finally:
            timer.cancel()
            self._hold = None


def _release(hold: asyncio.Future[None]) -> None:
    if not hold.done():
        hold.set_result(None)


def hand_over(
    gen: Iterator[GenerationEvent],
    box: Mailbox,
    preempt: threading.Event,
    pieces: list[bytes] | None,
    max_tokens: int,
) -> None:
    """On the engine thread: every event of ``gen`` into ``box``, then ``None``. An error is posted
    (``SENTINEL_ERROR``), never lost in the thread. With ``pieces`` (preemption on), a set ``preempt``
    stops the generation at the next token boundary that is also a character boundary, with budget
    left to resume, and posts ``PREEMPTED``."""
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    count = 0
    try:
        for event in gen:
            box.put(event, flush=not isinstance(event, Token))
            if pieces is None or not isinstance(event, Token):
                continue
            count += 1
            if 0 <= event.id < len(pieces):
                decoder.decode(pieces[event.id])
            at_boundary = decoder.getstate()[0] == b""
            if preempt.is_set() and at_boundary and count < max_tokens:
                close_generation(gen)  # the engine stops before sampling the next token
                box.put(PREEMPTED, flush=True)
                return
    except BaseException as exc:
        box.put((SENTINEL_ERROR, exc), flush=True)
    finally:
        close_generation(gen)
        box.put(None, flush=True)
