"""Continue CLI (``cn``): a model entry named ``tether`` in its ``config.yaml``.

Default file: ``$CONTINUE_GLOBAL_DIR/config.yaml`` (``~/.continue/config.yaml``). The ``tether``
entry goes first in ``models`` (cn chats with the first chat model); other models and keys are kept.
cn is run with ``--config FILE``.

For a small window (:data:`~tether.launch.plan.SMALL_WINDOW`) cn is run with the tools a small model
cannot use excluded (``--exclude``: only reading, listing, writing and editing files are left) and
its telemetry off.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.errors import ConfigError
from tether.launch.plan import (
    ClientPlan,
    Target,
    dump_yaml,
    file_change,
    home_dir,
    load_yaml_mapping,
    reply_tokens,
)
from tether.mcp.config import McpServerSpec

__all__ = ["MODEL_NAME", "SMALL_EXCLUDE", "default_path", "merge", "plan"]

MODEL_NAME = "tether"
SMALL_EXCLUDE = ("Bash", "Fetch", "Checklist", "CheckBackgroundJob", "AskQuestion", "Skills")
SMALL_ENV = {"CONTINUE_CLI_ENABLE_TELEMETRY": "0", "CONTINUE_METRICS_ENABLED": "0"}


def default_path(environ: Mapping[str, str]) -> Path:
    folder = environ.get("CONTINUE_GLOBAL_DIR") or home_dir(environ) / ".continue"
    return Path(folder) / "config.yaml"


def merge(config: dict[str, Any], target: Target, where: Path) -> dict[str, Any]:
    """``config`` with the tether model first (the entry tests/clients/commands.py runs, plus the window)."""
    out = copy.deepcopy(config)
    for key, value in (("name", "tether"), ("version", "1.0.0"), ("schema", "v1")):
        out.setdefault(key, value)  # required by cn's schema
    models = out.get("models") or []
    if not isinstance(models, list):
        raise ConfigError(f"{where}: 'models' is a {type(models).__name__}, expected a list")
    entry = {
        "name": MODEL_NAME,
        "provider": "openai",
        "model": target.model,
        "apiBase": target.openai_base,
        "apiKey": target.api_key,
        "roles": ["chat", "edit", "apply"],
        "capabilities": ["tool_use"],
        "defaultCompletionOptions": {
            "contextLength": target.n_ctx,
            "maxTokens": reply_tokens(target.n_ctx),
        },
    }
    kept = [m for m in models if not (isinstance(m, dict) and m.get("name") == MODEL_NAME)]
    out["models"] = [entry, *kept]
    if target.mcp:
        servers = out.get("mcpServers") or []
        if not isinstance(servers, list):
            raise ConfigError(f"{where}: 'mcpServers' is a {type(servers).__name__}, expected a list")
        named = {s.get("name") for s in servers if isinstance(s, dict)}
        out["mcpServers"] = [*servers, *(_mcp_entry(s) for s in target.mcp if s.name not in named)]
    return out


def _mcp_entry(spec: McpServerSpec) -> dict[str, Any]:
    """One server in cn's own shape (an entry of ``mcpServers``)."""
    if spec.transport == "http":
        return {
            "name": spec.name,
            "type": "streamable-http",
            "url": spec.url,
            "requestOptions": {"headers": dict(spec.headers)},
        }
    return {"name": spec.name, "command": spec.command, "args": list(spec.args), "env": dict(spec.env)}


def plan(target: Target, config_path: Path | None, environ: Mapping[str, str]) -> ClientPlan:
    path = config_path or default_path(environ)
    before, config = load_yaml_mapping(path)
    change = file_change(path, before, dump_yaml(merge(config, target, path)))
    if not target.small:
        return ClientPlan("cn", (change,), ("cn", "--config", str(path)))
    excluded = [arg for tool in SMALL_EXCLUDE for arg in ("--exclude", tool)]
    return ClientPlan("cn", (change,), ("cn", "--config", str(path), *excluded), env=SMALL_ENV)
