"""``tether launch``: merges that keep the user's config, backups and diffs, dry runs, the server it uses.

Servers are scripted: an app on a loopback socket, or ``tests.clients.scripted_server`` as a process
for the path where launch starts one. Clients are stand-in scripts on PATH that record what they got.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from fastapi import FastAPI
from typer.testing import CliRunner

from tests.support.socket_server import free_port, serving
from tether.cli import app as cli_app
from tether.config import ServerConfig
from tether.engine.scheduler import Scheduler
from tether.engine.scripted import ScriptedEngine
from tether.errors import ConfigError
from tether.launch import LaunchOptions, Target, aider, claude, continue_cli, launch, opencode
from tether.launch.runner import apply, find_client
from tether.launch.server import log_path
from tether.proxy.app import create_app

TARGET = Target("http://127.0.0.1:8123", "qwen-coder", 16384, "unused")


def scripted_app(**config: Any) -> Any:
    engine = ScriptedEngine(["Hi"], n_ctx=4096, model_id="scripted")
    return create_app(ServerConfig(**config), Scheduler([engine]))


def port_of(base: str) -> int:
    return int(base.rsplit(":", 1)[1])


class Output:
    """The CLI's two streams: ``out`` (stdout, the config) and ``say`` (stderr, the rest)."""

    def __init__(self) -> None:
        self.stdout: list[str] = []
        self.stderr: list[str] = []

    def run(self, options: LaunchOptions, environ: dict[str, str]) -> int:
        return launch(options, out=self.stdout.append, say=self.stderr.append, environ=environ)

    @property
    def err(self) -> str:
        return "\n".join(self.stderr)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    path = tmp_path / "home"
    path.mkdir()
    return path


@pytest.fixture
def environ(home: Path) -> dict[str, str]:
    # No pinned clients: the checkout's .cache/clients is not looked at.
    pinned = home / "no-clients"
    return {
        "HOME": str(home),
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "TETHER_CLIENTS_DIR": str(pinned),
    }


@pytest.fixture
def scripted_base() -> Iterator[str]:
    with serving(scripted_app()) as base:
        yield base


def test_opencode_merge_keeps_the_users_keys(home: Path, environ: dict[str, str]) -> None:
    path = home / ".config/opencode/opencode.json"
    path.parent.mkdir(parents=True)
    user = {
        "theme": "tokyonight",
        "permission": {"bash": "ask"},
        "provider": {
            "anthropic": {"options": {"apiKey": "sk-user"}},
            "tether": {"options": {"headers": {"x-team": "a"}}, "models": {"old-model": {"name": "old"}}},
        },
        "model": "anthropic/claude-sonnet",
    }
    path.write_text(json.dumps(user))
    plan = opencode.plan(TARGET, None, environ)
    (change,) = plan.files
    assert change.path == path and change.before == json.dumps(user)
    merged = json.loads(change.after)
    assert merged["theme"] == "tokyonight"
    # A 16k window gets the small-model profile where the user said nothing: bash stays "ask".
    assert merged["permission"] == {"bash": "ask"} | {t: "deny" for t in opencode.SMALL_DENY if t != "bash"}
    assert (merged["autoupdate"], merged["share"], merged["agent"]) == (
        False,
        "disabled",
        {"build": {"steps": opencode.SMALL_STEPS}},
    )
    assert merged["provider"]["anthropic"] == user["provider"]["anthropic"]  # type: ignore[index]
    tether = merged["provider"]["tether"]
    assert tether["npm"] == "@ai-sdk/openai-compatible"
    assert tether["options"] == {
        "headers": {"x-team": "a"},
        "baseURL": f"{TARGET.base}/v1",
        "apiKey": "unused",
    }
    assert tether["models"]["old-model"] == {"name": "old"}
    assert tether["models"]["qwen-coder"] == {
        "name": "qwen-coder",
        "limit": {"context": 16384, "output": 2048},
    }
    assert merged["model"] == merged["small_model"] == "tether/qwen-coder"
    assert plan.argv == ("opencode",) and plan.env == {"OPENCODE_CONFIG": str(path)}


