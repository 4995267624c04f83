"""Shared fixtures: a scripted app for proxy tests and the bundled model for model tests."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import httpx
import pytest
import structlog

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import Reply, ScriptedEngine
from tether.proxy.app import create_app

AppFactory = Callable[..., httpx.AsyncClient]


@pytest.fixture(autouse=True)
def _restore_structlog() -> Iterator[None]:
    """Code under test may call ``configure_logging`` (the eval CLI sets level warning); structlog's
    configuration is process-global, so put it back for the tests that capture info events."""
    saved = structlog.get_config()
    yield
    structlog.configure(**saved)


def make_client(
    replies: Sequence[Reply] = ("Hello!",),
    *,
    engines: Sequence[ScriptedEngine] | None = None,
    **config: Any,
) -> tuple[httpx.AsyncClient, list[ScriptedEngine]]:
    """An httpx client bound to an app over scripted engines (ASGI transport, no sockets)."""
    pool = list(engines) if engines else [ScriptedEngine(replies)]
    cfg = ServerConfig(
        **{"preset": "full", **config}
    )  # scripted calls invent their values: the default's abstaining would drop them
    app = create_app(cfg, Scheduler(pool, queue_limit=cfg.queue_limit))
    transport = httpx.ASGITransport(app=app)
    return httpx.AsyncClient(transport=transport, base_url="http://test"), pool


@pytest.fixture
async def scripted() -> AsyncIterator[Callable[..., tuple[httpx.AsyncClient, list[ScriptedEngine]]]]:
    clients: list[httpx.AsyncClient] = []

    def factory(*args: Any, **kwargs: Any) -> tuple[httpx.AsyncClient, list[ScriptedEngine]]:
        client, pool = make_client(*args, **kwargs)
        clients.append(client)
        return client, pool

    yield factory
    for client in clients:
        await client.aclose()


def sse_events(body: str) -> list[Any]:
    """Parse an SSE body into JSON payloads (``[DONE]`` kept as the string)."""
    import json

    out: list[Any] = []
    for block in body.split("\n\n"):
        for line in block.splitlines():
            if line.startswith("data: "):
                data = line[len("data: ") :]
                out.append(data if data == "[DONE]" else json.loads(data))
    return out
