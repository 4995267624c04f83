"""Streamed responses that always close their event stream, and fault containment.

``EventStreamResponse`` (server-sent events, or Ollama's NDJSON) closes its body iterator when
the response ends for any reason (finished, client gone, task cancelled), shielded from
cancellation, so the generation behind it is cancelled and its slot freed. ``contain`` turns
any exception raised while streaming into the ``TetherError`` the client is told about: known
errors keep their class, anything else becomes an ``InternalError`` and is logged with its traceback.
"""

from __future__ import annotations

from collections.abc import AsyncIterable, AsyncIterator, Callable, Iterable, Mapping

import structlog
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from tether.aio import aclose_quietly
from tether.errors import InternalError, TetherError
from tether.turns.events import TurnEvent

__all__ = ["EventStreamResponse", "contain", "event_stream"]

log = structlog.get_logger(__name__)

_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}


class EventStreamResponse(StreamingResponse):
    """``text/event-stream`` (or ``media_type``) whose body iterator, and the turn's ``source`` stream
    behind it, are closed on every exit path (a body generator that never started cannot close what it
    wraps)."""

    def __init__(
        self,
        content: AsyncIterable[bytes],
        headers: Mapping[str, str] | None = None,
        *,
        source: AsyncIterator[TurnEvent] | None = None,
        media_type: str = "text/event-stream",
    ) -> None:
        super().__init__(content, media_type=media_type, headers={**_HEADERS, **(headers or {})})
        self.source = source

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await aclose_quietly(self.body_iterator)
            await aclose_quietly(self.source)


def contain(exc: BaseException) -> TetherError:
    """The error to report for ``exc`` raised mid-stream (the stream then ends; the server stays up)."""
    if isinstance(exc, TetherError):
        if exc.status >= 500:
            log.error("stream_failed", error=exc.message, code=exc.code)
        return exc
    log.error("stream_failed", error=repr(exc), exc_info=exc)
    return InternalError("internal server error while streaming; see the server log for details")


async def event_stream(
    events: AsyncIterator[TurnEvent],
    translate: Callable[[TurnEvent], Iterable[bytes]],
    error: Callable[[TetherError], bytes],
    *,
    prologue: Iterable[bytes] = (),
    epilogue: Iterable[bytes] = (),
) -> AsyncIterator[bytes]:
    """A protocol's event stream: ``translate`` each turn event to wire events; a fault ends the
    stream with ``error`` (then the ``epilogue``), and the turn's stream is always closed."""
    for chunk in prologue:
        yield chunk
    try:
        async for ev in events:
            for chunk in translate(ev):
                yield chunk
    except Exception as exc:
        yield error(contain(exc))
    finally:
        await aclose_quietly(events)
    for chunk in epilogue:
        yield chunk
