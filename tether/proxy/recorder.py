"""The one object the serving path reports to: Prometheus metrics and the dashboard's recent turns.

Every turn passes through :meth:`Recorder.track` where it enters the pipeline
(:meth:`tether.proxy.state.AppState.start`, and the plain-completion route): its usage, outcome
and, for the dashboard, its text, calls and interventions are recorded there, once, from the
same events the client gets. Generation timings come from the core (``CoreOptions.on_generation``,
where the first token is seen), server-side tool runs from ``ServerToolsStage.on_run``, HTTP
statuses from :class:`tether.proxy.metrics.MetricsMiddleware`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import time
from collections import deque
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from tether.aio import closing_stream
from tether.caches import CacheFill
from tether.calls import ToolCall
from tether.chat import is_request
from tether.engine.scheduler import Scheduler
from tether.guardrails.interventions import GuardrailStats, Intervention
from tether.proxy.metrics import CURRENT_REQUEST, Metrics
from tether.turns.events import ChatJob, FinishOut, TextOut, TurnEvent

__all__ = ["RecentTurns", "Recorder", "Trace", "tool_rows"]

RECENT_TURNS = 50  # turns the dashboard keeps (finished and running)
TEXT_CHARS = 2000  # reply text kept per turn
SHOW_CHARS = 500  # one value (arguments, a tool result) as the dashboard shows it


def _show(value: Any) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=repr)
    return text if len(text) <= SHOW_CHARS else text[:SHOW_CHARS] + "…"


def _call_text(name: str | None, arguments: Any) -> str:
    return f"{name or '?'}({_show(arguments if arguments is not None else {})})"


def tool_rows(calls: tuple[ToolCall, ...], notes: tuple[Intervention, ...]) -> list[dict[str, Any]]:
    """One row per tool call of a turn: what the model wrote, what the guard did, what was returned.

    Calls the client got and tools the server ran come first; each other intervention joins the
    first row of its tool, and one with no such row (a dropped call, a turn-level note) is a row
    of its own.
    """
    rows: list[dict[str, Any]] = []
    for note in notes:
        if note.kind == "server_tool":
            rows.append(
                {
                    "kind": "server",
                    "tool": note.tool,
                    "wrote": _call_text(note.tool, note.before),
                    "guard": [f"ran on the server: {note.detail}"],
                    "returned": _show(note.after or ""),
                }
            )
    for call in calls:
        rows.append(
            {
                "kind": "call",
                "tool": call.name,
                "wrote": _show(call.raw) if call.raw else _call_text(call.name, dict(call.arguments)),
                "guard": [],
                "returned": f"{call.name}({call.arguments_json()})",
            }
        )
    for note in notes:
        if note.kind == "server_tool":
            continue
        row = next((r for r in rows if note.tool is not None and r["tool"] == note.tool), None)
        if row is not None:
            row["guard"].append(f"{note.kind}: {note.detail}")
            continue
        rows.append(
            {
                "kind": "note",
                "tool": note.tool,
                "wrote": "" if note.before is None else _show(note.before),
                "guard": [f"{note.kind}: {note.detail}"],
                "returned": "" if note.after is None else _show(note.after),
            }
        )
    return rows


@dataclass(eq=False)
class Trace:
    """One turn as the dashboard shows it; updated in place while it runs."""

    id: str
    route: str
    prompt: str
    tools_offered: tuple[str, ...]
    started: float = field(default_factory=time.time)
    state: str = "running"  # running | done | error | cancelled
    first_output_s: float | None = None
    seconds: float | None = None
    text: str = ""
    calls: list[ToolCall] = field(default_factory=list)
    finish: FinishOut | None = None
    error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        finish = self.finish
        usage = finish.usage if finish else None
        return {
            "id": self.id,
            "route": self.route,
            "started": self.started,
            "state": self.state,
            "prompt": self.prompt,
            "tools_offered": list(self.tools_offered),
            "first_output_s": self.first_output_s,
            "seconds": self.seconds,
            "text": self.text,
            "finish_reason": finish.finish_reason if finish else None,
            "usage": None
            if usage is None
            else {
                "prompt_tokens": usage.prompt_tokens,
                "cached_tokens": usage.cached_tokens,
                "completion_tokens": usage.completion_tokens,
            },
            "interventions": [n.to_dict() for n in finish.interventions] if finish else [],
            "rows": tool_rows(tuple(self.calls), finish.interventions if finish else ()),
            "error": self.error,
        }


class RecentTurns:
    """A bounded ring of recent turns and a change signal for the dashboard's event stream."""

    def __init__(self, size: int = RECENT_TURNS) -> None:
        self._ring: deque[Trace] = deque(maxlen=size)
        self.in_flight = 0
        self.version = 0
        # Made by the first waiter and dropped once set: a turn's every delta touches this, and with
        # no dashboard open that must cost no allocation.
        self._changed: asyncio.Event | None = None

    def cache_fill(self) -> dict[str, CacheFill]:
        return {"dashboard_turns": CacheFill(len(self._ring), self._ring.maxlen or 0)}

    def add(self, trace: Trace) -> None:
        self._ring.append(trace)
        self.in_flight += 1
        self.touch()

    def finish(self, trace: Trace, state: str) -> None:
        trace.state = state
        self.in_flight -= 1
        self.touch()

    def touch(self) -> None:
        self.version += 1
        if self._changed is not None:
            self._changed.set()
            self._changed = None

    async def wait(self, seen: int, timeout: float) -> int:
        """Wait until the version differs from ``seen`` (or ``timeout`` passes); the version now."""
        if self.version == seen:
            if self._changed is None:
                self._changed = asyncio.Event()
            changed = self._changed
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(changed.wait(), timeout)
        return self.version

    def as_list(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [t.as_dict() for t in reversed(self._ring)]


class Recorder:
    """Feeds the app's :class:`Metrics` and its :class:`RecentTurns`; all on the event loop."""

    def __init__(self, scheduler: Scheduler, stats: GuardrailStats, *, recent: int = RECENT_TURNS) -> None:
        self.recent = RecentTurns(recent)
        self.metrics = Metrics(scheduler, stats, in_flight=lambda: self.recent.in_flight)

    def http_request(self, route: str, status: str) -> None:
        self.metrics.requests.labels(route, status).inc()

    def generation(self, first_token_s: float, decode_s: float, tokens: int) -> None:
        """One generation's timing: to its first token, and over the ``tokens - 1`` after it."""
        self.metrics.ttft.observe(first_token_s)
        if tokens > 1:
            self.metrics.tpot.observe(decode_s / (tokens - 1))

    def server_tool_run(self, tool: str, ok: bool) -> None:
        self.metrics.server_tool_runs.labels(tool, "ok" if ok else "error").inc()

    async def track(self, events: AsyncIterator[TurnEvent], job: ChatJob) -> AsyncIterator[TurnEvent]:
        """``events`` unchanged, recorded on the way: usage and outcome once the turn ends. The request
        id and route are the current request's (``MetricsMiddleware``)."""
        label = CURRENT_REQUEST.get()
        route = label.route if label else "unknown"
        asked = next((m.content for m in reversed(job.messages) if is_request(m)), "")
        trace = Trace(
            id=(label.request_id if label else "") or secrets.token_hex(8),
            route=route,
            prompt=_show(asked),
            tools_offered=tuple(t.name for t in job.tools),
        )
        began = time.monotonic()
        self.recent.add(trace)
        state = "cancelled"
        try:
            async with closing_stream(events) as stream:
                async for ev in stream:
                    self._see(trace, ev, began)
                    if isinstance(ev, FinishOut):
                        state = "done"
                        self._finished(route, ev)
                    yield ev
        except Exception as exc:
            state = "error"
            trace.error = str(exc) or type(exc).__name__
            raise
        finally:
            trace.seconds = time.monotonic() - began
            self.metrics.turns.labels(route, trace.finish.finish_reason if trace.finish else state).inc()
            self.recent.finish(trace, state)

    def _see(self, trace: Trace, ev: TurnEvent, began: float) -> None:
        if trace.first_output_s is None and not isinstance(ev, FinishOut):
            trace.first_output_s = time.monotonic() - began
        if isinstance(ev, TextOut):
            if len(trace.text) < TEXT_CHARS:
                trace.text = (trace.text + ev.text)[:TEXT_CHARS]
        elif isinstance(ev, ToolCall):
            trace.calls.append(ev)
        else:
            trace.finish = ev
        self.recent.touch()

    def _finished(self, route: str, finish: FinishOut) -> None:
        usage = finish.usage
        # A counter refuses a negative step; an engine's odd count must not fail the response.
        self.metrics.prompt_tokens.labels(route).inc(max(0, usage.prompt_tokens))
        self.metrics.cached_tokens.labels(route).inc(max(0, usage.cached_tokens))
        self.metrics.completion_tokens.labels(route).inc(max(0, usage.completion_tokens))
