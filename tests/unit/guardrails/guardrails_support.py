"""Shared helpers for the guardrails tests: tools, chat-completion builders, an app over a scripted engine."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

import httpx2

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import Reply, ScriptedEngine
from tether.proxy.app import create_app


def tool(
    name: str, properties: Mapping[str, Any] | None = None, required: Sequence[str] = ()
) -> dict[str, Any]:
    params: dict[str, Any] = {"type": "object", "properties": dict(properties or {})}
    if required:
        params["required"] = list(required)
    return {
        "type": "function",
        "function": {"name": name, "description": f"{name} tool", "parameters": params},
    }


READ = tool("read_file", {"path": {"type": "string"}, "limit": {"type": "integer"}}, ["path"])
WRITE = tool("write_file", {"path": {"type": "string"}, "content": {"type": "string"}}, ["path", "content"])
TOOLS = [READ, WRITE]


def call(name: str, arguments: str | Mapping[str, Any], call_id: str = "call_1") -> dict[str, Any]:
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}


def completion(content: str | None = None, calls: Sequence[Mapping[str, Any]] = ()) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if calls:
        message["tool_calls"] = [dict(c) for c in calls]
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [
            {
                "index": 0,
                "message": message,
                "finish_reason": "tool_calls" if calls else "stop",
                "logprobs": None,
            }
        ],
    }


def scripted_app(replies: Sequence[Reply], **config: Any) -> tuple[Any, ScriptedEngine]:
    """tether's own app over one scripted engine (``tests/conftest.py::make_client`` style)."""
    engine = ScriptedEngine(replies)
    cfg = ServerConfig(**{"preset": "full", **config})
    return create_app(cfg, Scheduler([engine], queue_limit=cfg.queue_limit)), engine


class SyncASGITransport(httpx2.BaseTransport):
    """Serves sync ``httpx2`` requests from an ASGI app on an event loop in a helper thread
    (``httpx2.ASGITransport`` is async-only; this only bridges, the app handles the request)."""

    def __init__(self, app: Any) -> None:
        self._inner = httpx2.ASGITransport(app=app)
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()

    async def _send(self, request: httpx2.Request) -> httpx2.Response:
        response = await self._inner.handle_async_request(request)
        body = await response.aread()
        return httpx2.Response(response.status_code, headers=response.headers, content=body)

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        body = request.read()
        forwarded = httpx2.Request(request.method, request.url, headers=request.headers, content=body)
        return asyncio.run_coroutine_threadsafe(self._send(forwarded), self._loop).result(timeout=30)

    def close(self) -> None:  # also called by ``httpx2.Client.close``
        if self._loop.is_closed():
            return
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=5)
        self._loop.close()


@contextmanager
def sync_http(app: Any) -> Iterator[httpx2.Client]:
    transport = SyncASGITransport(app)
    client = httpx2.Client(transport=transport, base_url="http://test/v1")
    try:
        yield client
    finally:
        client.close()
        transport.close()