def test_continue_merge_puts_tether_first_and_keeps_other_models(home: Path, environ: dict[str, str]) -> None:
    path = home / ".continue/config.yaml"
    path.parent.mkdir()
    path.write_text(
        "# my models\nname: mine\nversion: 0.0.2\nschema: v1\nmodels:\n"
        "  - name: gpt\n    provider: openai\n    model: gpt-4o\n"
        "  - name: tether\n    provider: openai\n    model: stale\n"
        "rules:\n  - Be brief\n"
    )
    (change,) = continue_cli.plan(TARGET, None, environ).files
    merged = yaml.safe_load(change.after)
    assert (merged["name"], merged["version"], merged["rules"]) == ("mine", "0.0.2", ["Be brief"])
    assert [m["name"] for m in merged["models"]] == ["tether", "gpt"]  # the stale entry replaced, first
    entry = merged["models"][0]
    assert (entry["model"], entry["apiBase"], entry["capabilities"]) == (
        "qwen-coder",
        f"{TARGET.base}/v1",
        ["tool_use"],
    )
    assert entry["defaultCompletionOptions"] == {"contextLength": 16384, "maxTokens": 2048}
    assert change.notes and "comments" in change.notes[0]
    plan = continue_cli.plan(TARGET, None, environ)
    assert plan.argv[:3] == ("cn", "--config", str(path))
    assert plan.argv[3:] == tuple(a for t in continue_cli.SMALL_EXCLUDE for a in ("--exclude", t))
    assert plan.env["CONTINUE_CLI_ENABLE_TELEMETRY"] == "0"


def test_aider_merge_keeps_conf_keys_other_models_and_settings(home: Path, environ: dict[str, str]) -> None:
    (home / ".aider.conf.yml").write_text("dark-mode: true\nmodel: gpt-4o\n")
    (home / ".aider.model.metadata.json").write_text(json.dumps({"other/model": {"max_input_tokens": 1}}))
    (home / ".aider.model.settings.yml").write_text(
        "- name: openai/qwen-coder\n  edit_format: whole\n- name: other/model\n  edit_format: diff\n"
    )
    conf, metadata, settings = aider.plan(TARGET, None, environ).files
    merged = yaml.safe_load(conf.after)
    assert merged["dark-mode"] is True and merged["model"] == "openai/qwen-coder"
    assert {k: merged[k] for k in aider.SMALL_CONF} == aider.SMALL_CONF
    assert merged["openai-api-base"] == f"{TARGET.base}/v1"
    assert merged["model-metadata-file"] == str(home / ".aider.model.metadata.json")
    meta = json.loads(metadata.after)
    assert meta["other/model"] == {"max_input_tokens": 1}
    assert meta["openai/qwen-coder"]["max_input_tokens"] == 16384
    assert yaml.safe_load(settings.after) == [
        {
            "name": "openai/qwen-coder",
            "edit_format": "whole",
            "use_repo_map": False,
            "extra_params": {"max_tokens": 8192},
        },
        {"name": "other/model", "edit_format": "diff"},
    ]


def test_a_large_window_gets_no_small_model_profile(home: Path, environ: dict[str, str]) -> None:
    large = Target(TARGET.base, TARGET.model, 65536, "unused")
    (change,) = opencode.plan(large, None, environ).files
    merged = json.loads(change.after)
    assert not {"permission", "agent", "autoupdate", "share"} & set(merged)
    assert continue_cli.plan(large, None, environ).argv == (
        "cn",
        "--config",
        str(home / ".continue/config.yaml"),
    )
    conf, _, settings = aider.plan(large, None, environ).files
    assert not set(aider.SMALL_CONF) & set(yaml.safe_load(conf.after))
    assert yaml.safe_load(settings.after) == [
        {"name": "openai/qwen-coder", "extra_params": {"max_tokens": 8192}}
    ]


def test_the_small_model_profile_keeps_what_the_user_chose(home: Path, environ: dict[str, str]) -> None:
    path = home / ".config/opencode/opencode.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"permission": "allow", "agent": {"build": {"steps": 40}}, "share": "manual"}))
    merged = json.loads(opencode.plan(TARGET, None, environ).files[0].after)
    assert (merged["permission"], merged["agent"], merged["share"]) == (
        "allow",
        {"build": {"steps": 40}},
        "manual",
    )


