"""Where an eval sends its requests: the embedded engine in-process, or a server at ``--base-url``.

In-process, the real app is built exactly as ``tether serve`` builds it
(``load_engines`` → ``Scheduler`` → ``create_app``) and reached through httpx's
ASGI transport, so every request goes through the same routes, chat core and
guardrails as over HTTP, without a socket.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass

import httpx

from tether.evals.client import ChatClient, detect_server

__all__ = ["Target", "open_client"]


@dataclass(frozen=True)
class Target:
    """What to evaluate: ``base_url`` None means the embedded engine (``model`` a GGUF path or None)."""

    base_url: str | None = None
    api_key: str | None = None
    model: str | None = None
    n_ctx: int = 8192
    slots: int = 1
    threads: int | None = None
    gpu_layers: int = 0  # -1: all (``parse_gpu_layers``)
    timeout_s: float = 900.0
    # tether's pipeline in-process, generation forwarded to this server (``tether serve --backend``).
    backend: str | None = None
    backend_kind: str = "auto"


@asynccontextmanager
async def open_client(target: Target) -> AsyncIterator[ChatClient]:
    """A :class:`ChatClient` for ``target``; the in-process engine is closed on exit."""
    timeout = httpx.Timeout(target.timeout_s, connect=30.0)
    if target.base_url is not None:
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else {}
        base = target.base_url.rstrip("/") + "/"
        async with httpx.AsyncClient(base_url=base, headers=headers, timeout=timeout) as http:
            kind, first = await detect_server(http)
            yield ChatClient(http, target.model or first, kind)
        return

    from tether.config import ServerConfig
    from tether.engine.llama_options import LlamaOptions
    from tether.server import build_app

    config = ServerConfig(
        model_path=target.model,
        n_ctx=target.n_ctx,
        slots=target.slots,
        n_threads=target.threads,
        queue_limit=max(16, target.slots),
        llama_options=LlamaOptions(gpu_layers=target.gpu_layers),
        backend=target.backend.rstrip("/") if target.backend else None,
        backend_kind=target.backend_kind,  # type: ignore[arg-type]  # the CLI checks the value
        embedding_model="auto",  # as `tether serve` does: the bundled embedding model where it is set up
    )
    app = build_app(config)
    scheduler = app.state.tether.scheduler
    try:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(
            transport=transport, base_url="http://tether/v1/", timeout=timeout
        ) as http:
            kind, first = await detect_server(http)
            yield ChatClient(http, first, kind)
    finally:
        scheduler.close()
