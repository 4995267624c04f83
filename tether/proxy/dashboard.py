"""The live dashboard: ``GET /ui`` (one self-contained page) and ``GET /ui/events`` (its feed).

The page shows the slots and the queue, the turns in flight and, for each recent turn, every tool
call: what the model wrote, what the guard did and what was returned. It is rendered from a
snapshot embedded in the page, then kept current by server-sent events: ``/ui/events`` sends a
``snapshot`` event whenever a turn starts, streams or ends, and at least every second while the
scheduler's numbers change. With an API key set, both need it, as ``?key=`` (a browser's
``EventSource`` cannot send headers) or as the usual header.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import AsyncIterator
from importlib.resources import files
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import HTMLResponse

from tether.proxy.sse import EventStreamResponse
from tether.proxy.state import AppState
from tether.proxy.wire import app_state

__all__ = ["router", "snapshot"]

router = APIRouter(prefix="/ui")

TICK_S = 1.0  # the longest a change in slots or queue waits to be sent
COALESCE_S = 0.2  # a streamed reply changes its turn per delta: send at most this often
KEEPALIVE_S = 15.0  # a comment line, so proxies and browsers keep an idle stream open


def snapshot(state: AppState) -> dict[str, Any]:
    """Everything the page shows, as JSON."""
    recent = state.recorder.recent
    return {
        "model": state.model_id,
        "scheduler": state.scheduler.snapshot(),
        "prefill": state.scheduler.prefilling(),
        "in_flight": recent.in_flight,
        "interventions": state.core.stats.interventions,
        "turns": recent.as_list(),
    }


def _page(data: dict[str, Any]) -> str:
    template = files("tether.proxy").joinpath("dashboard.html").read_text(encoding="utf-8")
    # "<" escaped, so no text in the data can close the <script> element it sits in.
    boot = json.dumps(data, ensure_ascii=False).replace("<", "\\u003c")
    return template.replace("/*BOOT*/null", boot, 1)


@router.get("", include_in_schema=False)
async def dashboard(request: Request) -> HTMLResponse:
    return HTMLResponse(_page(snapshot(app_state(request))), headers={"Cache-Control": "no-store"})


@router.get("/events", include_in_schema=False)
async def events(request: Request) -> EventStreamResponse:
    return EventStreamResponse(_feed(app_state(request)))


async def _feed(state: AppState) -> AsyncIterator[bytes]:
    """Snapshots as they change, until the client goes (its request is cancelled) or the server
    shuts down (an open dashboard must not hold up the grace period)."""
    recent = state.recorder.recent
    yield b"retry: 2000\n\n"
    last = ""
    seen = -1
    quiet_since = time.monotonic()
    while not state.scheduler.closing:
        payload = json.dumps(snapshot(state), ensure_ascii=False)
        if payload != last:
            yield f"event: snapshot\ndata: {payload}\n\n".encode()
            last, quiet_since = payload, time.monotonic()
        elif time.monotonic() - quiet_since > KEEPALIVE_S:
            yield b": keepalive\n\n"
            quiet_since = time.monotonic()
        seen = await recent.wait(seen, TICK_S)
        await asyncio.sleep(COALESCE_S)
