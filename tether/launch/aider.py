"""aider: ``.aider.conf.yml`` plus its model metadata and model settings files.

Default file: ``~/.aider.conf.yml``; ``.aider.model.metadata.json`` (the window, zero cost) and
``.aider.model.settings.yml`` (``extra_params.max_tokens``: aider sends none and fails on a reply cut
by the server's default cap) sit next to it and are named in it. Keys and entries for other models
are kept. aider is run with ``--config FILE``; the model is ``openai/<served name>``.

For a small window (:data:`~tether.launch.plan.SMALL_WINDOW`) the keys the user has not set get the
small-model profile: the ``whole`` edit format (a small model copies a file more reliably than it
writes search/replace blocks), no repository map (it would take the window), no update checks or
analytics.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from pathlib import Path

from tether.errors import ConfigError
from tether.launch.plan import (
    ClientPlan,
    FileChange,
    Target,
    dump_json,
    dump_yaml,
    file_change,
    home_dir,
    load_json_object,
    load_yaml,
    load_yaml_mapping,
    mapping_at,
    reply_tokens,
)

__all__ = ["CONF", "METADATA", "SETTINGS", "model_name", "plan"]

CONF = ".aider.conf.yml"
METADATA = ".aider.model.metadata.json"
SETTINGS = ".aider.model.settings.yml"


def model_name(target: Target) -> str:
    return f"openai/{target.model}"


def _max_tokens(target: Target) -> int:
    # Generous: tether clamps max_tokens to what is left of the window, and a cut reply fails aider.
    return reply_tokens(target.n_ctx, share=2, cap=8192)


# The small-model profile's keys in .aider.conf.yml and in the model's settings entry.
SMALL_CONF = {"map-tokens": 0, "check-update": False, "analytics": False, "show-release-notes": False}
SMALL_SETTINGS = {"edit_format": "whole", "use_repo_map": False}


def _conf(path: Path, target: Target, metadata: Path, settings: Path) -> FileChange:
    before, conf = load_yaml_mapping(path)
    if target.small:
        for key, value in SMALL_CONF.items():
            conf.setdefault(key, value)
    conf.update(
        {
            "model": model_name(target),
            "openai-api-base": target.openai_base,
            "openai-api-key": target.api_key,
            "model-metadata-file": str(metadata),
            "model-settings-file": str(settings),
        }
    )
    return file_change(path, before, dump_yaml(conf))


def _metadata(path: Path, target: Target) -> FileChange:
    before, value = load_json_object(path)
    entry = mapping_at(value, model_name(target), path)
    entry.update(
        {
            "max_input_tokens": target.n_ctx,
            "max_output_tokens": _max_tokens(target),
            "max_tokens": _max_tokens(target),
            "input_cost_per_token": 0,
            "output_cost_per_token": 0,
            "litellm_provider": "openai",
            "mode": "chat",
        }
    )
    return file_change(path, before, dump_json(value))


def _settings(path: Path, target: Target) -> FileChange:
    before, value = load_yaml(path)
    entries = copy.deepcopy(value) if value is not None else []
    if not isinstance(entries, list):
        raise ConfigError(f"{path} holds a YAML {type(entries).__name__}, expected a list of model settings")
    name = model_name(target)
    entry = next((e for e in entries if isinstance(e, dict) and e.get("name") == name), None)
    if entry is None:
        entry = {"name": name}
        entries.append(entry)
    if target.small:
        for key, value in SMALL_SETTINGS.items():
            entry.setdefault(key, value)
    mapping_at(entry, "extra_params", path)["max_tokens"] = _max_tokens(target)
    return file_change(path, before, dump_yaml(entries))


def plan(target: Target, config_path: Path | None, environ: Mapping[str, str]) -> ClientPlan:
    if target.mcp:
        raise ConfigError(
            "aider has no MCP client; run the servers in tether instead: "
            "tether serve --mcp-config FILE --work-dir DIR (docs/mcp.md)"
        )
    conf = config_path or home_dir(environ) / CONF
    metadata, settings = conf.parent / METADATA, conf.parent / SETTINGS
    files = (
        _conf(conf, target, metadata, settings),
        _metadata(metadata, target),
        _settings(settings, target),
    )
    return ClientPlan("aider", files, ("aider", "--config", str(conf)))