def test_claude_gets_a_settings_file_of_its_own_and_no_anthropic_key(
    home: Path, environ: dict[str, str]
) -> None:
    path = home / "claude-tether.json"
    path.write_text(json.dumps({"env": {"API_TIMEOUT_MS": "600000"}, "permissions": {"allow": ["Read"]}}))
    plan = claude.plan(TARGET, path, environ)
    merged = json.loads(plan.files[0].after)
    assert merged["permissions"] == {"allow": ["Read"]}
    assert merged["env"]["API_TIMEOUT_MS"] == "600000"
    assert merged["env"]["ANTHROPIC_BASE_URL"] == TARGET.base  # the root: Claude Code appends /v1/messages
    assert merged["env"]["ANTHROPIC_AUTH_TOKEN"] == "unused"
    assert merged["env"]["ANTHROPIC_MODEL"] == merged["env"]["ANTHROPIC_DEFAULT_HAIKU_MODEL"] == "qwen-coder"
    assert plan.argv == ("claude", "--settings", str(path)) and plan.unset == ("ANTHROPIC_API_KEY",)
    assert claude.plan(TARGET, None, environ).files[0].path == home / ".claude/tether-settings.json"


def test_a_file_launch_cannot_merge_safely_is_refused(home: Path, environ: dict[str, str]) -> None:
    path = home / "opencode.jsonc"
    path.write_text('{\n  // my comment\n  "theme": "x"\n}\n')
    with pytest.raises(ConfigError, match="not plain JSON"):
        opencode.plan(TARGET, path, environ)
    path.write_text(json.dumps({"provider": ["not", "a", "mapping"]}))
    with pytest.raises(ConfigError, match="'provider' is a list"):
        opencode.plan(TARGET, path, environ)


def test_apply_backs_up_shows_a_diff_and_writes(home: Path, environ: dict[str, str]) -> None:
    path = home / "opencode.json"
    original = json.dumps({"theme": "x"})
    path.write_text(original)
    path.chmod(0o600)
    said: list[str] = []
    apply(opencode.plan(TARGET, path, environ).files, said.append, now=datetime(2025, 1, 2, 3, 4, 5))
    backup = home / "opencode.json.20250102-030405.bak"
    assert backup.read_text() == original
    assert json.loads(path.read_text())["model"] == "tether/qwen-coder"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    diff = said[0]
    assert diff.startswith(f"--- {path}\n+++ {path}\n@@")
    assert '-{"theme": "x"}' in diff and '+  "model": "tether/qwen-coder",' in diff
    said.clear()
    apply(opencode.plan(TARGET, path, environ).files, said.append, now=datetime(2025, 1, 2, 3, 4, 5))
    assert said == [f"{path}: already up to date"]
    assert sorted(p.name for p in home.iterdir()) == ["opencode.json", "opencode.json.20250102-030405.bak"]


def test_dry_run_prints_the_config_and_writes_nothing(
    home: Path, environ: dict[str, str], scripted_base: str
) -> None:
    path = home / "opencode.json"
    path.write_text(json.dumps({"theme": "x"}))
    output = Output()
    options = LaunchOptions("opencode", port=port_of(scripted_base), config_path=path, dry_run=True)
    assert output.run(options, environ) == 0
    printed = json.loads("\n".join(output.stdout))  # stdout is the config alone
    assert printed["theme"] == "x" and printed["model"] == "tether/scripted"
    limit = printed["provider"]["tether"]["models"]["scripted"]["limit"]
    assert limit["context"] == 4096  # the server's window, asked from /v1/models
    assert f"using the tether server at {scripted_base}" in output.err
    assert '+  "model": "tether/scripted",' in output.err  # the diff
    assert path.read_text() == json.dumps({"theme": "x"})
    assert [p.name for p in home.iterdir()] == ["opencode.json"]  # no backup either


def test_dry_run_with_no_server_starts_nothing(home: Path, environ: dict[str, str], tmp_path: Path) -> None:
    marker = tmp_path / "started"
    options = LaunchOptions(
        "cn",
        port=free_port(),
        dry_run=True,
        server_command=f"{sys.executable} -c 'open({str(marker)!r}, \"w\")' --port {{port}}",
    )
    output = Output()
    assert output.run(options, environ) == 0
    assert "launch would start:" in output.err and f"--port {options.port}" in output.err
    assert yaml.safe_load("\n".join(output.stdout))["models"][0]["apiBase"].endswith(f":{options.port}/v1")
    assert not marker.exists() and list(home.iterdir()) == []


