"""opencode: an ``@ai-sdk/openai-compatible`` provider named ``tether`` in its JSON config.

Default file: ``$OPENCODE_CONFIG`` if set, else ``$XDG_CONFIG_HOME/opencode/opencode.json`` (global
config, ``~/.config`` without XDG). The provider, ``model`` and ``small_model`` are set; every other
key (other providers, permissions, agents, …) is kept. opencode is run with ``OPENCODE_CONFIG``
pointing at the file, so a ``--config-path`` elsewhere is read too.

For a small window (:data:`~tether.launch.plan.SMALL_WINDOW`) the keys the user has not set get the
small-model profile: every tool but ``read``, ``edit`` and ``write`` denied (opencode then leaves them
out of its prompt, which halves: ~3,500 tokens instead of ~7,600), the build agent's ``steps``
bounded, no auto-update and no sharing.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.launch.plan import ClientPlan, Target, home_dir, json_change, mapping_at, reply_tokens
from tether.mcp.config import McpServerSpec

__all__ = ["PROVIDER", "SMALL_DENY", "SMALL_STEPS", "default_path", "merge", "plan"]

PROVIDER = "tether"
SMALL_DENY = ("bash", "glob", "grep", "skill", "task", "todowrite", "webfetch")
SMALL_STEPS = 3


def default_path(environ: Mapping[str, str]) -> Path:
    if environ.get("OPENCODE_CONFIG"):
        return Path(environ["OPENCODE_CONFIG"])
    config_home = Path(environ.get("XDG_CONFIG_HOME") or home_dir(environ) / ".config")
    return config_home / "opencode" / "opencode.json"


def merge(config: dict[str, Any], target: Target, where: Path) -> dict[str, Any]:
    """``config`` with the tether provider and model set (the shape tests/clients/commands.py runs)."""
    out = copy.deepcopy(config)
    out.setdefault("$schema", "https://opencode.ai/config.json")
    provider = mapping_at(mapping_at(out, "provider", where), PROVIDER, where)
    provider["npm"] = "@ai-sdk/openai-compatible"
    provider["name"] = "tether"
    options = mapping_at(provider, "options", where)
    options["baseURL"] = target.openai_base
    options["apiKey"] = target.api_key
    model = mapping_at(mapping_at(provider, "models", where), target.model, where)
    model["name"] = target.model
    model["limit"] = {"context": target.n_ctx, "output": reply_tokens(target.n_ctx)}
    out["model"] = out["small_model"] = f"{PROVIDER}/{target.model}"
    servers = mapping_at(out, "mcp", where) if target.mcp else {}
    for spec in target.mcp:  # an entry of the user's own of that name stays
        servers.setdefault(spec.name, _mcp_entry(spec))
    if target.small:
        _small_profile(out, where)
    return out


def _mcp_entry(spec: McpServerSpec) -> dict[str, Any]:
    """One server in opencode's own shape (``mcp.NAME``)."""
    if spec.transport == "http":
        return {"type": "remote", "url": spec.url, "headers": dict(spec.headers), "enabled": True}
    return {
        "type": "local",
        "command": [spec.command, *spec.args],
        "environment": dict(spec.env),
        "enabled": True,
    }


def _small_profile(out: dict[str, Any], where: Path) -> None:
    """What a small model needs, where the user has not said otherwise (see the module doc)."""
    out.setdefault("autoupdate", False)
    out.setdefault("share", "disabled")
    mapping_at(mapping_at(out, "agent", where), "build", where).setdefault("steps", SMALL_STEPS)
    permission = out.setdefault("permission", {})
    if isinstance(permission, dict):  # a single word ("allow") is the user's choice for every tool
        for tool in SMALL_DENY:
            permission.setdefault(tool, "deny")


def plan(target: Target, config_path: Path | None, environ: Mapping[str, str]) -> ClientPlan:
    path = config_path or default_path(environ)
    change = json_change(path, lambda config: merge(config, target, path))
    return ClientPlan("opencode", (change,), ("opencode",), env={"OPENCODE_CONFIG": str(path)})
