"""The ``declared`` stage of layer 1 (tether.guardrails.names): names a tool declares as aliases
resolve to it, ambiguous or shadowing aliases are dropped, offered names win; and the aliases,
name, kind and schema an MCP tool gets in the tool box (tether.mcp.tools.mcp_tool)."""

from __future__ import annotations

from typing import Any

import mcp_types as types
import pytest

from tether.grammar.formats.base import ToolSpec
from tether.guardrails.names import Resolution, declared_aliases, resolve_name
from tether.mcp.tools import mcp_tool
from tether.sandbox.toolbox import ToolResult

GIT_STATUS = ToolSpec(
    "git_git_status",
    "Show the working tree status",
    aliases=("git_status", "mcp__git__git_status", "git.git_status"),
)
READ_FILE = ToolSpec("read_file", "Read a file")
TOOLS = [GIT_STATUS, READ_FILE]
OFFERED = [t.name for t in TOOLS]


# --- declared_aliases -----------------------------------------------------------------------------


def test_declared_aliases_maps_each_lowercased_alias_to_its_tool() -> None:
    assert declared_aliases(TOOLS) == {
        "git_status": "git_git_status",
        "mcp__git__git_status": "git_git_status",
        "git.git_status": "git_git_status",
    }


def test_declared_aliases_lowercases_aliases() -> None:
    tools = [ToolSpec("fs_ReadFile", aliases=("ReadFile", "fs.ReadFile"))]
    assert declared_aliases(tools) == {"readfile": "fs_ReadFile", "fs.readfile": "fs_ReadFile"}


def test_alias_declared_by_two_tools_is_dropped() -> None:
    tools = [
        ToolSpec("git_status", aliases=("status", "git.status")),
        ToolSpec("svn_status", aliases=("status", "svn.status")),
    ]
    aliases = declared_aliases(tools)
    assert "status" not in aliases
    assert aliases == {"git.status": "git_status", "svn.status": "svn_status"}


def test_alias_declared_by_two_tools_in_different_case_is_dropped() -> None:
    tools = [ToolSpec("a_status", aliases=("Status",)), ToolSpec("b_status", aliases=("STATUS",))]
    assert declared_aliases(tools) == {}


def test_alias_declared_twice_by_one_tool_is_kept() -> None:
    tools = [ToolSpec("git_status", aliases=("status", "Status"))]
    assert declared_aliases(tools) == {"status": "git_status"}


def test_alias_equal_to_an_offered_name_is_dropped() -> None:
    tools = [READ_FILE, ToolSpec("fs_read_file", aliases=("read_file", "fs.read_file"))]
    assert declared_aliases(tools) == {"fs.read_file": "fs_read_file"}


def test_alias_equal_to_an_offered_name_in_another_case_is_dropped() -> None:
    tools = [READ_FILE, ToolSpec("fs_read_file", aliases=("READ_FILE",))]
    assert declared_aliases(tools) == {}


def test_declared_aliases_accepts_any_iterable() -> None:
    assert declared_aliases(iter(TOOLS)) == declared_aliases(TOOLS)


# --- resolve_name's declared stage ----------------------------------------------------------------


@pytest.mark.parametrize(
    "written",
    [
        "mcp__git__git_status",
        "git.git_status",
        "GIT_STATUS",
        "git_status",
        "Git.Git_Status",
        "MCP__GIT__GIT_STATUS",
        "  git_status  ",
    ],
)
def test_declared_alias_resolves_to_the_tool_that_declares_it(written: str) -> None:
    assert resolve_name(written, OFFERED, declared_aliases(TOOLS)) == Resolution("git_git_status", "declared")


@pytest.mark.parametrize("written", ["mcp__git__git_status", "GIT_STATUS", "git_status"])
def test_without_declared_aliases_the_names_do_not_resolve(written: str) -> None:
    # ("git.git_status" squashes to the offered name, so it resolves without aliases too)
    assert resolve_name(written, OFFERED).name is None
    assert resolve_name(written, OFFERED, {}).name is None


