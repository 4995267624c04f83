"""``tether.toml``: the config file for ``tether serve``, read as one more pydantic-settings source.

Precedence, highest first: command line > ``TETHER_*`` environment > file (a selected
``[profiles.NAME]`` table over the file's top-level keys) > ``Settings`` defaults. The file is
``--config PATH``, else ``./tether.toml``, else ``$XDG_CONFIG_HOME/tether/tether.toml``
(``~/.config/tether/tether.toml``). Keys are the ``serve`` option names (``queue_limit``; the dashed
``queue-limit`` works too). Validation stays in ``Settings``; this module only finds, reads and
checks the file's keys, and records where each value came from.
"""

from __future__ import annotations

import difflib
import json
import os
import tomllib
import types
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

from pydantic import ValidationError
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from tether.config import Settings
from tether.errors import ConfigError

__all__ = [
    "FILE_NAME",
    "FileLayer",
    "Resolved",
    "candidate_paths",
    "find_config_file",
    "read_layer",
    "resolve",
]

FILE_NAME = "tether.toml"
# Relative paths in a file mean relative to that file, not to wherever the server is started.
_PATH_KEYS = ("model", "work_dir", "workflow", "mcp_config")


@dataclass(frozen=True)
class FileLayer:
    """The values one file contributes, with the origin (``file:PATH`` or ``file:PATH[profile]``) of each."""

    path: Path
    profile: str | None
    values: Mapping[str, Any]
    origins: Mapping[str, str]


@dataclass(frozen=True)
class Resolved:
    """Validated settings and, per option, ``cli`` / ``env`` / ``file:…`` / ``default``."""

    settings: Settings
    sources: Mapping[str, str]
    path: Path | None
    profile: str | None


def candidate_paths() -> tuple[Path, ...]:
    """Where a file is looked for when ``--config`` is not given, in order."""
    xdg = os.environ.get("XDG_CONFIG_HOME", "")
    if xdg and Path(xdg).is_absolute():
        user_dir: Path | None = Path(xdg)
    else:
        try:
            user_dir = Path.home() / ".config"
        except RuntimeError:  # no home directory to speak of
            user_dir = None
    found = [Path.cwd() / FILE_NAME]
    if user_dir is not None:
        found.append(user_dir / "tether" / FILE_NAME)
    return tuple(found)


def find_config_file(explicit: Path | None) -> Path | None:
    if explicit is not None:
        if not explicit.is_file():
            raise ConfigError(f"--config {explicit}: no such file")
        return explicit
    return next((path for path in candidate_paths() if path.is_file()), None)


def read_layer(path: Path, profile: str | None) -> FileLayer:
    """Parse ``path``, check every key (profiles included), and merge the selected profile over the top level."""
    try:
        with path.open("rb") as handle:
            data = tomllib.load(handle)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}") from exc
    except OSError as exc:
        raise ConfigError(f"{path}: cannot read: {exc.strerror or exc}") from exc
    profiles = data.pop("profiles", {})
    if not isinstance(profiles, dict) or not all(isinstance(table, dict) for table in profiles.values()):
        raise ConfigError(f"{path}: 'profiles' must hold tables, one per profile: [profiles.NAME]")
    mcp = _mcp_table(data.pop("mcp", None), path)
    top = _checked(data, path, "")
    if mcp is not None:
        if "mcp_config" in top:
            raise ConfigError(f"{path}: give the MCP servers once: mcp_config or an [mcp] table")
        top["mcp_config"] = mcp
    tables = {name: _checked(table, path, f" in [profiles.{name}]") for name, table in profiles.items()}
    label = f"file:{path}"
    values, origins = dict(top), dict.fromkeys(top, label)
    if profile is not None:
        if profile not in tables:
            available = ", ".join(sorted(tables)) or "none (the file has no [profiles.NAME] tables)"
            raise ConfigError(f"{path}: unknown profile {profile!r}; available: {available}")
        values.update(tables[profile])
        origins.update(dict.fromkeys(tables[profile], f"{label}[{profile}]"))
    return FileLayer(path, profile, _relative_to(values, path.parent), origins)


def _mcp_table(table: Any, path: Path) -> str | None:
    """``[mcp]``: ``config = "FILE"``, or the servers themselves in ``[mcp.servers.NAME]`` tables
    (kept as the JSON text ``mcp_config`` also takes)."""
    if table is None:
        return None
    servers = table.get("servers", table.get("mcpServers")) if isinstance(table, dict) else None
    file = table.get("config") if isinstance(table, dict) else None
    if (
        not isinstance(table, dict)
        or set(table) - {"config", "servers", "mcpServers"}
        or ((servers is None) == (file is None))
    ):
        raise ConfigError(
            f'{path}: [mcp] holds either config = "mcp.json" or [mcp.servers.NAME] tables, one of the two'
        )
    if file is not None:
        if not isinstance(file, str) or not file:
            raise ConfigError(f"{path}: [mcp] config must be the path of an mcpServers JSON file")
        return file
    return json.dumps({"mcpServers": servers})


