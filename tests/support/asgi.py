"""An httpx client bound to tether's app in-process (ASGI transport, no socket)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx

from tether.config import ServerConfig
from tether.engine.base import Engine
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app

__all__ = ["asgi_client"]


@asynccontextmanager
async def asgi_client(
    engine: Engine, config: ServerConfig, *, timeout: float
) -> AsyncIterator[httpx.AsyncClient]:
    """A client of the app over ``engine`` with ``config``; ``timeout`` as long as the engine needs."""
    app = create_app(config, Scheduler([engine]))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://t", timeout=timeout
    ) as client:
        yield client
