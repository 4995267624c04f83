"""``tether config show``: the configuration ``tether serve`` would run with, and where each value came from.

``show`` takes exactly ``serve``'s options (its signature is copied from the ``serve`` command,
so the two cannot drift) plus ``--json``. Mount with ``app.add_typer(make_config_app(serve), name="config")``.
"""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any

import typer

from tether.errors import TetherError

__all__ = ["make_config_app"]

_SECRETS = frozenset({"api_key"})


def make_config_app(serve: Callable[..., None]) -> typer.Typer:
    config_app = typer.Typer(
        help="Inspect the serve configuration.", no_args_is_help=True, rich_markup_mode=None
    )

    def show(**params: Any) -> None:
        """Print the effective `serve` configuration and each value's source (cli, env, file, default).

        Takes the same options as `tether serve`, which it checks the same way, without starting it.
        """
        from tether.config_file import resolve

        as_json = bool(params.pop("json_output"))
        config_file: Path | None = params.pop("config_file", None)
        profile: str | None = params.pop("profile", None)
        try:
            resolved = resolve(params, config_file=config_file, profile=profile)
            resolved.settings.to_config()
        except TetherError as exc:
            typer.echo(f"tether: error: {exc.message}", err=True)
            raise typer.Exit(code=2) from exc
        values = resolved.settings.model_dump(mode="json")
        rows = {
            name: {"value": "***" if name in _SECRETS and values[name] else values[name], "source": source}
            for name, source in resolved.sources.items()
        }
        path = str(resolved.path) if resolved.path else None
        if as_json:
            payload = {"config_file": path, "profile": resolved.profile, "options": rows}
            typer.echo(json.dumps(payload, indent=2))
            return
        typer.echo(f"config file: {path or 'none found'}" + (f" (profile {profile})" if profile else ""))
        table = [("option", "value", "source")] + [
            (name, _text(_effective(name, row["value"], values)), str(row["source"]))
            for name, row in rows.items()
        ]
        widths = [max(len(line[i]) for line in table) for i in range(2)]
        for name, value, source in table:
            typer.echo(f"{name.ljust(widths[0])}  {value.ljust(widths[1])}  {source}")

    signature = inspect.signature(serve, eval_str=True)
    json_option = inspect.Parameter(
        "json_output",
        inspect.Parameter.KEYWORD_ONLY,
        default=False,
        annotation=Annotated[bool, typer.Option("--json", help="Print JSON instead of a table.")],
    )
    show.__signature__ = signature.replace(  # type: ignore[attr-defined]
        parameters=[*signature.parameters.values(), json_option]
    )
    config_app.command("show", context_settings={"help_option_names": ["-h", "--help"]})(show)
    return config_app


def _effective(name: str, value: Any, values: dict[str, Any]) -> Any:
    """What an unset option means when the server runs: the bundled model, every core, the window."""
    if value is not None:
        return value
    if name == "model" and not values.get("backend"):
        from tether.engine.locate import bundled_model_path

        try:
            return f"{bundled_model_path()} (bundled)"
        except TetherError:
            return value
    if name == "threads":
        return f"{os.cpu_count() or 1} (all cores)"
    if name == "max_tokens":
        return "up to the window"
    return value


def _text(value: Any) -> str:
    if value is None or value == []:
        return "none"
    if isinstance(value, list):
        return ",".join(map(str, value))
    if isinstance(value, bool):
        return str(value).lower()
    return str(value)