def resolve(
    cli: Mapping[str, Any], *, config_file: Path | None = None, profile: str | None = None
) -> Resolved:
    """Settings from the command line (only what the user typed), the environment, the file, the defaults.

    Raises ``ConfigError`` with a one-line message naming the key and where its bad value came from.
    """
    given = {k: v for k, v in cli.items() if k in Settings.model_fields and v is not None and v != []}
    path = find_config_file(config_file)
    if path is None and profile is not None:
        looked = ", ".join(str(p) for p in candidate_paths())
        raise ConfigError(f"--profile {profile}: no config file found (looked for {looked}; pass --config)")
    layer = read_layer(path, profile) if path is not None else None
    env = set(EnvSettingsSource(Settings)())
    sources: dict[str, str] = {}
    for name in Settings.model_fields:
        if name in given:
            sources[name] = "cli"
        elif name in env:
            sources[name] = "env"
        elif layer is not None and name in layer.origins:
            sources[name] = layer.origins[name]
        else:
            sources[name] = "default"
    settings_cls = _with_file(dict(layer.values)) if layer is not None else Settings
    try:
        settings = settings_cls(**given)
    except ValidationError as exc:
        raise ConfigError(_describe(exc, sources)) from exc
    return Resolved(settings, sources, path, profile)


def _checked(table: dict[str, Any], path: Path, where: str) -> dict[str, Any]:
    """Snake-case the keys and refuse unknown or doubled ones, naming the file and a close match."""
    known = list(Settings.model_fields)
    out: dict[str, Any] = {}
    for key, value in table.items():
        name = key.replace("-", "_")
        if name not in Settings.model_fields:
            close = difflib.get_close_matches(name, known, n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else f"; known keys: {', '.join(known)}"
            if isinstance(value, dict) and not where and not close:
                hint = f"; profiles go in [profiles.{key}]{hint}"
            raise ConfigError(f"{path}: unknown key {key!r}{where}{hint}")
        if name in out:
            raise ConfigError(
                f"{path}: key {name!r}{where} is given twice ({name} and {name.replace('_', '-')})"
            )
        out[name] = value
    return out


def _relative_to(values: dict[str, Any], base: Path) -> dict[str, Any]:
    def anchor(text: str) -> str:
        path = Path(text).expanduser()
        return str(path if path.is_absolute() else base / path)

    out = dict(values)
    for key in _PATH_KEYS:
        value = out.get(key)
        if isinstance(value, str) and key == "workflow":
            value = [part.strip() for part in value.split(",") if part.strip()]
        if isinstance(value, str) and value and not value.lstrip().startswith("{"):  # inline mcp_config
            out[key] = anchor(value)
        elif isinstance(value, list) and all(isinstance(item, str) for item in value):
            out[key] = [anchor(item) for item in value]
    return out


class _FileSource(PydanticBaseSettingsSource):
    """Already-checked file values, ranked below the environment."""

    def __init__(self, settings_cls: type[BaseSettings], values: dict[str, Any]) -> None:
        super().__init__(settings_cls)
        self._values = values

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return self._values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self._values)


def _with_file(values: dict[str, Any]) -> type[Settings]:
    """``Settings`` with the file as its lowest source; the hook is a classmethod, hence a class per file."""

    class FileSettings(Settings):
        @classmethod
        def settings_customise_sources(
            cls,
            settings_cls: type[BaseSettings],
            init_settings: PydanticBaseSettingsSource,
            env_settings: PydanticBaseSettingsSource,
            dotenv_settings: PydanticBaseSettingsSource,
            file_secret_settings: PydanticBaseSettingsSource,
        ) -> tuple[PydanticBaseSettingsSource, ...]:
            file_source = _FileSource(settings_cls, values)
            return init_settings, env_settings, dotenv_settings, file_secret_settings, file_source

    return FileSettings


def _describe(exc: ValidationError, sources: Mapping[str, str]) -> str:
    error = exc.errors()[0]
    key = str(error["loc"][0]) if error["loc"] else "?"
    source = sources.get(key, "default")
    field = Settings.model_fields.get(key)
    expected = f"expected {_type_name(field.annotation)}" if field is not None else ""
    if source == "cli":
        return f"--{key.replace('_', '-')}: {error['msg']} ({expected})"
    if source == "env":
        return f"{key} (from TETHER_{key.upper()}): {error['msg']} ({expected})"
    where = source.removeprefix("file:")
    if where.endswith("]"):
        file_path, _, profile = where[:-1].rpartition("[")
        where = f"{file_path} [profiles.{profile}]"
    return f"{key} (from {where}): {error['msg']} ({expected}, got {error['input']!r})"


def _type_name(annotation: Any) -> str:
    """A reader's name for a field's type: ``an integer``, ``one of 'a', 'b'``, ``a list of strings``."""
    if get_origin(annotation) in (Union, types.UnionType):
        members = [arg for arg in get_args(annotation) if arg is not type(None)]
        return " or ".join(_type_name(arg) for arg in members)
    if get_origin(annotation) is Literal:
        return "one of " + ", ".join(repr(arg) for arg in get_args(annotation))
    if get_origin(annotation) is list:
        return "a list of strings (or comma-separated text)"
    names = {int: "an integer", float: "a number", bool: "true or false", str: "a string"}
    return names.get(annotation, getattr(annotation, "__name__", str(annotation)))
