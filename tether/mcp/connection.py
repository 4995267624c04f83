"""One MCP server, kept running: connected through the official SDK's client, its tools listed (and
listed again when it says they changed), called with a deadline, and restarted with backoff.

Whatever goes wrong with the server ends the one call it happened in, as an error the model reads:

* it exits (a crash): the SDK reports the connection closed;
* it writes a line that is not JSON-RPC: the watched read stream sees the parse error at once;
* it does not answer within the entry's ``timeout``.

In the last two the server cannot be trusted with the next call, so it is stopped; in every case
the runner starts it again, waiting 0.5 s, then twice as long after each failure in a row (at most
30 s). Its tools stay offered meanwhile: a call that comes while it restarts waits for it briefly.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from types import TracebackType
from typing import Any, Self

import mcp_types as types
import structlog
from mcp import Client
from mcp.client.subscriptions import ListenNotSupportedError
from mcp.shared.exceptions import MCPError

from tether.mcp.config import McpServerSpec
from tether.mcp.results import shaped_result
from tether.sandbox.toolbox import ToolResult

__all__ = ["McpConnection", "Transport"]

log = structlog.get_logger(__name__)

Transport = Callable[[], AbstractAsyncContextManager[tuple[Any, Any]]]
"""Opens one connection's (read, write) streams: a sandboxed stdio process, or streamable HTTP."""

_FIRST_DELAY_S = 0.5
_MAX_DELAY_S = 30.0
_WAIT_FOR_RESTART_S = 10.0


class _Watched:
    """The transport's read stream, passed through; a parse error or the end is reported at once
    (the SDK logs a line it cannot parse at debug level and waits on)."""

    def __init__(
        self, inner: Any, on_trouble: Callable[[str], None], on_bad_line: Callable[[], None]
    ) -> None:
        self._inner = inner
        self._trouble = on_trouble
        self._bad_line = on_bad_line

    async def receive(self) -> Any:
        try:
            item = await self._inner.receive()
        except Exception:
            self._trouble("its connection closed")
            raise
        if isinstance(item, Exception):
            self._bad_line()
        return item

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Any:
        try:
            return await self.receive()
        except Exception as exc:
            raise StopAsyncIteration from exc

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()


