"""Assembling and running a server: load engines, build the app, run uvicorn."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING, Protocol

import structlog
import uvicorn
from fastapi import FastAPI

from tether.config import ServerConfig
from tether.engine.base import Engine
from tether.engine.heap import TRIM_INTERVAL_S, map_large_blocks
from tether.engine.llama_options import check_mlx
from tether.engine.locate import bundled_embedding_model_path, bundled_model_path
from tether.engine.scheduler import Scheduler
from tether.errors import ConfigError
from tether.logging import LogSink
from tether.proxy.app import create_app
from tether.turns.stages import ServerToolsStage

if TYPE_CHECKING:
    from tether.engine.embedding import Embedder
    from tether.engine.prefix import PrefixCache
    from tether.engine.remote.chat import ChatBackend
    from tether.sandbox import SandboxExecutor, ToolSource

__all__ = ["ENGINE_LOADERS", "EngineLoader", "build_app", "load_embedder", "load_engines", "run_server"]

log = structlog.get_logger(__name__)


class EngineLoader(Protocol):
    """Builds one kind of engine, one per slot. ``model`` is the local model's path (``--model``,
    else the bundled model); None in front of a ``--backend`` server."""

    def __call__(self, config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]: ...


def load_engines(config: ServerConfig, *, progress: bool = False) -> list[Engine]:
    """One engine per slot (each has its own context, or its own slot of the ``--backend`` server)."""
    kind, model = _engine_kind(config)
    loader = ENGINE_LOADERS.get(kind)
    if loader is None:
        raise ConfigError(
            f"--backend {config.backend} is a {kind} server, which this version cannot drive yet"
        )
    return loader(config, model, progress=progress)


def _engine_kind(config: ServerConfig) -> tuple[str, Path | None]:
    """Which of ``ENGINE_LOADERS`` serves ``config``, and the local model's path (None for a backend)."""
    if config.backend:
        kind: str = config.backend_kind
        if kind == "auto":
            from tether.engine.remote.detect import detect_backend_kind

            kind = detect_backend_kind(config.backend, api_key=config.backend_api_key)
        log.info("backend_connecting", url=config.backend, kind=kind)
        return kind, None
    path = Path(config.model_path) if config.model_path else bundled_model_path()
    if config.engine == "mlx" or (config.engine == "auto" and path.is_dir()):
        return "mlx", path
    # Batched even for one slot: decoding runs on the runner's thread, so the Python per token
    # overlaps the next step instead of delaying it, and strict calls get jump-forward and drafts.
    if config.batching != "off":
        return "llama-batched", path
    return "llama", path


def _local(model: Path | None) -> Path:
    assert model is not None, "a local engine loads a model file"
    return model


# -- local engines ----------------------------------------------------------------------------------


