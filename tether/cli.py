"""The ``tether`` command line: ``serve``, ``formats``."""

from __future__ import annotations

import sys
from typing import Annotated

import typer

from tether.errors import TetherError

__all__ = ["app", "main"]

app = typer.Typer(
    name="tether",
    help="Serve small local models with reliable tool calling (OpenAI-compatible).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


def _fail(message: str) -> None:
    typer.echo(f"tether: error: {message}", err=True)
    raise typer.Exit(code=2)


@app.command()
def serve(
    model: Annotated[
        str | None, typer.Option(help="GGUF file to serve. Default: the bundled SmolLM2-135M-Instruct Q4_1.")
    ] = None,
    engine: Annotated[
        str, typer.Option(help="auto | llama | mlx (auto: an MLX model directory selects mlx).")
    ] = "auto",
    host: Annotated[str, typer.Option(help="Address to bind. Non-loopback needs --api-key.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    api_key: Annotated[
        str | None, typer.Option(envvar="TETHER_API_KEY", help="Require 'Authorization: Bearer KEY'.")
    ] = None,
    ctx: Annotated[int, typer.Option(help="Context window in tokens.")] = 8192,
    slots: Annotated[int, typer.Option(help="Concurrent generations (one model context each).")] = 1,
    queue_limit: Annotated[int, typer.Option(help="Requests allowed to wait for a slot before 429.")] = 16,
    threads: Annotated[int | None, typer.Option(help="CPU threads (default: all cores).")] = None,
    tool_format: Annotated[
        str | None, typer.Option(help="Tool-call format (see `tether formats list`); default: detected.")
    ] = None,
    constrain: Annotated[
        str | None, typer.Option(help="Layer-0 grammar: off | names | strict (default: from --preset).")
    ] = None,
    preset: Annotated[
        str, typer.Option(help="Guardrails: bare | names | resolve | rescue | full | strict.")
    ] = "full",
    model_alias: Annotated[list[str] | None, typer.Option(help="Extra model names to answer to.")] = None,
    work_dir: Annotated[
        str | None, typer.Option(help="Work dir for server-side tools (the only place they may write).")
    ] = None,
    server_tools: Annotated[
        str | None,
        typer.Option(help="Built-in tools the proxy runs itself, comma-separated, or 'all' (sandboxed)."),
    ] = None,
    permission: Annotated[
        str, typer.Option(help="Server-side tool permissions: plan | ask | accept-edits | auto.")
    ] = "plan",
    workflow: Annotated[
        list[str] | None,
        typer.Option(help="Workflow file (YAML/TOML) clients can attach to a session; repeatable."),
    ] = None,
    compaction: Annotated[
        bool, typer.Option(help="Compact conversations that do not fit the window (off: the client owns it).")
    ] = False,
    preempt: Annotated[bool, typer.Option(help="Let higher-priority requests preempt running ones.")] = False,
    log_level: Annotated[str, typer.Option(help="debug | info | warning | error")] = "info",
) -> None:
    """Start the OpenAI-compatible server on an embedded llama.cpp engine."""
    from pydantic import ValidationError

    from tether.config import Settings
    from tether.logging import configure_logging

    configure_logging(log_level)
    try:
        settings = Settings(
            model=model,
            engine=engine,  # type: ignore[arg-type]
            host=host,
            port=port,
            api_key=api_key,
            ctx=ctx,
            slots=slots,
            queue_limit=queue_limit,
            threads=threads,
            tool_format=tool_format,
            constrain=constrain,  # type: ignore[arg-type]
            preset=preset,  # type: ignore[arg-type]
            model_alias=model_alias or [],
            work_dir=work_dir,
            server_tools=[t.strip() for t in (server_tools or "").split(",") if t.strip()],
            permission=permission,
            workflow=workflow or [],
            compaction=compaction,
            preempt=preempt,
        )
        config = settings.to_config()
    except ValidationError as exc:
        first = exc.errors()[0]
        _fail(f"--{'-'.join(str(p) for p in first['loc']).replace('_', '-')}: {first['msg']}")
        return
    except TetherError as exc:
        _fail(exc.message)
        return
    try:
        from tether.server import build_app, run_server

        application = build_app(config, progress=sys.stderr.isatty())
    except TetherError as exc:
        _fail(exc.message)
        return
    run_server(application, config)


convert_app = typer.Typer(help="Convert models between engines.", no_args_is_help=True)
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
    from tether.evals.cli import eval_app
    from tether.grammar.formats.cli import formats_app

    app.add_typer(formats_app, name="formats", help="List tool-call formats or detect one from a GGUF.")
    app.add_typer(eval_app, name="eval")


_register_subcommands()


def main() -> None:
    app()


if __name__ == "__main__":  # pragma: no cover
    main()
