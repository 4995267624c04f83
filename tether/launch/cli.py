"""The ``tether launch`` command (registered on the main app in ``tether.cli``)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tether.errors import TetherError

__all__ = ["launch_command"]


def launch_command(
    client: Annotated[str, typer.Argument(help="opencode | cn | aider | claude")],
    client_args: Annotated[
        list[str] | None, typer.Argument(help="Arguments for the client, after `--`.", show_default=False)
    ] = None,
    host: Annotated[str, typer.Option(envvar="TETHER_HOST", help="Server address.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(envvar="TETHER_PORT", help="Server port.")] = 8000,
    model: Annotated[
        str | None,
        typer.Option(envvar="TETHER_MODEL", help="Model for a server launch starts (default: bundled)."),
    ] = None,
    ctx: Annotated[
        int | None, typer.Option(envvar="TETHER_CTX", help="Context window for a server launch starts.")
    ] = None,
    api_key: Annotated[
        str | None,
        typer.Option(envvar="TETHER_API_KEY", help="The server's API key, also given to the client."),
    ] = None,
    config_path: Annotated[
        Path | None, typer.Option(help="The client config file to merge into (default: the client's own).")
    ] = None,
    dry_run: Annotated[
        bool,
        typer.Option(
            "--dry-run", help="Print the merged config (stdout) and its diff; write and start nothing."
        ),
    ] = False,
    no_start: Annotated[
        bool, typer.Option("--no-start", help="Only reuse a running server; never start one.")
    ] = False,
    server_command: Annotated[
        str | None,
        typer.Option(help="Start this instead of `tether serve` ({host} and {port} are filled in)."),
    ] = None,
    mcp_config: Annotated[
        Path | None,
        typer.Option(help="An mcpServers JSON file, written into the client's own MCP config (not aider's)."),
    ] = None,
) -> None:
    """Start (or reuse) a tether server, point a coding client's config at it, and run the client.

    The client's config is merged, not replaced: other keys stay, the old file is backed up (NAME.YYYYmmdd-HHMMSS.bak) and the diff is shown. A server launch started stops with the client.

    Example: tether launch opencode -- run "Create hello.txt"
    """
    from tether.launch.runner import LaunchOptions, launch

    options = LaunchOptions(
        client=client,
        host=host,
        port=port,
        model=model,
        ctx=ctx,
        api_key=api_key,
        config_path=config_path,
        dry_run=dry_run,
        no_start=no_start,
        server_command=server_command,
        client_args=tuple(client_args or ()),
        mcp_config=mcp_config,
    )
    try:
        code = launch(options, out=typer.echo, say=lambda text: typer.echo(text, err=True))
    except TetherError as exc:
        typer.echo(f"tether launch: error: {exc.message}", err=True)
        raise typer.Exit(code=2) from None
    raise typer.Exit(code=code)
