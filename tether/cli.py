"""The ``tether`` command line: ``serve``, ``formats``."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.cli_help import SectionedCommand
from tether.errors import TetherError

__all__ = ["app", "main"]

app = typer.Typer(
    rich_markup_mode=None,  # plain help: readable at 80 columns, no "<bool>" after flags
    name="tether",
    help="Serve small local models with reliable tool calling (OpenAI-compatible).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _show_version(value: bool) -> None:
    if value:
        from importlib.metadata import version

        import tether

        engines = []
        for package in ("llama-cpp-python", "mlx-lm"):
            try:
                engines.append(f"{package} {version(package)}")
            except Exception:  # not installed
                continue
        typer.echo(f"tether {tether.__version__}" + (f" ({', '.join(engines)})" if engines else ""))
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option("--version", callback=_show_version, is_eager=True, help="Print the version and exit."),
    ] = False,
) -> None:
    """Serve small local models with reliable tool calling (OpenAI-compatible)."""


def _fail(message: str) -> None:
    typer.echo(f"tether: error: {message}", err=True)
    raise typer.Exit(code=2)


def _field_default(name: str) -> str:
    """The default of the ``Settings`` field ``name`` as ``--help`` shows it."""
    from tether.config import Settings

    field = Settings.model_fields[name]
    value = field.get_default(call_default_factory=True)
    shown = ",".join(value) if isinstance(value, list) else value
    return "none" if shown in (None, []) else str(shown)


def _setting(
    name: str,
    help: str,
    *,
    default: str | None = None,
    show_default: bool = True,
    switch: bool = False,
    metavar: str | None = None,
) -> Any:
    """The ``serve`` option of the ``Settings`` field ``name``. Its help ends with
    ``(default: D; env TETHER_NAME)``: D is ``default`` where the field's own default would say
    little, else the field's; ``show_default=False`` leaves it out. ``switch``: ``--name/--no-name``."""
    env = f"env TETHER_{name.upper()}"
    note = f"(default: {default or _field_default(name)}; {env})" if show_default else f"({env})"
    flag = name.replace("_", "-")
    decls = (f"--{flag}/--no-{flag}",) if switch else ()
    return typer.Option(*decls, help=f"{help} {note}", metavar=metavar)