def test_an_unknown_client_is_a_clear_error(environ: dict[str, str]) -> None:
    with pytest.raises(ConfigError, match="unknown client 'vim': choose one of opencode, cn, aider, claude"):
        Output().run(LaunchOptions("vim", dry_run=True), environ)
    result = CliRunner().invoke(cli_app, ["launch", "vim", "--dry-run"])
    assert result.exit_code == 2
    assert "tether launch: error: unknown client 'vim'" in result.stderr


def test_no_start_with_nothing_answering_is_an_error(environ: dict[str, str]) -> None:
    port = free_port()
    with pytest.raises(ConfigError, match=f"no tether server answers at http://127.0.0.1:{port}"):
        Output().run(LaunchOptions("aider", port=port, no_start=True, dry_run=True), environ)


def test_a_server_with_a_key_needs_it_and_its_clients_get_it(environ: dict[str, str]) -> None:
    with serving(scripted_app(api_key="s3cret")) as base:
        options = LaunchOptions("claude", port=port_of(base), dry_run=True, no_start=True)
        with pytest.raises(ConfigError, match="needs its API key: pass --api-key"):
            Output().run(options, environ)
        output = Output()
        output.run(LaunchOptions("claude", port=port_of(base), api_key="s3cret", dry_run=True), environ)
    assert json.loads("\n".join(output.stdout))["env"]["ANTHROPIC_AUTH_TOKEN"] == "s3cret"


def test_something_else_on_the_port_is_not_taken_for_tether(environ: dict[str, str]) -> None:
    with serving(FastAPI()) as base, pytest.raises(ConfigError, match="not a tether server"):
        Output().run(LaunchOptions("opencode", port=port_of(base), dry_run=True), environ)


def test_a_client_not_on_path_is_named_before_anything_starts(
    environ: dict[str, str], tmp_path: Path
) -> None:
    marker = tmp_path / "started"
    options = LaunchOptions(
        "aider", port=free_port(), server_command=f"{sys.executable} -c 'open({str(marker)!r}, \"w\")'"
    )
    with pytest.raises(
        ConfigError, match=r"aider is not installed: not under .cache/clients nor on PATH.*install_clients.sh"
    ):
        Output().run(options, {**environ, "PATH": str(tmp_path)})
    assert not marker.exists()


def fake_client(folder: Path, name: str, record: Path, base: str) -> None:
    """A stand-in client: records its arguments and config, checks the server answers, exits 3."""
    folder.mkdir(exist_ok=True)
    script = folder / name
    probe = f"import httpx; print(httpx.get('{base}/health').status_code)"
    script.write_text(
        "#!/bin/sh\n"
        f'printf "%s\\n" "$@" > {record}/argv\n'
        f'cp "$OPENCODE_CONFIG" {record}/config\n'
        f'{sys.executable} -c "{probe}" > {record}/health\n'
        "exit 3\n"
    )
    script.chmod(0o755)


def test_launch_starts_a_server_runs_the_client_and_stops_the_server(
    home: Path, environ: dict[str, str], tmp_path: Path
) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    record = tmp_path / "record"
    record.mkdir()
    fake_client(tmp_path / "bin", "opencode", record, base)
    server = f"{sys.executable} -m tests.clients.scripted_server --port {{port}} --log {tmp_path / 'requests.jsonl'}"
    options = LaunchOptions("opencode", port=port, server_command=server, client_args=("run", "hi there"))
    output = Output()
    try:
        code = output.run(options, {**environ, "PATH": f"{tmp_path / 'bin'}:{environ['PATH']}"})
    finally:
        log_path(port).unlink(missing_ok=True)
    assert code == 3  # the client's own exit status
    assert (record / "argv").read_text() == "run\nhi there\n"
    written = json.loads((home / ".config/opencode/opencode.json").read_text())
    assert json.loads((record / "config").read_text()) == written  # the client saw the merged file
    assert written["model"] == "tether/scripted"  # the name the started server reported
    assert (record / "health").read_text().strip() == "200"  # the server was up while the client ran
    with pytest.raises(httpx.TransportError):  # ... and was stopped when it exited
        httpx.get(f"{base}/health", timeout=2)
    assert "stopping the tether server launch started" in output.err


