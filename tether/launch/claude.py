"""Claude Code: the Anthropic variables in a settings file of launch's own, passed with ``--settings``.

Default file: ``~/.claude/tether-settings.json``. Claude Code's own ``~/.claude/settings.json`` is
left alone on purpose: an ``env`` block there would send every later ``claude`` session to a local
server that may be gone. ``--settings`` also wins over an ``env`` block in the user's settings, which
the shell environment would not. ``ANTHROPIC_API_KEY`` is removed from the client's environment, so
a real Anthropic key is never sent to tether. Keys already in the file are kept.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.launch.plan import ClientPlan, Target, home_dir, json_change, mapping_at

__all__ = ["default_path", "env_for", "plan"]

MODEL_VARIABLES = (
    "ANTHROPIC_MODEL",
    "ANTHROPIC_SMALL_FAST_MODEL",
    "ANTHROPIC_DEFAULT_HAIKU_MODEL",
    "ANTHROPIC_DEFAULT_SONNET_MODEL",
    "ANTHROPIC_DEFAULT_OPUS_MODEL",
)


def default_path(environ: Mapping[str, str]) -> Path:
    return home_dir(environ) / ".claude" / "tether-settings.json"


def env_for(target: Target) -> dict[str, str]:
    """The variables Claude Code needs: the server root (it appends ``/v1/messages``), a bearer token,
    and the served name for every model it may ask for (main, background, subagents)."""
    return {
        "ANTHROPIC_BASE_URL": target.base,
        "ANTHROPIC_AUTH_TOKEN": target.api_key,
        **dict.fromkeys(MODEL_VARIABLES, target.model),
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
    }


def _with_env(settings: dict[str, Any], variables: Mapping[str, str], where: Path) -> dict[str, Any]:
    merged = copy.deepcopy(settings)
    mapping_at(merged, "env", where).update(variables)
    return merged


def plan(target: Target, config_path: Path | None, environ: Mapping[str, str]) -> ClientPlan:
    path = config_path or default_path(environ)
    variables = env_for(target)
    change = json_change(path, lambda settings: _with_env(settings, variables, path))
    argv: tuple[str, ...] = ("claude", "--settings", str(path))
    if target.mcp_file is not None:  # the file itself: its tokens stay off the command line
        argv += ("--mcp-config", str(target.mcp_file))
    return ClientPlan("claude", (change,), argv, env=variables, unset=("ANTHROPIC_API_KEY",))
