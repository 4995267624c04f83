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

ClientFactory = Callable[[Sequence[Reply]], tuple[ChatClient, ScriptedEngine]]


@pytest.fixture
async def scripted_client() -> AsyncIterator[ClientFactory]:
    """``factory(replies) -> (ChatClient, engine)``: the full proxy path, replies scripted."""
    opened: list[httpx.AsyncClient] = []

    def factory(replies: Sequence[Reply]) -> tuple[ChatClient, ScriptedEngine]:
        engine = ScriptedEngine(replies)
        app = create_app(ServerConfig(), Scheduler([engine]))
        http = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test/v1/")
        opened.append(http)
        return ChatClient(http, "scripted", "tether"), engine

    yield factory
    for http in opened:
        await http.aclose()