def _llama_contexts(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    """A llama.cpp context per slot."""
    from tether.engine.llama_cpp import LlamaCppEngine

    path = _local(model)
    engines: list[Engine] = []
    cache = prefix_cache(config, path, layout="serial", n_ctx=config.n_ctx)  # shared by the slots

    def load() -> LlamaCppEngine:
        return LlamaCppEngine(
            path,
            n_ctx=config.n_ctx,
            n_threads=config.n_threads,
            options=config.llama_options,
            prefix_cache=cache,
        )

    if progress:
        from rich.console import Console

        console = Console(stderr=True)
        with console.status(f"Loading {path.name} ({config.slots} slot(s), {config.n_ctx} ctx)…"):
            for _ in range(config.slots):
                engines.append(load())
        console.print(f"Loaded {path.name}")
    else:
        for _ in range(config.slots):
            engines.append(load())
    return engines


def prefix_cache(config: ServerConfig, path: Path, *, layout: str, n_ctx: int) -> PrefixCache | None:
    """The prefix cache the slots of a llama.cpp model share (None when both tiers are off)."""
    from tether.engine.prefix import PrefixCache, llama_tag

    disk = Path(config.prefix_cache_dir) if config.prefix_cache_dir else None
    if config.prefix_cache_ram_bytes <= 0 and disk is None:
        return None
    try:
        cache = PrefixCache(
            llama_tag(path, config.llama_options, layout=layout, n_ctx=n_ctx),
            ram_bytes=config.prefix_cache_ram_bytes,
            disk_dir=disk,
            disk_bytes=config.prefix_cache_disk_bytes,
        )
    except OSError as exc:
        raise ConfigError(
            f"--prefix-cache-dir {disk}: cannot use it as the prefix cache's directory ({exc})"
        ) from exc
    log.info("prefix_cache", ram_bytes=config.prefix_cache_ram_bytes, dir=str(disk) if disk else None)
    return cache


def _llama_batched(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    return _batched_slots(config, _local(model), progress=progress)  # looked up by name: tests replace it


def _batched_slots(config: ServerConfig, path: Path, *, progress: bool) -> list[Engine]:
    """``--slots`` sequences of one llama.cpp context, advanced together (docs/batching.md)."""
    from tether.engine.batch import BatchedLlama, BatchOptions

    options = BatchOptions(handoff_window=config.stream_window_s)
    if not config.speculate:
        options = replace(options, jump_forward=False, draft_tokens=0)

    def load() -> BatchedLlama:
        return BatchedLlama(
            path,
            n_seq=config.slots,
            n_ctx=config.n_ctx,
            n_threads=config.n_threads,
            options=config.llama_options,
            batch=options,
            prefix_cache=prefix_cache(config, path, layout="batched", n_ctx=config.n_ctx),
        )

    if progress:
        from rich.console import Console

        console = Console(stderr=True)
        with console.status(
            f"Loading {path.name} ({config.slots} batched slot(s), {config.n_ctx} ctx each)…"
        ):
            model = load()
        console.print(f"Loaded {path.name}")
    else:
        model = load()
    return list(model.slots())


def _mlx_engines(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    """One MLX engine per slot, sharing the weights."""
    if config.batching == "on":
        raise ConfigError("--batching on batches llama.cpp contexts; the MLX engine runs one per slot")
    path = _local(model)
    check_mlx(config.llama_options)  # also where --engine auto chose MLX for a directory
    try:
        from tether.engine.mlx import MlxEngine, cached_gguf_to_mlx, is_mlx_model_dir
    except ImportError as exc:
        raise ConfigError(f"the MLX engine needs the mlx extra: pip install 'tether[mlx]' ({exc})") from exc
    if path.suffix == ".gguf":
        path = cached_gguf_to_mlx(path)
    elif not is_mlx_model_dir(path):
        raise ConfigError(f"{path} is not an MLX model directory (config.json + safetensors)")
    first = MlxEngine(path, n_ctx=config.n_ctx)
    return [first, *(first.sibling() for _ in range(config.slots - 1))]


# -- --backend servers (docs/backends.md) -----------------------------------------------------------


class _ConnectTokens(Protocol):
    def __call__(
        self, url: str, *, slots: int = ..., api_key: str | None = ..., timeout_s: float = ...
    ) -> Sequence[Engine]: ...


def _llama_server_slots(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    """One engine per slot of the llama-server."""
    from tether.engine.remote import connect_llama_server

    return _token_slots(config, "llama-server", connect_llama_server)


def _vllm_slots(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    """One engine per slot of the vLLM server."""
    from tether.engine.remote.vllm import connect_vllm

    return _token_slots(config, "vllm", connect_vllm)


def _token_slots(config: ServerConfig, kind: str, connect: _ConnectTokens) -> list[Engine]:
    """One engine per slot of a ``--backend`` server tether drives by token ids; ``--model`` names no
    model there."""
    assert config.backend is not None
    if config.model_path is not None:
        raise ConfigError(
            f"--model names the backend's model for openai and ollama backends only, not {kind}"
        )
    return list(
        connect(
            config.backend,
            slots=config.slots,
            api_key=config.backend_api_key,
            timeout_s=config.backend_timeout_s,
        )
    )


class _ConnectChat(Protocol):
    def __call__(
        self, url: str, *, model: str | None, n_ctx: int, api_key: str | None = ..., timeout_s: float = ...
    ) -> ChatBackend: ...


def _openai_slots(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    from tether.engine.remote.openai_chat import connect_openai

    return _chat_slots(config, connect_openai)


def _ollama_slots(config: ServerConfig, model: Path | None, *, progress: bool) -> list[Engine]:
    from tether.engine.remote.ollama_chat import connect_ollama

    return _chat_slots(config, connect_ollama)


def _chat_slots(config: ServerConfig, connect: _ConnectChat) -> list[Engine]:
    """``--slots`` slots in front of a chat API (OpenAI-compatible, Ollama), sharing its connection."""
    from tether.engine.remote.chat import ChatSlot

    assert config.backend is not None
    backend = connect(
        config.backend,
        model=config.model_path,
        n_ctx=config.n_ctx,
        api_key=config.backend_api_key,
        timeout_s=config.backend_timeout_s,
    )
    log.info(
        "backend_chat_api", model=backend.model, n_ctx=backend.info.n_ctx, native_tools=backend.native_tools
    )
    return [ChatSlot(backend) for _ in range(config.slots)]


ENGINE_LOADERS: dict[str, EngineLoader] = {
    # local: what _engine_kind picks from --engine, the model path, --batching and --slots
    "llama": _llama_contexts,
    "llama-batched": _llama_batched,
    "mlx": _mlx_engines,
    # --backend servers, by --backend-kind or the kind detect_backend_kind finds
    "llama-server": _llama_server_slots,
    "vllm": _vllm_slots,
    "openai": _openai_slots,
    "ollama": _ollama_slots,
}
"""Every kind of engine ``load_engines`` builds, by name: adding an engine is one entry here."""


def server_tools(config: ServerConfig) -> ServerToolsStage | None:
    """The sandboxed built-ins and MCP servers' tools the proxy runs itself, or None. Fails closed
    without bubblewrap."""
    if not config.server_tools and not config.mcp_config:
        return None
    from tether.sandbox import PermissionPolicy, SandboxConfig, SandboxExecutor, ToolBox
    from tether.sandbox.builtin_tools import BuiltinTools

    assert config.work_dir is not None
    work_dir = Path(config.work_dir).resolve()
    if not work_dir.is_dir():
        raise ConfigError(f"--work-dir {work_dir} is not a directory")
    executor = SandboxExecutor(SandboxConfig(work_dir=work_dir))
    tools = BuiltinTools(work_dir, executor).tools()
    wanted = set(config.server_tools)
    known = {t.name for t in tools}
    if "all" not in wanted and wanted - known:
        raise ConfigError(
            f"unknown server tool(s) {sorted(wanted - known)}; built-ins: {', '.join(sorted(known))}"
        )
    chosen = [t for t in tools if "all" in wanted or t.name in wanted]
    policy = PermissionPolicy.from_settings(config.permission)
    log.info("server_tools_enabled", tools=[t.name for t in chosen], permission=policy.mode.value)
    sources = [] if config.mcp_config is None else [_mcp_tools(config, work_dir, executor)]
    return ServerToolsStage(ToolBox(chosen, policy=policy), sources=sources)


def _mcp_tools(config: ServerConfig, work_dir: Path, executor: SandboxExecutor) -> ToolSource:
    """The servers of ``--mcp-config`` (stdio ones in the executor's sandbox)."""
    try:
        from tether.mcp.config import read_mcp_config
        from tether.mcp.tools import McpTools
    except ImportError as exc:  # the SDK is an extra
        raise ConfigError(f"--mcp-config needs the MCP SDK ({exc}): pip install 'tether[mcp]'") from exc
    from tether.sandbox.bwrap import prepare

    assert config.mcp_config is not None
    specs = read_mcp_config(config.mcp_config)
    plan = prepare(executor.config) if any(s.transport == "stdio" for s in specs) else None
    # A result gets about a quarter of the context (some four characters a token).
    log.info("mcp_servers_configured", servers=[s.name for s in specs])
    return McpTools(specs, work_dir=work_dir, plan=plan, result_chars=max(1000, config.n_ctx))


def load_embedder(config: ServerConfig) -> Embedder | None:
    """The sentence-embedding model of ``--embedding-model``: None when off, or when ``auto`` finds no
    converted bundled model (one log line says how to get it); a given path must load."""
    if config.embedding_model is None:
        return None
    if config.embedding_model == "auto":
        try:
            path = bundled_embedding_model_path()
        except ConfigError as exc:
            log.info("embeddings_off", reason=exc.message)
            return None
    else:
        path = Path(config.embedding_model).expanduser()
    from tether.engine.embedding.llama import SHARED_THREADS, LlamaEmbedder

    # Beside an in-process engine, one thread (SHARED_THREADS says why); alone, every core.
    threads = (config.n_threads or os.cpu_count() or 1) if config.backend else SHARED_THREADS
    return LlamaEmbedder(path, n_threads=threads)


def build_app(config: ServerConfig, *, progress: bool = False, log_sink: LogSink | None = None) -> FastAPI:
    # Evicted prefix-cache states (megabytes each) must go back to the OS, not stay as heap holes;
    # so must the pages freed among small blocks (the app trims the heap while it serves).
    log.info("large_blocks_mapped", applied=map_large_blocks())
    tools = server_tools(config)
    engines = load_engines(config, progress=progress)
    embedder = load_embedder(config)
    scheduler = Scheduler(
        engines,
        queue_limit=config.queue_limit,
        preempt=config.preempt,
        queue_timeout_s=config.queue_timeout_s,
        stream_window_s=config.stream_window_s,
    )
    from tether.engine.remote.chat import ChatSlot

    chat = engines[0].backend if isinstance(engines[0], ChatSlot) else None
    return create_app(
        config,
        scheduler,
        server_tools=tools,
        chat_backend=chat,
        embedder=embedder,
        log_sink=log_sink,
        heap_trim_s=TRIM_INTERVAL_S,
    )


class _Server(uvicorn.Server):
    """uvicorn, plus: the first SIGTERM/SIGINT cancels every queued and running generation at once.

    uvicorn then stops accepting, lets the streams end (each gets an error event saying the server
    is shutting down) and, after ``timeout_graceful_shutdown`` at the latest, cancels what is left.
    """

    def __init__(self, config: uvicorn.Config, scheduler: Scheduler) -> None:
        super().__init__(config)
        self.scheduler = scheduler
        self.loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets: list[socket.socket] | None = None) -> None:
        self.loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.loop is not None and not self.should_exit:
            log.info("shutdown_requested", signal=sig)
            self.loop.call_soon_threadsafe(self.scheduler.shutdown)
        super().handle_exit(sig, frame)


def bind(config: ServerConfig) -> socket.socket:
    """The listening socket, taken before a model loads: a port in use is said at once, not after a
    minute of loading."""
    try:
        infos = socket.getaddrinfo(config.host, config.port, type=socket.SOCK_STREAM)
    except socket.gaierror as exc:
        raise ConfigError(f"cannot listen on {config.host!r}: {exc.strerror}") from None
    family, kind, proto, _, address = infos[0]
    sock = socket.socket(family, kind, proto)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind(address)
    except OSError as exc:
        sock.close()
        raise ConfigError(
            f"cannot listen on {config.host}:{config.port}: {exc.strerror} "
            "(another server there? choose another with --port)"
        ) from None
    sock.set_inheritable(True)
    return sock


def run_server(app: FastAPI, config: ServerConfig, sock: socket.socket | None = None) -> None:
    """Serve ``app`` (on ``sock`` when it is already bound, see :func:`bind`)."""
    log.info("server_starting", host=config.host, port=config.port)
    uv = uvicorn.Config(
        app,
        host=config.host,
        port=config.port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=max(1, round(config.shutdown_grace_s)),
    )
    _Server(uv, app.state.tether.scheduler).run(sockets=[sock] if sock is not None else None)