@app.command(cls=SectionedCommand, context_settings={"help_option_names": ["-h", "--help"]})
def serve(
    model: Annotated[
        str | None,
        typer.Option(
            help="GGUF file or MLX directory to serve (default: the bundled SmolLM2-135M-Instruct Q4_1); "
            "with an openai or ollama --backend, the model to ask it for."
        ),
    ] = None,
    engine: Annotated[
        str | None, _setting("engine", "auto | llama | mlx (auto: a model directory selects mlx).")
    ] = None,
    host: Annotated[str | None, _setting("host", "Address to bind; non-loopback needs --api-key.")] = None,
    port: Annotated[int | None, _setting("port", "Port to listen on.")] = None,
    api_key: Annotated[
        str | None, _setting("api_key", "Require 'Authorization: Bearer KEY'.", show_default=False)
    ] = None,
    ctx: Annotated[int | None, _setting("ctx", "Context window in tokens.")] = None,
    slots: Annotated[
        int | None,
        _setting(
            "slots", "Concurrent generations: sequences batched in one llama.cpp context (see --batching)."
        ),
    ] = None,
    queue_limit: Annotated[
        int | None, _setting("queue_limit", "Requests allowed to wait for a slot before 429.")
    ] = None,
    queue_timeout: Annotated[
        float | None,
        _setting(
            "queue_timeout", "Seconds a request may wait for a slot before 503 + Retry-After (0: no limit)."
        ),
    ] = None,
    stream_window: Annotated[
        float | None,
        _setting(
            "stream_window",
            "Milliseconds a stream's tokens are gathered before they go out together, as one delta: "
            "fewer wake-ups and writes per token; the first token and the end are never held (0: each as it comes).",
        ),
    ] = None,
    shutdown_grace: Annotated[
        float | None,
        _setting(
            "shutdown_grace",
            "Seconds SIGTERM/SIGINT waits for connections to close after cancelling generations.",
        ),
    ] = None,
    threads: Annotated[int | None, _setting("threads", "CPU threads.", default="all cores")] = None,
    gpu_layers: Annotated[
        str | None,
        _setting(
            "gpu_layers",
            "Layers llama.cpp offloads to the GPU: 'all', or N (0: CPU only); needs a GPU build, "
            "see docs/gpu.md. Not with --engine mlx.",
            metavar="all|N",
        ),
    ] = None,
    flash_attn: Annotated[
        bool | None,
        _setting(
            "flash_attn",
            "Force flash attention on (needed for a quantized --cache-type-v) or off; unset, llama.cpp "
            "chooses (on CPU: on; with --batching off: off).",
            switch=True,
        ),
    ] = None,
    cache_type_k: Annotated[
        str | None,
        _setting(
            "cache_type_k",
            "KV cache type for K: f16 | q8_0 | q4_0 | q4_1 | q5_0 | q5_1 | bf16 | f32 (q8_0 halves the K cache).",
        ),
    ] = None,
    cache_type_v: Annotated[
        str | None,
        _setting(
            "cache_type_v", "KV cache type for V, as --cache-type-k; a quantized one needs --flash-attn."
        ),
    ] = None,
    prefix_cache_ram_gb: Annotated[
        float | None,
        _setting(
            "prefix_cache_ram_gb", "GiB of RAM for cached prompt prefixes, shared by the slots (0: off)."
        ),
    ] = None,
    prefix_cache_dir: Annotated[
        str | None,
        _setting(
            "prefix_cache_dir",
            "Keep cached prefixes on disk here too, so long prompts survive restarts (created 0700).",
            default="none (RAM only)",
        ),
    ] = None,
    prefix_cache_gb: Annotated[
        float | None,
        _setting("prefix_cache_gb", "GiB the disk tier may hold (least recently used go first)."),
    ] = None,
    mmap: Annotated[
        bool | None, _setting("mmap", "Map the model file instead of reading it into memory.", switch=True)
    ] = None,
    mlock: Annotated[
        bool | None, _setting("mlock", "Lock the model in RAM so the OS cannot swap it out.", switch=True)
    ] = None,
    tool_format: Annotated[
        str | None,
        _setting("tool_format", "Tool-call format (see `tether formats list`).", default="detected"),
    ] = None,
    constrain: Annotated[
        str | None, _setting("constrain", "Layer-0 grammar: off | names | strict.", default="from --preset")
    ] = None,
    preset: Annotated[
        str | None, _setting("preset", "Guardrails: bare | names | resolve | rescue | full | strict.")
    ] = None,
    model_alias: Annotated[
        list[str] | None,
        _setting("model_alias", "Extra model name to answer to; repeatable.", show_default=False),
    ] = None,
    work_dir: Annotated[
        str | None,
        _setting(
            "work_dir", "Work dir for server-side tools, the only place they may write.", show_default=False
        ),
    ] = None,
    server_tools: Annotated[
        str | None,
        _setting(
            "server_tools",
            "Built-in tools the proxy runs itself (sandboxed), comma-separated, or 'all'.",
            show_default=False,
        ),
    ] = None,
    mcp_config: Annotated[
        str | None,
        _setting(
            "mcp_config",
            "An mcpServers JSON file; its servers' tools run server-side, in the sandbox (docs/mcp.md).",
            show_default=False,
        ),
    ] = None,
    permission: Annotated[
        str | None, _setting("permission", "Server-side tool permissions: plan | ask | accept-edits | auto.")
    ] = None,
    workflow: Annotated[
        list[str] | None,
        _setting(
            "workflow",
            "Workflow file (YAML/TOML) clients can attach to a session; repeatable.",
            show_default=False,
        ),
    ] = None,
    session_store: Annotated[
        str | None,
        _setting(
            "session_store",
            "Where workflow sessions live: memory, or redis://host:port/db shared by replicas (docs/deploy.md).",
        ),
    ] = None,
    compaction: Annotated[
        bool | None,
        _setting(
            "compaction",
            "Compact conversations that do not fit the window (off: the client owns it).",
            switch=True,
        ),
    ] = None,
    tool_view_share: Annotated[
        float | None,
        _setting(
            "tool_view_share",
            "Share of the window the tools may take in full; past it only the relevant ones are "
            "(0: always all; docs/mcp.md).",
        ),
    ] = None,
    preempt: Annotated[
        bool | None, _setting("preempt", "Let higher-priority requests preempt running ones.", switch=True)
    ] = None,
    batching: Annotated[
        str | None,
        _setting(
            "batching",
            "auto | on | off: advance all slots' requests together in one llama.cpp context "
            "(auto: on for llama.cpp, even with one slot, for its own decode thread, jump-forward and "
            "drafts; off: one context per slot).",
        ),
    ] = None,
    speculate: Annotated[
        bool | None,
        _setting(
            "speculate",
            "Batched engine: append text the tool-call grammar forces without sampling it, and verify "
            "drafts copied from the conversation (exact under greedy).",
            switch=True,
        ),
    ] = None,
    backend: Annotated[
        str | None,
        _setting(
            "backend",
            "URL of a running llama-server, vLLM, Ollama or OpenAI-compatible server to forward "
            "generation to, instead of loading a model; tether keeps its whole pipeline, with layer 0 as "
            "a grammar where the server takes one and the post-hoc guard on chat-only APIs "
            "(docs/backends.md).",
            show_default=False,
        ),
    ] = None,
    backend_kind: Annotated[
        str | None,
        _setting(
            "backend_kind",
            "What --backend is: auto | llama-server | vllm | ollama | openai (auto asks the server).",
            show_default=False,
        ),
    ] = None,
    backend_api_key: Annotated[
        str | None,
        _setting("backend_api_key", "Bearer key the backend server requires.", show_default=False),
    ] = None,
    embedding_model: Annotated[
        str | None,
        _setting(
            "embedding_model",
            "GGUF sentence-embedding model behind /v1/embeddings, or off (docs/protocols.md); auto: the "
            "bundled all-MiniLM-L6-v2 that scripts/setup.sh converts, when present.",
            metavar="PATH|off",
        ),
    ] = None,
    log_level: Annotated[str | None, _setting("log_level", "debug | info | warning | error.")] = None,
    max_tokens: Annotated[
        int | None,
        _setting(
            "max_tokens", "Output cap for a request that sets none.", default="up to the window", metavar="N"
        ),
    ] = None,
    temperature: Annotated[
        float | None, _setting("temperature", "Sampling temperature for a request that sets none.")
    ] = None,
    max_body_mb: Annotated[
        float | None, _setting("max_body_mb", "Largest request body (MiB), else 413.")
    ] = None,
    backend_timeout: Annotated[
        float | None, _setting("backend_timeout", "Seconds one --backend request may take.")
    ] = None,
    session_ttl_s: Annotated[
        float | None, _setting("session_ttl_s", "Seconds an idle workflow session is kept.")
    ] = None,
    max_sessions: Annotated[
        int | None, _setting("max_sessions", "Workflow sessions kept at once (the oldest goes first).")
    ] = None,
    responses_store: Annotated[
        int | None,
        _setting("responses_store", "Responses kept for previous_response_id (/v1/responses), 0: none."),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config",
            help="TOML file of serve options (see docs/configuration.md). "
            "(default: ./tether.toml, else $XDG_CONFIG_HOME/tether/tether.toml; env TETHER_CONFIG)",
            envvar="TETHER_CONFIG",
            show_envvar=False,
        ),
    ] = None,
    profile: Annotated[
        str | None,
        typer.Option(
            help="Profile (a profiles.NAME table) of the config file to apply over its top level. "
            "(env TETHER_PROFILE)",
            envvar="TETHER_PROFILE",
            show_envvar=False,
        ),
    ] = None,
) -> None:
    """Start the OpenAI- and Anthropic-compatible server on an embedded engine (or in front of --backend).

    Every option may also come from a TETHER_<NAME> environment variable (TETHER_CTX=4096)
    or a tether.toml file; the command line wins over the environment, which wins over the file.
    """
    from tether.config_file import resolve
    from tether.logging import configure_logging

    given: dict[str, Any] = {
        "model": model,
        "engine": engine,
        "host": host,
        "port": port,
        "api_key": api_key,
        "ctx": ctx,
        "slots": slots,
        "queue_limit": queue_limit,
        "queue_timeout": queue_timeout,
        "stream_window": stream_window,
        "shutdown_grace": shutdown_grace,
        "threads": threads,
        "gpu_layers": gpu_layers,
        "flash_attn": flash_attn,
        "cache_type_k": cache_type_k,
        "cache_type_v": cache_type_v,
        "mmap": mmap,
        "prefix_cache_ram_gb": prefix_cache_ram_gb,
        "prefix_cache_dir": prefix_cache_dir,
        "prefix_cache_gb": prefix_cache_gb,
        "mlock": mlock,
        "tool_format": tool_format,
        "constrain": constrain,
        "preset": preset,
        "model_alias": model_alias or None,
        "work_dir": work_dir,
        "server_tools": server_tools,
        "mcp_config": mcp_config,
        "permission": permission,
        "workflow": workflow or None,
        "session_store": session_store,
        "compaction": compaction,
        "tool_view_share": tool_view_share,
        "preempt": preempt,
        "batching": batching,
        "speculate": speculate,
        "backend": backend,
        "backend_kind": backend_kind,
        "backend_api_key": backend_api_key,
        "embedding_model": embedding_model,
        "log_level": log_level,
        "max_tokens": max_tokens,
        "temperature": temperature,
        "max_body_mb": max_body_mb,
        "backend_timeout": backend_timeout,
        "session_ttl_s": session_ttl_s,
        "max_sessions": max_sessions,
        "responses_store": responses_store,
    }
    try:
        settings = resolve(given, config_file=config_file, profile=profile).settings
        config = settings.to_config()
    except TetherError as exc:
        _fail(exc.message)
        return
    sink = configure_logging(settings.log_level)
    try:
        from tether.server import bind, build_app, run_server

        listening = bind(config)  # before the model loads: a port in use fails at once
        application = build_app(config, progress=sys.stderr.isatty(), log_sink=sink)
    except TetherError as exc:
        _fail(exc.message)
        return
    run_server(application, config, listening)