def test_a_server_that_exits_at_start_is_reported_with_its_log(
    environ: dict[str, str], tmp_path: Path
) -> None:
    fake_client(tmp_path / "bin", "cn", tmp_path, "http://127.0.0.1:1")
    port = free_port()
    command = f"{sys.executable} -c 'import sys; print(\"no model here\"); sys.exit(4)'"
    options = LaunchOptions("cn", port=port, server_command=command)
    try:
        with pytest.raises(ConfigError, match=r"exited with code 4 before answering(.|\n)*no model here"):
            Output().run(options, {**environ, "PATH": f"{tmp_path / 'bin'}:{environ['PATH']}"})
    finally:
        log_path(port).unlink(missing_ok=True)


def test_the_pinned_client_is_found_before_path(environ: dict[str, str], tmp_path: Path) -> None:
    pinned = tmp_path / "clients"
    binary = pinned / "node_modules/.bin/opencode"
    binary.parent.mkdir(parents=True)
    binary.write_text("#!/bin/sh\n")
    on_path = tmp_path / "bin"
    fake_client(on_path, "opencode", tmp_path, "http://127.0.0.1:1")
    env = {**environ, "PATH": f"{on_path}:{environ['PATH']}", "TETHER_CLIENTS_DIR": str(pinned)}
    assert find_client("opencode", env) == str(on_path / "opencode")  # the pinned one cannot run yet
    binary.chmod(0o755)
    assert find_client("opencode", env) == str(binary)
    assert find_client("opencode", {**env, "TETHER_CLIENTS_DIR": str(tmp_path / "none")}) == str(
        on_path / "opencode"
    )


def test_the_server_launch_starts_keeps_prefixes_on_disk(home: Path, environ: dict[str, str]) -> None:
    options = LaunchOptions("cn", port=free_port(), dry_run=True)
    output = Output()
    assert output.run(options, {**environ, "XDG_CACHE_HOME": str(home / "cache")}) == 0
    assert f"--prefix-cache-dir {home / 'cache' / 'tether' / 'prefix'}" in output.err
    output = Output()
    assert output.run(options, {**environ, "TETHER_PREFIX_CACHE_DIR": "/elsewhere"}) == 0
    assert "--prefix-cache-dir" not in output.err  # the user's own setting stands


def test_an_mcp_config_goes_into_each_clients_own_mcp_config(home: Path, environ: dict[str, str]) -> None:
    from dataclasses import replace

    from tether.mcp import parse_mcp_servers

    servers = parse_mcp_servers(
        {
            "mcpServers": {
                "fs": {"command": "npx", "args": ["-y", "server-filesystem", "/src"], "env": {"A": "1"}},
                "search": {"url": "https://search.example/mcp", "headers": {"X-Key": "k"}},
            }
        }
    )
    target = replace(TARGET, mcp=servers, mcp_file=home / "mcp.json")
    oc_path = home / "opencode.json"
    oc_path.write_text(json.dumps({"mcp": {"fs": {"type": "local", "command": ["mine"]}}}))
    oc = json.loads(opencode.plan(target, oc_path, environ).files[0].after)["mcp"]
    assert oc["fs"] == {"type": "local", "command": ["mine"]}  # the user's own entry of that name stays
    assert oc["search"] == {
        "type": "remote",
        "url": "https://search.example/mcp",
        "headers": {"X-Key": "k"},
        "enabled": True,
    }
    cn = yaml.safe_load(continue_cli.plan(target, home / "config.yaml", environ).files[0].after)
    assert cn["mcpServers"][0] == {
        "name": "fs",
        "command": "npx",
        "args": ["-y", "server-filesystem", "/src"],
        "env": {"A": "1"},
    }
    assert cn["mcpServers"][1]["type"] == "streamable-http"
    argv = claude.plan(target, home / "claude.json", environ).argv
    assert argv[-2:] == ("--mcp-config", str(home / "mcp.json"))  # the file: its tokens stay off argv
    with pytest.raises(ConfigError, match="aider has no MCP client"):
        aider.plan(target, None, environ)
