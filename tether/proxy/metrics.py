"""Prometheus metrics of one app: its own registry, the instruments, ``GET /metrics`` and request counting.

Each app owns a ``CollectorRegistry`` (several apps share a test process; nothing goes to the
module-global default registry). Counters and histograms are fed by the app's
:class:`tether.proxy.recorder.Recorder`; slots, queue depth, cancellations, preemptions and guard
interventions are read live at scrape time from the scheduler and the core's ``GuardrailStats``,
so they always agree with ``/health``. So are the process's figures (memory, descriptors, threads,
asyncio tasks) and every bounded cache's fill beside its limit (``tether.caches``): what a soak
run watches for leaks.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, NamedTuple

from fastapi import APIRouter, Request, Response
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Histogram,
    ProcessCollector,
    generate_latest,
)
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from tether import schema_check
from tether.caches import CacheFill, ReportsCaches
from tether.engine.base import ReportsPrefixCache
from tether.engine.scheduler import Scheduler
from tether.grammar import closing, structured
from tether.guardrails.interventions import KINDS, GuardrailStats
from tether.logging import LogSink
from tether.selection import relevance

if TYPE_CHECKING:
    from tether.proxy.recorder import Recorder

__all__ = ["CURRENT_REQUEST", "Metrics", "MetricsMiddleware", "RequestLabel", "route_label", "router"]

router = APIRouter()


class RequestLabel(NamedTuple):
    request_id: str
    route: str


# The request being served, set by ``MetricsMiddleware`` for the request's own context: every
# protocol's turn is labelled where it enters the pipeline without passing the request down.
CURRENT_REQUEST: ContextVar[RequestLabel | None] = ContextVar("tether_current_request", default=None)

# Nginx's "client closed request": the client hung up before any response started.
CLIENT_GONE = "499"

_TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)
_TPOT_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)

# Scheduler counters exposed as Prometheus counters: (snapshot key, metric name, help).
_SCHEDULER_COUNTERS = (
    ("started", "tether_generations_started", "Generations that got a slot."),
    ("cancelled", "tether_generations_cancelled", "Generations cancelled (client gone, shutdown)."),
    ("preempted", "tether_generations_preempted", "Generations preempted by a higher-priority request."),
    ("rejected", "tether_queue_rejected", "Requests refused because the wait queue was full (429)."),
    ("timed_out", "tether_queue_timed_out", "Requests that waited longer than --queue-timeout (503)."),
)


class _Live:
    """What is read at scrape time: the scheduler's snapshot and the guard's per-kind counts."""

    def __init__(self, scheduler: Scheduler, stats: GuardrailStats, in_flight: Callable[[], int]) -> None:
        self.scheduler = scheduler
        self.stats = stats
        self.in_flight = in_flight
        self.caches: list[object] = []  # objects that may hold caches (``Metrics.watch``)
        self.log_sink: LogSink | None = None

    def describe(self) -> Iterable[Metric]:
        return ()  # nothing to check at registration; the names are fixed below

    def collect(self) -> Iterable[Metric]:
        snap = self.scheduler.snapshot()
        yield GaugeMetricFamily("tether_slots", "Engine slots (contexts).", value=snap["slots"])
        yield GaugeMetricFamily("tether_busy_slots", "Slots running a generation.", value=snap["busy_slots"])
        yield GaugeMetricFamily(
            "tether_queue_depth", "Requests waiting for a slot.", value=snap["queue_depth"]
        )
        yield GaugeMetricFamily("tether_turns_in_flight", "Turns being answered.", value=self.in_flight())
        for key, name, doc in _SCHEDULER_COUNTERS:
            yield CounterMetricFamily(name, doc, value=snap[key])
        counts = self.stats.interventions
        family = CounterMetricFamily(
            "tether_guard_interventions", "Guardrail interventions by kind.", labels=["kind"]
        )
        for kind in sorted(KINDS | counts.keys()):
            family.add_metric([kind], counts.get(kind, 0))
        yield family
        engine = self.scheduler.engines[0] if self.scheduler.engines else None
        if isinstance(engine, ReportsPrefixCache) and (cache := engine.prefix_cache_stats()) is not None:
            yield from _prefix_cache_metrics(cache)
        yield GaugeMetricFamily("tether_threads", "Python threads alive.", value=threading.active_count())
        try:
            tasks = len(asyncio.all_tasks())
        except RuntimeError:  # scraped off the event loop (a test reading the registry directly)
            tasks = 0
        yield GaugeMetricFamily("tether_asyncio_tasks", "asyncio tasks not yet done.", value=tasks)
        yield from _cache_metrics(self.fills(engine))
        if self.log_sink is not None:
            yield CounterMetricFamily(
                "tether_log_lines_dropped", "Log lines the disk refused.", value=self.log_sink.dropped
            )

    def fills(self, engine: object) -> dict[str, CacheFill]:
        """Every bounded cache's fill, by name."""
        found: dict[str, CacheFill] = {}
        for holder in (engine, *self.caches):
            if isinstance(holder, ReportsCaches):
                found.update(holder.cache_fill())
        for module in (schema_check, closing, structured, relevance):
            found.update(module.cache_fill())
        return found


def _cache_metrics(fills: dict[str, CacheFill]) -> Iterator[Metric]:
    entries = GaugeMetricFamily("tether_cache_entries", "Entries held by each cache.", labels=["cache"])
    capacity = GaugeMetricFamily(
        "tether_cache_capacity", "The most entries each cache may hold.", labels=["cache"]
    )
    for name in sorted(fills):
        entries.add_metric([name], fills[name].entries)
        capacity.add_metric([name], fills[name].capacity)
    yield entries
    yield capacity