def test_alias_two_tools_declare_resolves_to_neither() -> None:
    tools = [
        ToolSpec("git_status", aliases=("status", "git.status")),
        ToolSpec("svn_status", aliases=("status", "svn.status")),
    ]
    offered = [t.name for t in tools]
    resolution = resolve_name("status", offered, declared_aliases(tools))
    assert resolution.name is None
    assert resolution.method is None


def test_an_alias_is_the_whole_name_so_a_server_prefix_is_never_crossed() -> None:
    # the name with its MCP prefix stripped would be another server's alias: the prefix counts
    tools = [
        ToolSpec("fs_write_file", aliases=("write_file", "mcp__fs__write_file", "fs.write_file")),
        ToolSpec("git_status", aliases=("status", "mcp__git__status", "git.status")),
    ]
    aliases = declared_aliases(tools)
    offered = [t.name for t in tools]
    assert resolve_name("mcp__git__write_file", offered, aliases).name is None
    assert resolve_name("mcp__fs__status", offered, aliases).name is None
    assert resolve_name("functions.write_file", offered, aliases).name is None
    assert resolve_name("mcp__fs__write_file", offered, aliases) == Resolution("fs_write_file", "declared")


def test_a_declared_alias_wins_over_a_builtin_of_the_bare_name() -> None:
    tools = [ToolSpec("read_file"), ToolSpec("fs_read_file", aliases=("read_file", "mcp__fs__read_file"))]
    aliases = declared_aliases(tools)  # the bare alias equals an offered name: dropped
    offered = [t.name for t in tools]
    assert resolve_name("mcp__fs__read_file", offered, aliases) == Resolution("fs_read_file", "declared")
    assert resolve_name("read_file", offered, aliases) == Resolution("read_file", "exact")


def test_alias_pointing_at_a_tool_not_offered_does_not_resolve() -> None:
    resolution = resolve_name("git_status", ["read_file"], {"git_status": "git_git_status"})
    assert resolution.name is None


def test_exact_offered_name_wins_over_a_declared_alias() -> None:
    offered = ["git_status", "git_git_status"]
    aliases = {"git_status": "git_git_status"}  # as if declared_aliases had kept it
    assert resolve_name("git_status", offered, aliases) == Resolution("git_status", "exact")


def test_case_match_of_an_offered_name_wins_over_a_declared_alias() -> None:
    offered = ["git_status", "git_git_status"]
    aliases = {"git_status": "git_git_status"}
    assert resolve_name("GIT_STATUS", offered, aliases) == Resolution("git_status", "case")


def test_offered_name_wins_through_declared_aliases() -> None:
    tools = [ToolSpec("git_status"), GIT_STATUS]
    offered = [t.name for t in tools]
    aliases = declared_aliases(tools)
    assert resolve_name("git_status", offered, aliases) == Resolution("git_status", "exact")
    assert resolve_name("git.git_status", offered, aliases) == Resolution("git_git_status", "declared")


def test_declared_comes_before_squash() -> None:
    # "gitstatus" squashes to the name of the offered "git_status"; the alias another tool declares wins
    tools = [ToolSpec("git_status"), ToolSpec("vcs_status", aliases=("gitstatus",))]
    offered = [t.name for t in tools]
    assert resolve_name("gitstatus", offered, declared_aliases(tools)) == Resolution("vcs_status", "declared")
    assert resolve_name("gitstatus", offered) == Resolution("git_status", "squash")


# --- mcp_tool -------------------------------------------------------------------------------------

SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"repo_path": {"type": "string"}},
    "required": ["repo_path"],
}

CALLS: list[tuple[str, dict[str, Any]]] = []


async def _call(name: str, arguments: dict[str, Any]) -> ToolResult:
    CALLS.append((name, arguments))
    return ToolResult(f"called {name}")


