"""Fixtures for the eval tests: a ChatClient over the real app on scripted engines (no model)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence

import httpx
import pytest

from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import Reply, ScriptedEngine
from tether.evals.client import ChatClient
from tether.proxy.app import create_app

ClientFactory = Callable[..., tuple[ChatClient, ScriptedEngine]]


@pytest.fixture
async def scripted_client() -> AsyncIterator[ClientFactory]:
    """``factory(replies, n_ctx=4096) -> (ChatClient, engine)``: the full proxy path, replies scripted."""
    opened: list[httpx.AsyncClient] = []

    def factory(replies: Sequence[Reply], n_ctx: int = 4096) -> tuple[ChatClient, ScriptedEngine]:
        engine = ScriptedEngine(replies, n_ctx=n_ctx)
        app = create_app(ServerConfig(), Scheduler([engine]))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1/")
        opened.append(http)
        return ChatClient(http, "scripted", "tether"), engine

    yield factory
    for http in opened:
        await http.aclose()
