"""What ``tether launch`` does for one client: the server it targets, the file changes, the command.

Each client module (``opencode``, ``continue_cli``, ``aider``, ``claude``) turns a ``Target`` into
a ``ClientPlan``: the config files merged (the user's own keys kept), the command and environment
to run the client with. The helpers here read and write those files the same way for every client.
"""

from __future__ import annotations

import difflib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from tether.errors import ConfigError
from tether.mcp.config import McpServerSpec

__all__ = [
    "SMALL_WINDOW",
    "ClientPlan",
    "FileChange",
    "Planner",
    "Target",
    "dump_json",
    "dump_yaml",
    "file_change",
    "home_dir",
    "json_change",
    "load_json_object",
    "load_yaml",
    "load_yaml_mapping",
    "mapping_at",
    "reply_tokens",
]


# A window this size or smaller gets each client's small-model profile: the tools a small model
# cannot use left out of the prompt, a bounded agent loop, no update checks or sharing.
SMALL_WINDOW = 16384


@dataclass(frozen=True)
class Target:
    """The tether server a client is pointed at."""

    base: str  # server root, ``http://127.0.0.1:8000`` (the Anthropic protocol's base URL)
    model: str  # a name the server answers to
    n_ctx: int  # its context window in tokens
    api_key: str  # "unused" when the server has no key (clients insist on sending one)
    # The MCP servers of launch's --mcp-config, written into the client's own config (docs/mcp.md).
    mcp: tuple[McpServerSpec, ...] = ()
    mcp_file: Path | None = None  # the file they came from (Claude Code reads it itself)

    @property
    def openai_base(self) -> str:
        return f"{self.base}/v1"

    @property
    def small(self) -> bool:
        """Whether the client gets its small-model profile (:data:`SMALL_WINDOW`)."""
        return self.n_ctx <= SMALL_WINDOW


def reply_tokens(n_ctx: int, *, share: int = 8, cap: int = 4096) -> int:
    """Tokens to reserve for one reply: a slice of the window, so a small window keeps room for input."""
    return max(256, min(cap, n_ctx // share))


@dataclass(frozen=True)
class FileChange:
    """One config file: its text now (None: absent) and after the merge."""

    path: Path
    before: str | None
    after: str
    notes: tuple[str, ...] = ()

    @property
    def changed(self) -> bool:
        return self.before != self.after

    def diff(self) -> str:
        """Unified diff from the current file (or ``/dev/null``) to the merged one."""
        old = (self.before or "").splitlines(keepends=True)
        new = self.after.splitlines(keepends=True)
        fromfile = str(self.path) if self.before is not None else "/dev/null"
        lines = difflib.unified_diff(old, new, fromfile=fromfile, tofile=str(self.path))
        return "".join(line if line.endswith("\n") else line + "\n" for line in lines)


@dataclass(frozen=True)
class ClientPlan:
    """Everything ``tether launch`` writes and runs for one client."""

    client: str
    files: tuple[FileChange, ...]
    argv: tuple[str, ...]  # the client's command before the user's extra arguments
    env: Mapping[str, str] = field(default_factory=dict)  # set for the client
    unset: tuple[str, ...] = ()  # removed from the client's environment


Planner = Callable[[Target, Path | None, Mapping[str, str]], ClientPlan]


def home_dir(environ: Mapping[str, str]) -> Path:
    return Path(environ.get("HOME") or Path.home())


def _read(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"cannot read {path}: {exc}") from exc


def load_json_object(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text and its JSON object ({} when absent); a clear error when it is not one."""
    text = _read(path)
    if text is None or not text.strip():
        return text, {}
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ConfigError(
            f"{path} is not plain JSON ({exc}); launch will not rewrite it (comments would be lost): "
            "fix it, or pass --config-path to use another file"
        ) from exc
    if not isinstance(value, dict):
        raise ConfigError(f"{path} holds a JSON {type(value).__name__}, not an object")
    return text, value


def load_yaml(path: Path) -> tuple[str | None, Any]:
    """The file's text and its YAML value (None when absent or empty)."""
    text = _read(path)
    if text is None:
        return None, None
    try:
        return text, yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"{path} is not valid YAML: {exc}") from exc


def load_yaml_mapping(path: Path) -> tuple[str | None, dict[str, Any]]:
    """The file's text and its YAML mapping ({} when absent or empty); a clear error when it is not one."""
    text, value = load_yaml(path)
    if value is not None and not isinstance(value, dict):
        raise ConfigError(f"{path} holds a YAML {type(value).__name__}, not a mapping")
    return text, value or {}


def mapping_at(parent: dict[str, Any], key: str, where: Path) -> dict[str, Any]:
    """``parent[key]`` as a mapping, created when missing; an error when the user has something else there."""
    value = parent.setdefault(key, {})
    if not isinstance(value, dict):
        raise ConfigError(f"{where}: '{key}' is a {type(value).__name__}, expected a mapping")
    return value


def dump_json(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False) + "\n"


def dump_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, allow_unicode=True, default_flow_style=False)


def file_change(path: Path, before: str | None, after: str) -> FileChange:
    """A ``FileChange``, noting that rewriting a YAML file drops its comments (the backup keeps them)."""
    notes: tuple[str, ...] = ()
    if (
        before is not None
        and path.suffix in (".yml", ".yaml")
        and any(line.lstrip().startswith("#") for line in before.splitlines())
        and before != after
    ):
        notes = (f"{path}: its comments are not kept in the rewritten file (the backup has them)",)
    return FileChange(path, before, after, notes)


def json_change(path: Path, edit: Callable[[dict[str, Any]], dict[str, Any]]) -> FileChange:
    """The change ``edit`` makes to the JSON object in ``path`` (``{}`` when absent): ``edit`` gets
    the object as read and returns the one to write."""
    before, value = load_json_object(path)
    return file_change(path, before, dump_json(edit(value)))