convert_app = typer.Typer(help="Convert models between engines.", no_args_is_help=True, rich_markup_mode=None)
app.add_typer(convert_app, name="convert")


@convert_app.command("gguf-to-mlx")
def gguf_to_mlx_command(
    gguf: Annotated[str | None, typer.Argument(help="GGUF file (default: the bundled SmolLM2).")] = None,
    out: Annotated[str | None, typer.Argument(help="Output directory (default: tether's cache).")] = None,
    quantize: Annotated[
        bool, typer.Option(help="Repack Q4_1/Q4_0/Q8_0 blocks into MLX's quantized format.")
    ] = False,
) -> None:
    """Convert a llama-architecture GGUF into an MLX model directory (needs `pip install 'tether[mlx]'`)."""
    from pathlib import Path

    from tether.engine.locate import bundled_model_path

    try:
        from tether.engine.mlx import cached_gguf_to_mlx, gguf_to_mlx

        source = Path(gguf) if gguf else bundled_model_path()
        target = (
            gguf_to_mlx(source, Path(out), quantize=quantize)
            if out
            else cached_gguf_to_mlx(source, quantize=quantize)
        )
    except ImportError as exc:
        _fail(f"the MLX converter needs the mlx extra: pip install 'tether[mlx]' ({exc})")
        return
    except TetherError as exc:
        _fail(exc.message)
        return
    typer.echo(str(target))


def _register_subcommands() -> None:
    from tether.config_cli import make_config_app
    from tether.evals.cli import eval_app
    from tether.grammar.formats.cli import formats_app
    from tether.launch.cli import launch_command

    app.command("launch", context_settings={"help_option_names": ["-h", "--help"]})(launch_command)
    app.add_typer(formats_app, name="formats", help="List tool-call formats or detect one from a GGUF.")
    app.add_typer(eval_app, name="eval")
    app.add_typer(make_config_app(serve), name="config", help="Show the effective serve configuration.")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
