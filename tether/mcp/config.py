"""The ``mcpServers`` file: the JSON block Claude Desktop, Continue, opencode and LM Studio read,
checked into frozen values once, at start-up.

A stdio server is ``{"command": ..., "args": [...], "env": {...}}`` (opencode's ``"command": [...]``
list and ``"environment"`` are read too); a streamable-HTTP one is ``{"url": ..., "headers": {...}}``.
tether reads four keys of its own beside them, all optional:

* ``network`` (false): a stdio server's sandbox shares the host's network;
* ``readOnlyPaths`` ([]): host paths the server may read (its install is found by itself);
* ``timeout`` (60): seconds one tool call may take before it ends with an error;
* ``disabled`` (false): the entry is skipped.

Keys other clients use (``alwaysAllow``, ``description``) are ignored with one log line.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import structlog

from tether.errors import ConfigError

__all__ = ["McpServerSpec", "load_mcp_config", "parse_mcp_servers", "read_mcp_config", "tool_name"]

log = structlog.get_logger(__name__)

_KNOWN = frozenset(
    {"type", "command", "args", "env", "environment", "url", "headers"}
    | {"network", "readOnlyPaths", "timeout", "disabled", "enabled"}
)
_SERVER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,47}")
_NOT_NAME_CHAR = re.compile(r"[^A-Za-z0-9_-]+")
_MAX_TOOL_NAME = 64  # OpenAI's limit on a function name


@dataclass(frozen=True)
class McpServerSpec:
    """One server of the file: ``stdio`` (a command tether starts in its sandbox) or ``http``."""

    name: str
    transport: Literal["stdio", "http"]
    command: str = ""
    args: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict, repr=False)  # tokens: never in a log line
    url: str = ""
    headers: Mapping[str, str] = field(default_factory=dict, repr=False)
    network: bool = False
    read_only_paths: tuple[str, ...] = ()
    timeout_s: float = 60.0


def tool_name(server: str, tool: str) -> str:
    """The name the model sees: ``<server>_<tool>``, in the characters every tool API accepts, at most
    64 of them (a longer one keeps its start and a short hash of the whole)."""
    name = _NOT_NAME_CHAR.sub("_", f"{server}_{tool}").strip("_") or "tool"
    if len(name) <= _MAX_TOOL_NAME:
        return name
    digest = hashlib.blake2b(name.encode(), digest_size=4).hexdigest()
    return f"{name[: _MAX_TOOL_NAME - 9]}_{digest}"


def read_mcp_config(value: str) -> tuple[McpServerSpec, ...]:
    """The servers of ``--mcp-config``: a file's path, or the JSON itself (``[mcp.servers]`` tables of
    ``tether.toml``, or an environment variable, give it inline)."""
    if not value.lstrip().startswith("{"):
        return load_mcp_config(value)
    try:
        data = json.loads(value)
    except json.JSONDecodeError as exc:
        raise ConfigError(f"--mcp-config: the inline JSON is not valid: {exc}") from exc
    return parse_mcp_servers(data, where="--mcp-config")


def load_mcp_config(path: str | Path) -> tuple[McpServerSpec, ...]:
    """The servers of the ``mcpServers`` file at ``path``; a ConfigError says what is wrong and where."""
    file = Path(path).expanduser()
    try:
        data = json.loads(file.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ConfigError(f"--mcp-config {file}: cannot read it: {exc.strerror or exc}") from exc
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ConfigError(f"--mcp-config {file}: not valid JSON: {exc}") from exc
    return parse_mcp_servers(data, where=str(file))


def parse_mcp_servers(data: Any, *, where: str = "mcp config") -> tuple[McpServerSpec, ...]:
    """The servers of an ``{"mcpServers": {...}}`` object (a bare ``{name: server}`` map, and
    opencode's ``{"mcp": {...}}``, are read the same way)."""
    if not isinstance(data, Mapping):
        raise ConfigError(f"{where}: expected a JSON object with an 'mcpServers' object")
    servers = data.get("mcpServers", data)
    for key in ("servers", "mcp") if "mcpServers" not in data else ():
        wrapped = data.get(key)
        if isinstance(wrapped, Mapping) and not {"command", "url"} & set(wrapped):  # not a server named so
            servers = wrapped
            break
    if not isinstance(servers, Mapping):
        raise ConfigError(f"{where}: 'mcpServers' must be an object of named servers")
    specs = []
    for name, entry in servers.items():
        spec = _server(str(name), entry, f"{where}: server {name!r}")
        if spec is not None:
            specs.append(spec)
    return tuple(specs)


def _server(name: str, entry: Any, where: str) -> McpServerSpec | None:
    if not isinstance(entry, Mapping):
        raise ConfigError(f"{where}: expected an object with 'command' or 'url'")
    if entry.get("disabled") is True or entry.get("enabled") is False:
        return None
    if not _SERVER_NAME.fullmatch(name):
        raise ConfigError(f"{where}: a server name is letters, digits, '_', '-' or '.' (at most 48)")
    if ignored := sorted(set(entry) - _KNOWN):
        log.info("mcp_config_keys_ignored", server=name, keys=ignored)
    kind = str(entry.get("type", "")).lower()
    common: dict[str, Any] = {
        "network": _bool(entry, "network", where),
        "read_only_paths": _strings(entry, "readOnlyPaths", where),
        "timeout_s": _timeout(entry, where),
    }
    if "url" in entry or kind in ("http", "streamable-http", "streamablehttp", "remote", "sse"):
        if kind == "sse":
            raise ConfigError(f"{where}: the SSE transport is not supported; use streamable HTTP")
        url = entry.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            raise ConfigError(f"{where}: 'url' must be an http:// or https:// URL")
        return McpServerSpec(name, "http", url=url, headers=_table(entry, "headers", where), **common)
    command = entry.get("command")
    args = _strings(entry, "args", where)
    if isinstance(command, list) and command and all(isinstance(c, str) for c in command):
        command, args = command[0], (*command[1:], *args)  # opencode: one argv list
    if not isinstance(command, str) or not command.strip():
        raise ConfigError(f"{where}: needs 'command' (a stdio server) or 'url' (streamable HTTP)")
    env = {**_table(entry, "environment", where), **_table(entry, "env", where)}
    return McpServerSpec(name, "stdio", command=command, args=args, env=env, **common)


def _bool(entry: Mapping[str, Any], key: str, where: str) -> bool:
    value = entry.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"{where}: '{key}' must be true or false")
    return value


def _strings(entry: Mapping[str, Any], key: str, where: str) -> tuple[str, ...]:
    value = entry.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ConfigError(f"{where}: '{key}' must be a list of strings")
    return tuple(value)


def _table(entry: Mapping[str, Any], key: str, where: str) -> dict[str, str]:
    value = entry.get(key, {})
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise ConfigError(f"{where}: '{key}' must be an object of strings")
    return dict(value)


def _timeout(entry: Mapping[str, Any], where: str) -> float:
    value = entry.get("timeout", 60)
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ConfigError(f"{where}: 'timeout' must be a number of seconds")
    if value > 1000:  # some clients write milliseconds
        value = value / 1000
    if not math.isfinite(value) or value <= 0:
        raise ConfigError(f"{where}: 'timeout' must be a positive number of seconds")
    return float(value)
