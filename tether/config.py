"""Configuration: pydantic-settings at the edge, frozen dataclasses inside.

``Settings`` reads CLI values and ``TETHER_*`` environment variables once; the
rest of the code only sees the frozen ``ServerConfig`` built from it.
"""

from __future__ import annotations

import ipaddress
import json
import os
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, NoDecode, SettingsConfigDict

from tether.engine.llama_options import CacheTypeName, LlamaOptions, check_mlx, parse_gpu_layers
from tether.errors import ConfigError
from tether.guardrails.presets import PRESETS, ConstrainMode
from tether.workflows.sessions import REDIS_URL_SCHEMES

__all__ = ["REDIS_URL_SCHEMES", "ServerConfig", "Settings", "is_loopback"]


@dataclass(frozen=True)
class ServerConfig:
    """Everything the app factory needs; immutable once the server starts."""

    model_path: str | None = None
    engine: Literal["auto", "llama", "mlx"] = "auto"
    model_aliases: tuple[str, ...] = ()
    host: str = "127.0.0.1"
    port: int = 8000
    api_key: str | None = None
    n_ctx: int = 8192
    slots: int = 1
    queue_limit: int = 16
    n_threads: int | None = None
    tool_format: str | None = None
    constrain: ConstrainMode | None = None  # None: the preset's own layer 0
    preset: str = "strict"
    max_body_bytes: int = 8 * 1024 * 1024
    default_temperature: float = 0.8
    default_max_tokens: int | None = None
    cors_origins: tuple[str, ...] = ("http://localhost", "http://127.0.0.1")
    work_dir: str | None = None
    server_tools: tuple[str, ...] = ()
    mcp_config: str | None = None
    permission: str = "plan"
    workflows: tuple[str, ...] = ()
    session_ttl_s: float = 3600.0
    max_sessions: int = 1024
    session_store: str = "memory"
    responses_store: int = 256
    compaction: bool = False
    tool_view_share: float = 0.25
    preempt: bool = False
    # auto: one batched llama.cpp context, for any --slots (docs/batching.md); off: a context per slot
    batching: Literal["auto", "on", "off"] = "auto"
    speculate: bool = True  # jump-forward over forced text and prompt-lookup drafts (batched engine)
    queue_timeout_s: float | None = 300.0
    # A stream's tokens gathered this long before they go out together, as one delta (0: each as it comes).
    stream_window_s: float = 0.025
    shutdown_grace_s: float = 5.0
    # GPU offload, flash attention, KV cache types, mmap, mlock (docs/gpu.md)
    llama_options: LlamaOptions = field(default_factory=LlamaOptions)
    # A running engine to forward generation to instead of loading a model (docs/backends.md).
    backend: str | None = None
    backend_kind: Literal["auto", "llama-server", "vllm", "ollama", "openai"] = "auto"
    backend_api_key: str | None = None
    backend_timeout_s: float = 600.0
    # The sentence-embedding model behind /v1/embeddings: a GGUF path; "auto": the bundled
    # all-MiniLM-L6-v2 that setup converts, when it is there; None: none (off).
    embedding_model: str | None = None
    # The prefix KV cache (docs/prefix-cache.md): RAM tier bytes (0: off), disk tier dir (None: off) and bytes.
    prefix_cache_ram_bytes: int = 1 << 30
    prefix_cache_dir: str | None = None
    prefix_cache_disk_bytes: int = 10 << 30


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


