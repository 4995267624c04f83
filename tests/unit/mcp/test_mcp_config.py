"""The ``--mcp-config`` reader (tether.mcp.config): the Claude-Desktop and opencode forms, tether's own
keys, skipped entries, every ConfigError (each naming the server and the key), and ``tool_name``."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from tether.errors import ConfigError
from tether.mcp.config import McpServerSpec, load_mcp_config, parse_mcp_servers, read_mcp_config, tool_name

CLAUDE_DESKTOP: dict[str, Any] = {
    "mcpServers": {
        "git": {
            "command": "uvx",
            "args": ["mcp-server-git", "--repository", "."],
            "env": {"GIT_AUTHOR_NAME": "tether"},
        },
        "search": {
            "url": "https://mcp.example.com/mcp",
            "headers": {"Authorization": "Bearer abc"},
        },
    }
}


def _error(entry: Any, name: str = "srv") -> str:
    """The message of the ConfigError that ``{"mcpServers": {name: entry}}`` raises."""
    with pytest.raises(ConfigError) as info:
        parse_mcp_servers({"mcpServers": {name: entry}}, where="cfg.json")
    return str(info.value)


def _one(entry: dict[str, Any]) -> McpServerSpec:
    (spec,) = parse_mcp_servers({"mcpServers": {"srv": entry}})
    return spec


# --- the accepted forms -------------------------------------------------------------------------


def test_claude_desktop_stdio_entry_keeps_command_args_and_env() -> None:
    git, _ = parse_mcp_servers(CLAUDE_DESKTOP)
    assert git == McpServerSpec(
        name="git",
        transport="stdio",
        command="uvx",
        args=("mcp-server-git", "--repository", "."),
        env={"GIT_AUTHOR_NAME": "tether"},
    )


def test_claude_desktop_http_entry_keeps_url_and_headers() -> None:
    _, search = parse_mcp_servers(CLAUDE_DESKTOP)
    assert search.name == "search"
    assert search.transport == "http"
    assert search.url == "https://mcp.example.com/mcp"
    assert dict(search.headers) == {"Authorization": "Bearer abc"}
    assert search.command == ""
    assert search.args == ()


def test_servers_keep_the_order_of_the_file() -> None:
    names = [s.name for s in parse_mcp_servers(CLAUDE_DESKTOP)]
    assert names == ["git", "search"]


def test_defaults_of_tethers_own_keys() -> None:
    spec = _one({"command": "server"})
    assert spec.network is False
    assert spec.read_only_paths == ()
    assert spec.timeout_s == 60.0
    assert spec.args == ()
    assert dict(spec.env) == {}


def test_http_type_without_url_key_is_still_an_http_entry() -> None:
    spec = _one({"type": "streamable-http", "url": "http://localhost:8080/mcp"})
    assert spec.transport == "http"
    assert spec.url == "http://localhost:8080/mcp"
    assert dict(spec.headers) == {}


def test_opencode_command_list_and_environment() -> None:
    data = {
        "mcp": {
            "fs": {
                "type": "local",
                "command": ["npx", "-y", "@modelcontextprotocol/server-filesystem"],
                "environment": {"DEBUG": "1"},
            }
        }
    }
    (spec,) = parse_mcp_servers(data)
    assert spec.name == "fs"
    assert spec.transport == "stdio"
    assert spec.command == "npx"
    assert spec.args == ("-y", "@modelcontextprotocol/server-filesystem")
    assert dict(spec.env) == {"DEBUG": "1"}


def test_opencode_command_list_is_followed_by_args() -> None:
    spec = _one({"command": ["python", "-m", "srv"], "args": ["--verbose"]})
    assert spec.command == "python"
    assert spec.args == ("-m", "srv", "--verbose")


def test_env_wins_over_environment_for_the_same_variable() -> None:
    spec = _one(
        {"command": "s", "environment": {"A": "from-environment", "B": "b"}, "env": {"A": "from-env"}}
    )
    assert dict(spec.env) == {"A": "from-env", "B": "b"}


def test_opencode_remote_entry_is_http() -> None:
    (spec,) = parse_mcp_servers({"mcp": {"docs": {"type": "remote", "url": "https://docs.example/mcp"}}})
    assert spec.transport == "http"
    assert spec.url == "https://docs.example/mcp"


def test_bare_map_of_servers_is_read_like_mcp_servers() -> None:
    (spec,) = parse_mcp_servers({"git": {"command": "uvx"}})
    assert spec.name == "git"
    assert spec.command == "uvx"


def test_tether_keys_network_read_only_paths_and_timeout() -> None:
    spec = _one({"command": "s", "network": True, "readOnlyPaths": ["/opt/data", "~/notes"], "timeout": 12.5})
    assert spec.network is True
    assert spec.read_only_paths == ("/opt/data", "~/notes")
    assert spec.timeout_s == 12.5


def test_timeout_over_1000_is_read_as_milliseconds() -> None:
    assert _one({"command": "s", "timeout": 30000}).timeout_s == 30.0
    assert _one({"command": "s", "timeout": 1500}).timeout_s == 1.5


def test_timeout_of_exactly_1000_is_seconds() -> None:
    assert _one({"command": "s", "timeout": 1000}).timeout_s == 1000.0


def test_integer_timeout_becomes_a_float() -> None:
    timeout = _one({"command": "s", "timeout": 5}).timeout_s
    assert timeout == 5.0
    assert isinstance(timeout, float)


def test_disabled_true_and_enabled_false_entries_are_skipped() -> None:
    data = {
        "mcpServers": {
            "off": {"command": "a", "disabled": True},
            "not-on": {"command": "b", "enabled": False},
            "on": {"command": "c", "disabled": False, "enabled": True},
        }
    }
    assert [s.name for s in parse_mcp_servers(data)] == ["on"]


def test_a_disabled_entry_is_skipped_before_it_is_checked() -> None:
    data = {"mcpServers": {"bad name": {"disabled": True, "type": "sse", "timeout": "soon"}}}
    assert parse_mcp_servers(data) == ()


def test_keys_of_other_clients_are_ignored() -> None:
    spec = _one({"command": "s", "alwaysAllow": ["read"], "description": "a server"})
    assert spec.command == "s"


def test_spec_is_frozen() -> None:
    spec = _one({"command": "s"})
    with pytest.raises(AttributeError):
        spec.command = "other"  # type: ignore[misc]


# --- ConfigError: each names the server and the key ----------------------------------------------


def test_missing_command_and_url() -> None:
    message = _error({"args": ["x"]})
    assert "cfg.json" in message
    assert "server 'srv'" in message
    assert "'command'" in message
    assert "'url'" in message


@pytest.mark.parametrize("command", ["", "   ", [], [1, 2], 42, None])
def test_empty_or_wrong_command(command: Any) -> None:
    message = _error({"command": command})
    assert "server 'srv'" in message
    assert "'command'" in message


@pytest.mark.parametrize(
    ("entry", "key"),
    [
        *(({"url": url}, "url") for url in ("ftp://host/mcp", "localhost:8080", "", 8080)),
        ({"type": "http", "command": "s"}, "url"),
        *(({"command": "s", "args": args}, "args") for args in ("--flag", ["ok", 3], {"a": "b"})),
        ({"command": "s", "env": {"PORT": 8080}}, "env"),
        ({"command": "s", "environment": {"PORT": 8080}}, "environment"),
        ({"command": "s", "env": ["A=1"]}, "env"),
        ({"url": "https://example.com/mcp", "headers": {"X-Retries": 3}}, "headers"),
        ({"command": "s", "network": "yes"}, "network"),
        ({"command": "s", "readOnlyPaths": "/opt"}, "readOnlyPaths"),
    ],
)
def test_a_bad_value_names_the_server_and_the_key(entry: dict[str, Any], key: str) -> None:
    message = _error(entry)
    assert "server 'srv'" in message and f"'{key}'" in message


@pytest.mark.parametrize("kind", ["sse", "SSE"])
def test_sse_transport_is_refused(kind: str) -> None:
    message = _error({"type": kind, "url": "https://example.com/sse"})
    assert "server 'srv'" in message
    assert "SSE" in message
    assert "streamable HTTP" in message


@pytest.mark.parametrize("timeout", ["60", True, None, [60]])
def test_timeout_that_is_not_a_number(timeout: Any) -> None:
    message = _error({"command": "s", "timeout": timeout})
    assert "server 'srv'" in message
    assert "'timeout'" in message
    assert "number of seconds" in message


@pytest.mark.parametrize("timeout", [0, -5, float("inf"), float("nan")])
def test_timeout_that_is_not_positive_and_finite(timeout: float) -> None:
    message = _error({"command": "s", "timeout": timeout})
    assert "server 'srv'" in message
    assert "'timeout'" in message
    assert "positive" in message


@pytest.mark.parametrize("name", ["bad name", "-leading-dash", "", "a" * 49, "sl/ash"])
def test_bad_server_name(name: str) -> None:
    message = _error({"command": "s"}, name=name)
    assert f"server {name!r}" in message
    assert "server name" in message


def test_longest_server_name_is_accepted() -> None:
    (spec,) = parse_mcp_servers({"mcpServers": {"a" * 48: {"command": "s"}}})
    assert spec.name == "a" * 48


def test_entry_that_is_not_an_object() -> None:
    message = _error("uvx mcp-server-git")
    assert "server 'srv'" in message
    assert "'command'" in message


@pytest.mark.parametrize("data", [[], "mcpServers", None, 3])
def test_top_level_not_an_object(data: Any) -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.json: expected a JSON object"):
        parse_mcp_servers(data, where="cfg.json")


def test_mcp_servers_not_an_object() -> None:
    with pytest.raises(ConfigError, match=r"^cfg\.json: 'mcpServers' must be an object"):
        parse_mcp_servers({"mcpServers": ["git"]}, where="cfg.json")


def test_default_where_is_mcp_config() -> None:
    with pytest.raises(ConfigError, match=r"^mcp config: server 'srv'"):
        parse_mcp_servers({"mcpServers": {"srv": {}}})


# --- files and inline JSON ------------------------------------------------------------------------


def test_load_mcp_config_reads_a_file(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text(json.dumps(CLAUDE_DESKTOP), encoding="utf-8")
    assert load_mcp_config(file) == parse_mcp_servers(CLAUDE_DESKTOP)
    assert load_mcp_config(str(file)) == parse_mcp_servers(CLAUDE_DESKTOP)


def test_load_mcp_config_expands_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "mcp.json").write_text(json.dumps(CLAUDE_DESKTOP), encoding="utf-8")
    assert [s.name for s in load_mcp_config("~/mcp.json")] == ["git", "search"]


def test_errors_in_a_file_name_the_file(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text(
        json.dumps({"mcpServers": {"git": {"command": "uvx", "timeout": "1m"}}}), encoding="utf-8"
    )
    with pytest.raises(ConfigError) as info:
        load_mcp_config(file)
    message = str(info.value)
    assert message.startswith(f"{file}: server 'git'")
    assert "'timeout'" in message


def test_unreadable_file(tmp_path: Path) -> None:
    missing = tmp_path / "nope.json"
    with pytest.raises(ConfigError) as info:
        load_mcp_config(missing)
    message = str(info.value)
    assert message.startswith(f"--mcp-config {missing}: cannot read it")
    assert isinstance(info.value.__cause__, OSError)


def test_a_directory_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        load_mcp_config(tmp_path)


def test_invalid_json_file(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text('{"mcpServers": {', encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_mcp_config(file)
    assert str(info.value).startswith(f"--mcp-config {file}: not valid JSON")
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


def test_file_that_is_not_utf8(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_bytes(b'{"mcpServers": {"\xff": {}}}')
    with pytest.raises(ConfigError, match="not valid JSON"):
        load_mcp_config(file)


def test_read_mcp_config_takes_inline_json() -> None:
    value = json.dumps(CLAUDE_DESKTOP)
    assert read_mcp_config(value) == parse_mcp_servers(CLAUDE_DESKTOP)
    assert read_mcp_config(f"  \n{value}") == parse_mcp_servers(CLAUDE_DESKTOP)


def test_read_mcp_config_takes_a_path(tmp_path: Path) -> None:
    file = tmp_path / "mcp.json"
    file.write_text(json.dumps(CLAUDE_DESKTOP), encoding="utf-8")
    assert read_mcp_config(str(file)) == parse_mcp_servers(CLAUDE_DESKTOP)


def test_read_mcp_config_missing_path_is_a_file_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read it"):
        read_mcp_config(str(tmp_path / "missing.json"))


def test_read_mcp_config_inline_errors_name_the_option() -> None:
    with pytest.raises(ConfigError) as info:
        read_mcp_config('{"mcpServers": {"git": {"command": "uvx", "args": "x"}}}')
    message = str(info.value)
    assert message.startswith("--mcp-config: server 'git'")
    assert "'args'" in message


def test_read_mcp_config_invalid_inline_json() -> None:
    with pytest.raises(ConfigError) as info:
        read_mcp_config('{"mcpServers": {"git": }')
    assert str(info.value).startswith("--mcp-config: the inline JSON is not valid")
    assert isinstance(info.value.__cause__, json.JSONDecodeError)


# --- tool_name ------------------------------------------------------------------------------------

_API_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")


def test_tool_name_joins_server_and_tool() -> None:
    assert tool_name("git", "git_status") == "git_git_status"
    assert tool_name("fs-2", "read-file") == "fs-2_read-file"


def test_tool_name_sanitises_characters() -> None:
    assert tool_name("my.server", "read file") == "my_server_read_file"
    assert tool_name("srv", "a/b:c") == "srv_a_b_c"
    assert tool_name("srv", "héllo wörld") == "srv_h_llo_w_rld"


def test_tool_name_collapses_runs_and_strips_edge_underscores() -> None:
    assert tool_name("srv", "a  //  b") == "srv_a_b"
    assert tool_name("srv", "tool!!") == "srv_tool"
    assert tool_name(".", "..") == "tool"


def test_tool_name_of_exactly_64_chars_is_kept() -> None:
    tool = "t" * (64 - len("srv_"))
    assert tool_name("srv", tool) == f"srv_{tool}"


def test_tool_name_over_64_chars_is_capped_with_a_hash_suffix() -> None:
    tool = "t" * 100
    name = tool_name("srv", tool)
    assert len(name) == 64
    assert _API_NAME.fullmatch(name)
    assert name.startswith("srv_ttt")
    assert re.fullmatch(r"srv_t{51}_[0-9a-f]{8}", name)


def test_tool_name_hash_suffix_is_stable() -> None:
    tool = "describe_" + "x" * 80
    assert tool_name("srv", tool) == tool_name("srv", tool)


def test_long_names_that_differ_only_at_the_end_stay_distinct() -> None:
    prefix = "list_" + "very_long_" * 10
    first = tool_name("srv", prefix + "issues")
    second = tool_name("srv", prefix + "pulls")
    assert first != second
    assert first[:55] == second[:55]
    assert len(first) == len(second) == 64
