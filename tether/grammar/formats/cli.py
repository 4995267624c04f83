"""``tether formats`` sub-commands: list the tool-call formats, detect a model's format.

Mount with ``app.add_typer(formats_app, name="formats")``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from tether.errors import TetherError
from tether.grammar.formats import describe_formats, detect_format
from tether.grammar.formats.gguf_template import read_chat_template

__all__ = ["formats_app"]

formats_app = typer.Typer(
    help="Tool-call formats: list them, detect a model's.", no_args_is_help=True, rich_markup_mode=None
)


@formats_app.command("list")
def list_formats() -> None:
    """Every available format with a one-line description."""
    described = describe_formats()
    width = max(map(len, described), default=0)
    for name, description in described.items():
        typer.echo(f"{name.ljust(width)}  {description}")


@formats_app.command("detect")
def detect(
    model: Annotated[Path, typer.Argument(help="A GGUF model file.", metavar="MODEL.gguf")],
    show_template: Annotated[
        bool, typer.Option("--show-template", help="Also print the chat template.")
    ] = False,
) -> None:
    """The format tether would use for MODEL.gguf, read from its embedded chat template."""
    try:
        template = read_chat_template(model)
    except TetherError as exc:
        typer.echo(f"error: {exc.message}", err=True)
        raise typer.Exit(code=1) from exc
    name = detect_format(template)
    note = "" if template else " (no chat template in the file)"
    typer.echo(f"{name}{note}")
    if show_template and template:
        typer.echo(template)