class Settings(BaseSettings):
    """Edge configuration; every field may come from a ``TETHER_<NAME>`` variable.

    Values given as keyword arguments (the CLI passes only the flags a user typed) win over the
    environment, which wins over the defaults. List fields read comma-separated text
    (``TETHER_SERVER_TOOLS=read_file,grep``) or JSON. ``tether.config_file`` adds a
    ``tether.toml`` source below the environment.
    """

    model_config = SettingsConfigDict(env_prefix="TETHER_", extra="ignore")

    model: str | None = Field(
        default=None,
        description="Path of a GGUF file; default: the bundled SmolLM2. With an openai or ollama --backend: "
        "the backend's model name",
    )
    engine: Literal["auto", "llama", "mlx"] = "auto"
    model_alias: Annotated[list[str], NoDecode] = Field(default_factory=list)
    host: str = "127.0.0.1"
    port: int = Field(default=8000, ge=0, le=65535)
    api_key: str | None = None
    ctx: int = Field(default=8192, ge=256)
    slots: int = Field(default=1, ge=1, le=64)
    queue_limit: int = Field(default=16, ge=0)
    threads: int | None = Field(default=None, ge=1)
    tool_format: str | None = None
    constrain: ConstrainMode | None = None
    preset: Literal["bare", "names", "resolve", "rescue", "full", "strict"] = "strict"
    max_body_mb: float = Field(default=8.0, gt=0)
    temperature: float = Field(default=0.8, ge=0, le=2)
    max_tokens: int | None = Field(default=None, ge=1)
    work_dir: str | None = None
    server_tools: Annotated[list[str], NoDecode] = Field(default_factory=list)
    mcp_config: str | None = Field(
        default=None, description="an mcpServers JSON file: its servers' tools run as server-side tools"
    )
    permission: str = "plan"
    workflow: Annotated[list[str], NoDecode] = Field(default_factory=list)
    session_ttl_s: float = Field(default=3600.0, gt=0)
    max_sessions: int = Field(default=1024, ge=1)
    session_store: str = Field(
        default="memory",
        description="where workflow sessions live: memory, or redis://host:port/db shared by replicas",
    )
    responses_store: int = Field(
        default=256, ge=0, description="responses kept for previous_response_id (0: none)"
    )
    compaction: bool = False
    tool_view_share: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="share of the window the offered tools may take in full; past it only the relevant "
        "ones are (0: always all)",
    )
    preempt: bool = False
    batching: Literal["auto", "on", "off"] = "auto"
    speculate: bool = True
    queue_timeout: float = Field(default=300.0, ge=0, description="seconds; 0 waits without limit")
    stream_window: float = Field(
        default=25.0,
        ge=0,
        le=1000,
        description="milliseconds a stream's tokens are gathered before they go out together (0: each as it comes)",
    )
    shutdown_grace: float = Field(default=5.0, ge=0)
    gpu_layers: int | Literal["all"] = Field(default=0, description="layers on the GPU: all, or N (0: CPU)")
    flash_attn: bool | None = None  # None: llama.cpp chooses
    cache_type_k: CacheTypeName = "f16"
    cache_type_v: CacheTypeName = "f16"
    mmap: bool = True
    mlock: bool = False
    backend: str | None = Field(
        default=None,
        description="URL of a running engine server (llama-server, vLLM, Ollama, OpenAI-compatible) to forward "
        "generation to (no model load)",
    )
    backend_kind: Literal["auto", "llama-server", "vllm", "ollama", "openai"] = Field(
        default="auto", description="what --backend is; auto asks the server"
    )
    backend_api_key: str | None = None
    backend_timeout: float = Field(default=600.0, gt=0, description="seconds a backend request may take")
    embedding_model: str = Field(
        default="auto",
        description="GGUF sentence-embedding model for /v1/embeddings, or off; auto: the bundled "
        "all-MiniLM-L6-v2 that setup converts, when present",
    )
    prefix_cache_ram_gb: float = Field(
        default=1.0, ge=0, description="GiB of RAM for cached prompt prefixes shared by the slots (0: off)"
    )
    prefix_cache_dir: str | None = Field(
        default=None,
        description="directory for the prefix cache's disk tier (created 0700); unset: no disk tier",
    )
    prefix_cache_gb: float = Field(default=10.0, gt=0, description="GiB the disk tier may hold")
    log_level: Literal["debug", "info", "warning", "error"] = "info"  # the CLI's, not the app's

    @field_validator("model_alias", "server_tools", "workflow", mode="before")
    @classmethod
    def _split_list(cls, value: Any) -> Any:
        if isinstance(value, str):
            text = value.strip()
            if text.startswith("["):
                return json.loads(text)
            return [part.strip() for part in text.split(",") if part.strip()]
        return value

    @field_validator("gpu_layers", mode="before")
    @classmethod
    def _gpu_layers(cls, value: Any) -> Any:
        if isinstance(value, bool) or not isinstance(value, int | str):
            return value  # pydantic says what it expected
        try:
            layers = parse_gpu_layers(value)
        except ConfigError as exc:
            raise ValueError(exc.message.removeprefix("--gpu-layers ")) from None
        return "all" if layers < 0 else layers

    @field_validator("cache_type_k", "cache_type_v", mode="before")
    @classmethod
    def _lower(cls, value: Any) -> Any:
        return value.strip().lower() if isinstance(value, str) else value

    @field_validator("session_store")
    @classmethod
    def _session_store(cls, value: str) -> str:
        if value != "memory" and not value.startswith(REDIS_URL_SCHEMES):
            raise ValueError("must be 'memory' or a Redis URL such as redis://localhost:6379/0")
        return value

    def to_config(self) -> ServerConfig:
        """Validate cross-field rules and freeze."""
        if self.server_tools and not self.work_dir:
            raise ConfigError("--server-tools needs --work-dir: the directory the tools may touch")
        if self.mcp_config and not self.work_dir:
            raise ConfigError("--mcp-config needs --work-dir: the directory its servers may write in")
        if not is_loopback(self.host) and not self.api_key:
            raise ConfigError(
                f"refusing to bind {self.host} without an API key: pass --api-key (or TETHER_API_KEY), "
                "or bind 127.0.0.1"
            )
        llama_options = LlamaOptions(
            gpu_layers=parse_gpu_layers(self.gpu_layers),
            flash_attn=self.flash_attn,
            cache_type_k=self.cache_type_k,
            cache_type_v=self.cache_type_v,
            mmap=self.mmap,
            mlock=self.mlock,
        )
        if self.engine == "mlx":
            check_mlx(llama_options)  # --engine auto picking MLX is checked where it picks (load_engines)
        if self.backend:
            self._check_backend(llama_options)
        return ServerConfig(
            model_path=self.model,
            engine=self.engine,
            model_aliases=tuple(self.model_alias),
            host=self.host,
            port=self.port,
            api_key=self.api_key or None,
            n_ctx=self.ctx,
            slots=self.slots,
            queue_limit=self.queue_limit,
            n_threads=self.threads,
            tool_format=self.tool_format,
            constrain=self.constrain or PRESETS[self.preset].constrain,
            preset=self.preset,
            max_body_bytes=int(self.max_body_mb * 1024 * 1024),
            default_temperature=self.temperature,
            default_max_tokens=self.max_tokens,
            work_dir=self.work_dir,
            server_tools=tuple(self.server_tools),
            mcp_config=self.mcp_config or None,
            permission=self.permission,
            workflows=tuple(self.workflow),
            session_ttl_s=self.session_ttl_s,
            max_sessions=self.max_sessions,
            session_store=self.session_store,
            responses_store=self.responses_store,
            compaction=self.compaction,
            tool_view_share=self.tool_view_share,
            preempt=self.preempt,
            batching=self.batching,
            speculate=self.speculate,
            queue_timeout_s=self.queue_timeout or None,
            stream_window_s=self.stream_window / 1000,
            shutdown_grace_s=self.shutdown_grace,
            llama_options=llama_options,
            backend=self.backend.rstrip("/") if self.backend else None,
            backend_kind=self.backend_kind,
            backend_api_key=self.backend_api_key or None,
            backend_timeout_s=self.backend_timeout,
            embedding_model=None
            if self.embedding_model.strip().lower() in ("off", "")
            else self.embedding_model.strip(),
            prefix_cache_ram_bytes=int(self.prefix_cache_ram_gb * (1 << 30)),
            prefix_cache_dir=os.path.expanduser(self.prefix_cache_dir) if self.prefix_cache_dir else None,
            prefix_cache_disk_bytes=int(self.prefix_cache_gb * (1 << 30)),
        )

    def _check_backend(self, llama_options: LlamaOptions) -> None:
        """``--backend`` replaces the local model: options that only make sense for one are refused."""
        assert self.backend is not None
        if not self.backend.startswith(("http://", "https://")):
            raise ConfigError(f"--backend must be an http:// or https:// URL, got {self.backend!r}")
        clashes = [
            name
            for name, given in (
                # With a chat API (openai, ollama; auto decides later) --model names the backend's model.
                ("--model", self.model is not None and self.backend_kind in ("llama-server", "vllm")),
                ("--engine", self.engine != "auto"),
                ("--preempt", self.preempt),
                ("--batching", self.batching != "auto"),
                ("--threads", self.threads is not None),
                ("GPU/cache options", llama_options != LlamaOptions()),
                ("--prefix-cache-dir", self.prefix_cache_dir is not None),
            )
            if given
        ]
        if clashes:
            raise ConfigError(
                f"--backend forwards generation to {self.backend}: {', '.join(clashes)} configure a local "
                "model and do not apply (set them on the backend server instead)"
            )
