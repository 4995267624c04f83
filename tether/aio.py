"""Small asyncio helpers for closing event streams when a consumer is cancelled.

A client that hangs up cancels its request task (anyio cancel scopes are level-triggered:
every later ``await`` in that task raises again). Clean-up that must run anyway — closing
the generator that holds an engine slot — goes through :func:`aclose_quietly`, which
shields the close from that cancellation.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from typing import Any, Generic, Protocol, TypeVar, runtime_checkable

import anyio

__all__ = ["aclose_quietly", "closing_stream", "prime"]

T = TypeVar("T")


@runtime_checkable
class _Closable(Protocol):
    def aclose(self) -> Awaitable[object]: ...


async def aclose_quietly(stream: Any) -> None:
    """``await stream.aclose()`` shielded from cancellation; streams without ``aclose`` are skipped."""
    if not isinstance(stream, _Closable):
        return
    with anyio.CancelScope(shield=True):
        await stream.aclose()


@asynccontextmanager
async def closing_stream(stream: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """``async with closing_stream(events) as ev: async for x in ev: ...`` closes ``events`` on exit,
    also when the task is cancelled mid-iteration."""
    try:
        yield stream
    finally:
        await aclose_quietly(stream)


async def prime(events: AsyncIterator[T]) -> AsyncIterator[T]:
    """Pull the first event now, so errors that happen before it (a full queue: 429) keep their status.

    Returns a stream that yields that event and then the rest; closing it closes ``events``, also
    when it was never iterated (a response that ends before its body starts).
    """
    return _Primed(await anext(events), events)


class _Primed(Generic[T]):
    """``first``, then the rest of ``events``; ``aclose`` always reaches ``events``."""

    def __init__(self, first: T, events: AsyncIterator[T]) -> None:
        self._first: T | None = first
        self._events = events

    def __aiter__(self) -> _Primed[T]:
        return self

    async def __anext__(self) -> T:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await anext(self._events)

    async def aclose(self) -> None:
        self._first = None
        await aclose_quietly(self._events)