def _prefix_cache_metrics(cache: dict[str, Any]) -> Iterator[Metric]:
    """The prefix cache's tiers (``/health``'s ``prefix_cache``) as Prometheus families."""
    tiers = [(name, cache[name]) for name in ("ram", "disk") if name in cache]
    hits = CounterMetricFamily("tether_prefix_cache_hits", "Prefix cache hits by tier.", labels=["tier"])
    size = GaugeMetricFamily("tether_prefix_cache_bytes", "Bytes held by tier.", labels=["tier"])
    entries = GaugeMetricFamily("tether_prefix_cache_entries", "Cached prefixes by tier.", labels=["tier"])
    for name, tier in tiers:
        hits.add_metric([name], tier["hits"])
        size.add_metric([name], tier["bytes"])
        entries.add_metric([name], tier["entries"])
    yield hits
    yield size
    yield entries
    yield CounterMetricFamily(
        "tether_prefix_cache_misses", "Long prompts no cached prefix helped.", value=cache["misses"]
    )
    yield CounterMetricFamily(
        "tether_prefix_cache_restored_tokens",
        "Prompt tokens restored from the cache.",
        value=cache["restored_tokens"],
    )
    yield CounterMetricFamily(
        "tether_prefix_cache_restore_seconds",
        "Time spent loading and restoring cached prefixes.",
        value=cache["restore_s"],
    )


class Metrics:
    """The instruments of one app, registered on its own ``registry``."""

    def __init__(self, scheduler: Scheduler, stats: GuardrailStats, in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.requests = Counter(
            "tether_http_requests", "HTTP requests by route and status.", ["route", "status"], registry=r
        )
        self.turns = Counter("tether_turns", "Turns by route and outcome.", ["route", "outcome"], registry=r)
        self.prompt_tokens = Counter("tether_prompt_tokens", "Prompt tokens.", ["route"], registry=r)
        self.cached_tokens = Counter(
            "tether_cached_prompt_tokens", "Prompt tokens reused from a slot's cache.", ["route"], registry=r
        )
        self.completion_tokens = Counter(
            "tether_completion_tokens", "Generated tokens.", ["route"], registry=r
        )
        self.ttft = Histogram(
            "tether_time_to_first_token_seconds",
            "From scheduling a generation (queueing included) to its first token.",
            buckets=_TTFT_BUCKETS,
            registry=r,
        )
        self.tpot = Histogram(
            "tether_time_per_output_token_seconds",
            "Mean time between a generation's tokens after the first.",
            buckets=_TPOT_BUCKETS,
            registry=r,
        )
        self.server_tool_runs = Counter(
            "tether_server_tool_runs",
            "Server-side tool runs by tool and outcome.",
            ["tool", "outcome"],
            registry=r,
        )
        self._live = _Live(scheduler, stats, in_flight)
        r.register(self._live)
        ProcessCollector(registry=r)  # process_resident_memory_bytes, process_open_fds, …

    def watch(self, *holders: object, log_sink: LogSink | None = None) -> None:
        """Report the caches of ``holders`` (those that implement ``ReportsCaches``) and the log
        lines ``log_sink`` could not write."""
        self._live.caches.extend(h for h in holders if h is not None)
        self._live.log_sink = log_sink

    def fills(self) -> dict[str, CacheFill]:
        engines = self._live.scheduler.engines
        return self._live.fills(engines[0] if engines else None)

    def exposition(self) -> bytes:
        return generate_latest(self.registry)


@router.get("/metrics", include_in_schema=False)
async def metrics(request: Request) -> Response:
    """Prometheus text format; behind the API key like every route but ``/health``."""
    recorder: Recorder = request.app.state.tether.recorder
    return Response(recorder.metrics.exposition(), media_type=CONTENT_TYPE_LATEST)


def _templates(routes: Iterable[BaseRoute]) -> Iterator[BaseRoute]:
    """Every route with a path template; FastAPI keeps included routers as one entry each."""
    for route in routes:
        included = getattr(route, "original_router", None)
        if included is not None:
            yield from _templates(included.routes)
        elif isinstance(getattr(route, "path_format", None), str):
            yield route


def route_label(scope: Scope, routes: Sequence[BaseRoute]) -> str:
    """The route template a request matches (``/v1/responses/{response_id}``), never the raw path:
    raw paths would make a label value per unknown URL. Matched here, before the app runs, so that
    requests refused by auth or the body limit get their route too."""
    partial: str | None = None
    for route in routes:
        match, _ = route.matches(scope)
        if match == Match.FULL:
            return str(getattr(route, "path_format", ""))
        if match == Match.PARTIAL and partial is None:
            partial = str(getattr(route, "path_format", ""))  # the path is right, the method is not
    return partial or "unmatched"


class MetricsMiddleware:
    """Counts every HTTP request by route and status, refusals by auth or body limit included."""

    def __init__(self, app: ASGIApp, recorder: Recorder) -> None:
        self.app = app
        self.recorder = recorder
        self.routes: tuple[BaseRoute, ...] | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if self.routes is None:  # every route is registered by the first request
            self.routes = tuple(_templates(getattr(scope.get("app"), "routes", ())))
        route = route_label(scope, self.routes)
        status = {"code": CLIENT_GONE}
        rid = str(scope.get("state", {}).get("request_id", ""))
        token = CURRENT_REQUEST.set(RequestLabel(rid, route))

        async def counting_send(message: Message) -> None:
            if message["type"] == "http.response.start":
                status["code"] = str(message["status"])
            await send(message)

        try:
            await self.app(scope, receive, counting_send)
        except Exception:
            if status["code"] == CLIENT_GONE:
                status["code"] = "500"  # the outermost handler answers it
            raise
        finally:
            CURRENT_REQUEST.reset(token)
            self.recorder.http_request(route, status["code"])
