"""The FastAPI app factory: ``create_app(config, scheduler)``; all state lives on ``app.state``."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from dataclasses import replace
from typing import Any

import structlog
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from tether.config import ServerConfig
from tether.engine.base import ReportsBatch, ReportsPrefixCache
from tether.engine.embedding import Embedder
from tether.engine.heap import trim_every
from tether.engine.remote.chat import ChatBackend
from tether.engine.scheduler import Scheduler
from tether.engine.template import ChatTemplate
from tether.errors import InternalError, InvalidRequestError, TetherError
from tether.grammar.formats import detect_format, get_format
from tether.guardrails.interventions import GuardrailStats
from tether.guardrails.pipeline import Regenerator
from tether.guardrails.presets import PRESETS
from tether.logging import LogSink
from tether.proxy.anthropic_routes import AnthropicErrorMiddleware
from tether.proxy.anthropic_routes import router as anthropic_router
from tether.proxy.dashboard import router as dashboard_router
from tether.proxy.embeddings_routes import router as embeddings_router
from tether.proxy.metrics import MetricsMiddleware
from tether.proxy.metrics import router as metrics_router
from tether.proxy.middleware import (
    AuthMiddleware,
    BodyLimitMiddleware,
    DisconnectMiddleware,
    JsonBodyMiddleware,
    RequestContextMiddleware,
)
from tether.proxy.ollama_convert import OllamaErrorMiddleware
from tether.proxy.ollama_routes import router as ollama_router
from tether.proxy.openai_routes import router as openai_router
from tether.proxy.recorder import Recorder
from tether.proxy.responses_routes import router as responses_router
from tether.proxy.responses_store import ResponseStore
from tether.proxy.sessions import router as sessions_router
from tether.proxy.state import AppState
from tether.selection.decision import fitted_decision
from tether.selection.semantic import SemanticRelevance
from tether.turns.answer_check import AnswerCheckStage
from tether.turns.chat_core import ChatBackendCore
from tether.turns.core import ChatCore, CoreOptions, SpecFactory
from tether.turns.events import ChatJob
from tether.turns.layer0 import reply_spec_factory
from tether.turns.regenerate import SchedulerRegenerator
from tether.turns.stages import CompactionStage, ServerToolsStage, Stage, TurnPipeline
from tether.turns.tool_view import ToolView
from tether.workflows.budget import context_budget
from tether.workflows.loader import load_workflow
from tether.workflows.sessions import open_session_store
from tether.workflows.stage import SessionStage

__all__ = ["create_app"]

log = structlog.get_logger(__name__)


def _error_response(exc: TetherError) -> JSONResponse:
    return JSONResponse(exc.to_openai(), status_code=exc.status, headers=exc.headers())


def _validation_param(errors: list[Any]) -> tuple[str, str | None]:
    first = errors[0] if errors else {}
    loc = [str(p) for p in first.get("loc", ()) if p != "body"]
    param = ".".join(loc) or None
    if first.get("type") == "json_invalid":
        return "request body is not valid JSON", None
    msg = first.get("msg", "invalid request")
    return (f"{param}: {msg}" if param else msg), param


def create_app(
    config: ServerConfig,
    scheduler: Scheduler,
    *,
    reply_spec: SpecFactory | None = None,
    server_tools: ServerToolsStage | None = None,
    chat_backend: ChatBackend | None = None,
    embedder: Embedder | None = None,
    log_sink: LogSink | None = None,
    heap_trim_s: float | None = None,
) -> FastAPI:
    """Build the app around an already-loaded scheduler (the CLI loads the engines).

    The turn pipeline is composed here, once, for every protocol: workflow sessions, then
    server-side tools, then (with ``--compaction``) compaction, then the guarded generation.
    ``chat_backend``: the scheduler's slots front a chat API (OpenAI-compatible, Ollama), which renders
    and parses itself; the core forwards the job and keeps the guard (docs/backends.md).
    ``embedder``: the sentence-embedding model behind ``/v1/embeddings`` (``AppState.embedder``), closed
    at shutdown; None answers that route with ``model_not_found``.
    ``log_sink``: where the log goes (``tether.logging``); ``/health`` and ``/metrics`` count the lines
    it could not write.
    ``heap_trim_s``: while serving, give freed heap pages back to the OS this often
    (``tether.engine.heap``); None leaves the heap to the C library.
    """
    info = scheduler.engines[0].info
    spoken = chat_backend.tool_format if chat_backend is not None else detect_format(info.chat_template)
    fmt = get_format(config.tool_format or spoken)
    # The embedding model, where one is loaded, also tells which offered tools fit a request.
    semantic = SemanticRelevance(embedder) if embedder is not None else None
    decision = fitted_decision(semantic=semantic is not None)
    if reply_spec is None:  # layer 0 within what the engine declares it applies
        reply_spec = reply_spec_factory(info.layers, decision, semantic=semantic)
    template = ChatTemplate(info.chat_template, bos_token=info.bos_token, eos_token=info.eos_token)

    def regenerator(job: ChatJob) -> Regenerator:
        return SchedulerRegenerator(scheduler, template, fmt, priority=job.priority)

    stats = GuardrailStats()
    recorder = Recorder(scheduler, stats)  # /metrics and /ui (docs/observability.md)
    tool_view = ToolView(share=config.tool_view_share, semantic=semantic, model=decision)
    options = CoreOptions(
        default_max_tokens=config.default_max_tokens,
        reply_spec=reply_spec,
        regenerator=regenerator,
        stats=stats,
        on_generation=recorder.generation,
        tool_view=tool_view,
    )
    core: ChatCore = (
        ChatCore(scheduler, fmt, options)
        if chat_backend is None
        else ChatBackendCore(scheduler, fmt, chat_backend, options)
    )
    default_guard = PRESETS[config.preset]
    if config.constrain is not None:
        default_guard = replace(default_guard, constrain=config.constrain)
    sessions = open_session_store(  # memory, or Redis shared by replicas (docs/deploy.md)
        config.session_store,
        [load_workflow(path) for path in config.workflows],
        ttl_s=config.session_ttl_s,
        max_sessions=config.max_sessions,
    )
    stages: list[Stage] = [SessionStage(sessions)]
    if server_tools is not None:
        server_tools.on_run = recorder.server_tool_run
        stages.append(server_tools)
    if semantic is not None:
        stages.append(AnswerCheckStage(semantic, stats))
    if config.compaction:
        stages.append(CompactionStage(core))

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if server_tools is not None:
            await server_tools.start()  # MCP servers: started and listed before the first request
        log.info("server_ready", model=info.model_id, n_ctx=info.n_ctx, tool_format=fmt.name)
        trimmer = asyncio.create_task(trim_every(heap_trim_s)) if heap_trim_s is not None else None
        yield
        if trimmer is not None:
            trimmer.cancel()
            with suppress(asyncio.CancelledError):
                await trimmer
        if server_tools is not None:
            await server_tools.close()
        scheduler.shutdown()
        # Joining the engine threads blocks; keep the loop free for the last responses meanwhile.
        await asyncio.to_thread(scheduler.close)
        if embedder is not None:
            await asyncio.to_thread(embedder.close)
        await app.state.tether.sessions.close()

    app = FastAPI(title="tether", version="0.1.0", lifespan=lifespan)
    budget = context_budget(info, slots=len(scheduler.engines)).as_dict()
    log.info("context_budget", **budget)
    app.state.tether = AppState(
        config=config,
        scheduler=scheduler,
        core=core,
        pipeline=TurnPipeline(core, stages),
        default_guard=default_guard,
        sessions=sessions,
        recorder=recorder,
        server_tools=server_tools,
        context_budget=budget,
        responses=ResponseStore(config.responses_store),
        embedder=embedder,
    )
    recorder.metrics.watch(
        tool_view,
        semantic,
        embedder,
        app.state.tether.responses,
        sessions.backend,
        recorder.recent,
        log_sink=log_sink,
    )
    app.include_router(openai_router)
    app.include_router(anthropic_router)
    app.include_router(sessions_router)
    app.include_router(metrics_router)
    app.include_router(dashboard_router)
    app.include_router(ollama_router)
    app.include_router(responses_router)
    app.include_router(embeddings_router)

    @app.get("/health")
    async def health(request: Request) -> dict[str, Any]:
        state: AppState = request.app.state.tether
        body: dict[str, Any] = {
            "status": "ok",
            "model": state.model_id,
            "backend": state.core.info.backend,
            "scheduler": state.scheduler.snapshot(),
            "interventions": state.core.stats.interventions,
        }
        engine = state.scheduler.engines[0]
        if isinstance(
            engine, ReportsBatch
        ):  # the batched engine: steps, forced and draft tokens, decode time
            body["batch"] = engine.batch_stats()
        if isinstance(engine, ReportsPrefixCache) and (cache := engine.prefix_cache_stats()) is not None:
            body["prefix_cache"] = cache
        if log_sink is not None and log_sink.dropped:  # the disk refused log lines: degraded, serving
            body["log"] = log_sink.snapshot()
        if state.server_tools is not None and (sources := state.server_tools.snapshot()):
            body["tool_sources"] = sources  # {"mcp": {server: state, restarts, calls, last error}}
        return body

    @app.exception_handler(TetherError)
    async def tether_error(_: Request, exc: TetherError) -> JSONResponse:
        if exc.status >= 500:
            log.error("request_failed", error=exc.message, code=exc.code)
        return _error_response(exc)

    @app.exception_handler(RequestValidationError)
    async def validation_error(_: Request, exc: RequestValidationError) -> JSONResponse:
        message, param = _validation_param(list(exc.errors()))
        return _error_response(InvalidRequestError(message, param=param))

    @app.exception_handler(StarletteHTTPException)
    async def http_error(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        err = InvalidRequestError(str(exc.detail))
        body = err.to_openai()
        body["error"]["code"] = {404: "not_found", 405: "method_not_allowed"}.get(exc.status_code)
        return JSONResponse(body, status_code=exc.status_code)

    @app.exception_handler(Exception)
    async def unexpected(_: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled_error", error=repr(exc))
        err = InternalError("internal server error; see the server log for details")
        return _error_response(err)

    app.add_middleware(JsonBodyMiddleware)  # innermost: every route takes JSON, whatever curl says
    app.add_middleware(DisconnectMiddleware)  # reads the (limited) body, then watches
    app.add_middleware(BodyLimitMiddleware, limit=config.max_body_bytes)
    app.add_middleware(AuthMiddleware, api_key=config.api_key)
    app.add_middleware(AnthropicErrorMiddleware)  # outside auth and body limit: their errors too
    app.add_middleware(OllamaErrorMiddleware)
    app.add_middleware(MetricsMiddleware, recorder=recorder)  # outside auth: refusals count too
    app.add_middleware(
        CORSMiddleware,
        allow_origin_regex=r"https?://(localhost|127\.0\.0\.1)(:\d+)?",
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.add_middleware(RequestContextMiddleware)
    return app
