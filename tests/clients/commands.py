"""How each real client is configured and started headlessly against a tether server.

These are the configurations docs/clients.md documents; keep the two in step.
"""

from __future__ import annotations

import json
from pathlib import Path

from tests.clients.harness import CLIENTS, client_env

__all__ = ["AIDER_HEADLESS", "aider_command", "cn_command", "opencode_command"]

# aider headless and offline: no git, update check, release notes, analytics or prompts.
AIDER_HEADLESS = (
    "--no-git",
    "--no-check-update",
    "--no-show-release-notes",
    "--no-analytics",
    "--no-show-model-warnings",
    "--no-pretty",
    "--no-fancy-input",
    "--yes-always",
)


def opencode_command(
    base: str,
    model: str,
    prompt: str,
    home: Path,
    *,
    context: int,
    output: int,
    steps: int | None = None,
    deny: tuple[str, ...] = (),
) -> tuple[list[str], dict[str, str]]:
    """``opencode run --format json`` with an ``@ai-sdk/openai-compatible`` provider named ``tether``.

    ``deny`` removes tools from what opencode offers (a smaller prompt for a small context);
    ``steps`` bounds its agent loop."""
    config: dict[str, object] = {
        "$schema": "https://opencode.ai/config.json",
        "autoupdate": False,
        "share": "disabled",
        "provider": {
            "tether": {
                "npm": "@ai-sdk/openai-compatible",
                "name": "tether",
                "options": {"baseURL": f"{base}/v1", "apiKey": "unused"},
                "models": {model: {"name": model, "limit": {"context": context, "output": output}}},
            }
        },
        "model": f"tether/{model}",
        "small_model": f"tether/{model}",
        "permission": {"edit": "allow", "bash": "allow", "webfetch": "deny", **{t: "deny" for t in deny}},
    }
    if steps is not None:
        config["agent"] = {"build": {"steps": steps}}
    env = client_env(home, OPENCODE_CONFIG_CONTENT=json.dumps(config))
    return [str(CLIENTS / "node_modules/.bin/opencode"), "run", "--format", "json", prompt], env


def cn_command(base: str, model: str, prompt: str, home: Path) -> tuple[list[str], dict[str, str]]:
    """Continue CLI headless: ``cn --config FILE -p --auto PROMPT`` (``--auto`` allows write tools)."""
    config = home / "continue-config.yaml"
    config.write_text(
        "name: tether\nversion: 1.0.0\nschema: v1\nmodels:\n"
        f"  - name: tether\n    provider: openai\n    model: {model}\n    apiBase: {base}/v1\n"
        "    apiKey: unused\n    roles: [chat, edit, apply]\n    capabilities: [tool_use]\n",
        encoding="utf-8",
    )
    env = client_env(home, CONTINUE_GLOBAL_DIR=str(home / ".continue"))
    return [str(CLIENTS / "node_modules/.bin/cn"), "--config", str(config), "-p", "--auto", prompt], env


def aider_command(
    base: str,
    model: str,
    prompt: str,
    home: Path,
    files: list[str],
    *,
    context: int,
    max_tokens: int,
    edit_format: str = "diff",
) -> tuple[list[str], dict[str, str]]:
    """aider with a model metadata file and model settings, offline: no git, update check or analytics."""
    name = f"openai/{model}"
    metadata = home / "aider-model-metadata.json"
    metadata.write_text(
        json.dumps(
            {
                name: {
                    "max_input_tokens": context,
                    "max_output_tokens": max_tokens,
                    "max_tokens": max_tokens,
                    "input_cost_per_token": 0,
                    "output_cost_per_token": 0,
                    "litellm_provider": "openai",
                    "mode": "chat",
                }
            }
        ),
        encoding="utf-8",
    )
    settings = home / "aider-model-settings.yml"
    settings.write_text(
        f"- name: {name}\n  edit_format: {edit_format}\n  use_repo_map: false\n"
        f"  extra_params:\n    max_tokens: {max_tokens}\n",
        encoding="utf-8",
    )
    env = client_env(home, OPENAI_API_KEY="unused", OPENAI_API_BASE=f"{base}/v1")
    cmd = [
        str(CLIENTS / "aider-venv/bin/aider"),
        "--model",
        name,
        "--model-metadata-file",
        str(metadata),
        "--model-settings-file",
        str(settings),
        *AIDER_HEADLESS,
        "--map-tokens",
        "0",
        "--message",
        prompt,
        *files,
    ]
    return cmd, env