class McpConnection:
    """One configured server (see the module docstring). ``on_tools`` is told its tool list each
    time it is read: after every (re)start and every ``tools/list_changed``."""

    def __init__(
        self,
        spec: McpServerSpec,
        transport: Transport,
        *,
        on_tools: Callable[[McpConnection, list[types.Tool]], None],
        result_chars: int,
    ) -> None:
        self.spec = spec
        self._transport = transport
        self._on_tools = on_tools
        self._result_chars = result_chars
        self._client: Client | None = None
        self._ready = asyncio.Event()
        self._down = asyncio.Event()
        self._closing = False
        self._task: asyncio.Task[None] | None = None
        self._refresh: set[asyncio.Task[None]] = set()
        self.state = "starting"
        self.last_error = ""
        self.restarts = 0
        self.calls = 0
        self.failed_calls = 0
        self._pending = 0  # calls waiting for their answer

    def snapshot(self) -> dict[str, Any]:
        """What ``/health`` shows of the server."""
        return {
            "transport": self.spec.transport,
            "state": self.state,
            "restarts": self.restarts,
            "calls": self.calls,
            "failed_calls": self.failed_calls,
            "last_error": self.last_error or None,
        }

    async def start(self, wait_s: float) -> None:
        """Start the runner and wait up to ``wait_s`` for the first connection (a server slow to
        start, or failing, goes on being tried in the background)."""
        self._task = asyncio.create_task(self._run(), name=f"mcp:{self.spec.name}")
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._ready.wait(), wait_s)

    async def close(self) -> None:
        self._closing = True
        self._down.set()
        for task in [*self._refresh, *([self._task] if self._task else [])]:
            if task is self._task:
                with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 5.0)
            task.cancel()
            with contextlib.suppress(BaseException):
                await task

    def _bad_line(self) -> None:
        """A line that is not JSON-RPC: during a call, the answer it was waiting for is lost; between
        calls (a banner a server prints at start) it is only logged, as the SDK does."""
        if self._pending:
            self._trouble("it wrote a line that is not JSON-RPC")
        else:
            log.info("mcp_server_stray_output", server=self.spec.name)

    def _trouble(self, why: str) -> None:
        if not self._down.is_set():
            self.last_error = why
            self._down.set()

    @asynccontextmanager
    async def _watched(self) -> AsyncIterator[tuple[Any, Any]]:
        async with self._transport() as (read, write):
            yield _Watched(read, self._trouble, self._bad_line), write

    async def _run(self) -> None:
        delay = _FIRST_DELAY_S
        while not self._closing:
            self._down = asyncio.Event()
            try:
                async with contextlib.AsyncExitStack() as stack:
                    try:  # a server that never finishes its handshake is restarted like a hung one
                        async with asyncio.timeout(self.spec.timeout_s):
                            client = await stack.enter_async_context(
                                Client(self._watched(), message_handler=self._on_message, cache=None)
                            )
                            tools = await _list_tools(client)
                    except TimeoutError:
                        self._trouble(f"it did not start within {self.spec.timeout_s:g} s")
                        raise
                    self._client = client
                    self._on_tools(self, tools)
                    self.state, delay = "ready", _FIRST_DELAY_S
                    self._ready.set()
                    log.info("mcp_server_ready", server=self.spec.name, tools=len(tools))
                    listener = asyncio.create_task(self._listen(client))
                    try:
                        await self._down.wait()
                    finally:
                        listener.cancel()
                        with contextlib.suppress(BaseException):
                            await listener
            except Exception as exc:  # the SDK raises exception groups out of its task groups
                self.last_error = self.last_error if self._down.is_set() else _why(exc)
            finally:
                self._client = None
                self._ready.clear()
            if self._closing:
                break
            self.state = "restarting"
            self.restarts += 1
            log.warning("mcp_server_down", server=self.spec.name, error=self.last_error, retry_in_s=delay)
            await asyncio.sleep(delay)
            delay = min(delay * 2, _MAX_DELAY_S)
        self.state = "stopped"

    async def _listen(self, client: Client) -> None:
        """Relist on every ``tools/list_changed``: a 2026-07-28 server sends it to a listener; an
        older one sends it to every client, which :meth:`_on_message` hears."""
        try:
            async with client.listen(tools_list_changed=True) as changes:
                async for _ in changes:
                    await self._relist(client)
        except ListenNotSupportedError:
            return
        except Exception as exc:
            log.info("mcp_listen_ended", server=self.spec.name, error=_why(exc))

    async def _on_message(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) and self._client is not None:
            task = asyncio.create_task(self._relist(self._client))
            self._refresh.add(task)
            task.add_done_callback(self._refresh.discard)

    async def _relist(self, client: Client) -> None:
        try:
            tools = await asyncio.wait_for(_list_tools(client), self.spec.timeout_s)
            self._on_tools(self, tools)
        except Exception as exc:
            log.warning("mcp_tools_relist_failed", server=self.spec.name, error=_why(exc))
            return
        log.info("mcp_tools_changed", server=self.spec.name, tools=len(tools))

    async def call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        """Call ``tool``; every failure is an error result (see the module docstring)."""
        self.calls += 1
        self._pending += 1
        try:
            result = await self._call(tool, arguments)
        finally:
            self._pending -= 1
        self.failed_calls += result.is_error
        return result

    async def _call(self, tool: str, arguments: dict[str, Any]) -> ToolResult:
        name, timeout = self.spec.name, self.spec.timeout_s
        deadline = time.monotonic() + _WAIT_FOR_RESTART_S
        while (
            (self._client is None or self._down.is_set())
            and time.monotonic() < deadline
            and not self._closing
        ):
            await asyncio.sleep(0.05)  # down, or (re)starting: it is usually back within a second
        client, down = self._client, self._down
        if client is None or down.is_set():
            why = self.last_error or "it has not started yet"
            return ToolResult(f"Error: MCP server {name!r} is not running ({why}); try again shortly", True)
        call = asyncio.ensure_future(client.call_tool(tool, arguments))
        gone = asyncio.ensure_future(down.wait())
        try:
            done, _ = await asyncio.wait({call, gone}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            gone.cancel()
            if not call.done():
                call.cancel()
                with contextlib.suppress(BaseException):
                    await call
        if call in done and not call.cancelled():
            try:
                return shaped_result(call.result(), limit=self._result_chars)
            except MCPError as exc:
                if exc.code != types.CONNECTION_CLOSED:  # the server answered with an error
                    return ToolResult(f"Error: {tool} failed: {exc}", True)
                self._trouble("it exited")
            except Exception as exc:
                self._trouble(_why(exc))
        elif not down.is_set():
            self._trouble(f"it did not answer {tool} within {timeout:g} s")
        log.warning("mcp_call_failed", server=name, tool=tool, error=self.last_error)
        return ToolResult(
            f"Error: MCP server {name!r} failed during the call: {self.last_error}; it is being restarted",
            True,
        )


async def _list_tools(client: Client) -> list[types.Tool]:
    tools: list[types.Tool] = []
    cursor: str | None = None
    for _ in range(100):  # pages; a server that pages forever is cut off
        page = await client.list_tools(cursor=cursor)
        tools.extend(page.tools)
        cursor = page.next_cursor
        if not cursor:
            break
    return tools


def _why(exc: BaseException) -> str:
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {text}"[:300] if text else type(exc).__name__