def _mcp(
    name: str = "git_status",
    *,
    description: str | None = "Shows the working tree status",
    title: str | None = None,
    schema: dict[str, Any] | None = None,
    read_only: bool | None = None,
) -> types.Tool:
    annotations = None if read_only is None else types.ToolAnnotations(read_only_hint=read_only)
    return types.Tool(
        name=name,
        title=title,
        description=description,
        input_schema=SCHEMA if schema is None else schema,
        annotations=annotations,
    )


def test_mcp_tool_is_named_server_underscore_tool() -> None:
    assert mcp_tool("git", _mcp(), _call).name == "git_git_status"


def test_mcp_tool_name_is_sanitised() -> None:
    assert mcp_tool("my.server", _mcp("read file"), _call).name == "my_server_read_file"


def test_read_only_hint_true_is_a_read_tool() -> None:
    assert mcp_tool("git", _mcp(read_only=True), _call).kind == "read"


@pytest.mark.parametrize("read_only", [False, None])
def test_any_other_tool_is_a_command(read_only: bool | None) -> None:
    assert mcp_tool("git", _mcp(read_only=read_only), _call).kind == "command"


def test_annotations_without_read_only_hint_make_a_command() -> None:
    tool = _mcp()
    tool = tool.model_copy(update={"annotations": types.ToolAnnotations(destructive_hint=False)})
    assert mcp_tool("git", tool, _call).kind == "command"


def test_mcp_tool_declares_three_aliases() -> None:
    tool = mcp_tool("git", _mcp(), _call)
    assert tool.aliases == ("git_status", "mcp__git__git_status", "git.git_status")
    assert tool.tool_spec().aliases == tool.aliases


def test_mcp_tool_aliases_resolve_through_the_declared_stage() -> None:
    tools = [mcp_tool("git", _mcp(), _call).tool_spec(), READ_FILE]
    offered = [t.name for t in tools]
    aliases = declared_aliases(tools)
    for written in ("git_status", "mcp__git__git_status", "git.git_status"):
        assert resolve_name(written, offered, aliases) == Resolution("git_git_status", "declared")


def test_same_tool_on_two_servers_keeps_only_the_qualified_aliases() -> None:
    tools = [mcp_tool(server, _mcp("status"), _call).tool_spec() for server in ("git", "hg")]
    offered = [t.name for t in tools]
    aliases = declared_aliases(tools)
    assert "status" not in aliases
    assert resolve_name("status", offered, aliases).name is None
    assert resolve_name("hg.status", offered, aliases) == Resolution("hg_status", "declared")
    assert resolve_name("mcp__git__status", offered, aliases).name == "git_status"


def test_object_input_schema_is_kept() -> None:
    assert mcp_tool("git", _mcp(), _call).parameters == SCHEMA


@pytest.mark.parametrize("schema", [{"type": "array", "items": {"type": "string"}}, {}, {"type": "string"}])
def test_non_object_input_schema_is_replaced_by_an_empty_object(schema: dict[str, Any]) -> None:
    tool = mcp_tool("git", _mcp(schema=schema), _call)
    assert tool.parameters == {"type": "object", "properties": {}}


def test_description_is_capped_at_1024_chars() -> None:
    tool = mcp_tool("git", _mcp(description="d" * 3000), _call)
    assert tool.description == "d" * 1024


def test_short_description_is_kept_and_stripped() -> None:
    assert mcp_tool("git", _mcp(description="  Shows status.\n"), _call).description == "Shows status."


def test_title_stands_in_for_a_missing_description() -> None:
    assert mcp_tool("git", _mcp(description=None, title="Git status"), _call).description == "Git status"
    assert mcp_tool("git", _mcp(description=None), _call).description == ""


async def test_handler_calls_with_the_tools_own_name() -> None:
    CALLS.clear()
    tool = mcp_tool("git", _mcp(), _call)
    result = await tool.handler({"repo_path": "."})
    assert result == ToolResult("called git_status")
    assert CALLS == [("git_status", {"repo_path": "."})]
