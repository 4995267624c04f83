"""The name-fix check on 30 MCP tools: the names a small model meets when its tools come from MCP
servers, and the names it is tempted to write instead.

The tools are those of four reference servers (filesystem, git, fetch, time) as ``--mcp-config``
offers them: ``<server>_<tool>``, with the tool's own name, ``mcp__<server>__<tool>`` and
``<server>.<tool>`` declared as aliases (:func:`tether.mcp.tools.mcp_tool`). The few-shot examples
use Claude Code's ``mcp__server__tool`` spelling and the servers' bare names, which an unconstrained
model copies. ``python -m tether.evals.name_fix_mcp`` prints the table.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.grammar.formats.base import ToolSpec

__all__ = ["MCP_CASES", "MCP_FEW_SHOT", "MCP_TOOLS"]

_PATH: dict[str, Any] = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
_REPO: dict[str, Any] = {
    "type": "object",
    "properties": {"repo_path": {"type": "string"}},
    "required": ["repo_path"],
}


def _tool(server: str, name: str, description: str, params: Mapping[str, Any]) -> ToolSpec:
    return ToolSpec(
        f"{server}_{name}", description, params, (name, f"mcp__{server}__{name}", f"{server}.{name}")
    )


def _obj(**props: str) -> dict[str, object]:
    return {
        "type": "object",
        "properties": {k: {"type": v} for k, v in props.items()},
        "required": list(props),
    }


MCP_TOOLS: tuple[ToolSpec, ...] = (
    _tool("filesystem", "read_text_file", "Read a text file.", _PATH),
    _tool("filesystem", "read_media_file", "Read an image or audio file.", _PATH),
    _tool("filesystem", "read_multiple_files", "Read several files at once.", _obj(paths="array")),
    _tool("filesystem", "write_file", "Create or overwrite a file.", _obj(path="string", content="string")),
    _tool("filesystem", "edit_file", "Edit lines of a text file.", _obj(path="string", edits="array")),
    _tool("filesystem", "create_directory", "Create a directory.", _PATH),
    _tool("filesystem", "list_directory", "List a directory's entries.", _PATH),
    _tool("filesystem", "list_directory_with_sizes", "List a directory with file sizes.", _PATH),
    _tool("filesystem", "directory_tree", "A JSON tree of a directory.", _PATH),
    _tool("filesystem", "move_file", "Move or rename a file.", _obj(source="string", destination="string")),
    _tool(
        "filesystem", "search_files", "Find files matching a pattern.", _obj(path="string", pattern="string")
    ),
    _tool("filesystem", "get_file_info", "A file's size, times and permissions.", _PATH),
    _tool("filesystem", "list_allowed_directories", "The directories the server may access.", _obj()),
    _tool("filesystem", "read_file", "Read a file (deprecated: use read_text_file).", _PATH),
    _tool("git", "git_status", "The working tree status.", _REPO),
    _tool("git", "git_diff_unstaged", "Changes not yet staged.", _REPO),
    _tool("git", "git_diff_staged", "Changes staged for commit.", _REPO),
    _tool(
        "git", "git_diff", "Differences with a branch or commit.", _obj(repo_path="string", target="string")
    ),
    _tool("git", "git_commit", "Record staged changes.", _obj(repo_path="string", message="string")),
    _tool("git", "git_add", "Stage files.", _obj(repo_path="string", files="array")),
    _tool("git", "git_reset", "Unstage all staged changes.", _REPO),
    _tool("git", "git_log", "The commit log.", _REPO),
    _tool("git", "git_create_branch", "Create a branch.", _obj(repo_path="string", branch_name="string")),
    _tool("git", "git_checkout", "Switch branches.", _obj(repo_path="string", branch_name="string")),
    _tool("git", "git_show", "The contents of a commit.", _obj(repo_path="string", revision="string")),
    _tool("git", "git_branch", "List branches.", _obj(repo_path="string", branch_type="string")),
    _tool("fetch", "fetch", "Fetch a URL and return its content as markdown.", _obj(url="string")),
    _tool("time", "get_current_time", "The current time in a time zone.", _obj(timezone="string")),
    _tool(
        "time",
        "convert_time",
        "Convert a time between time zones.",
        _obj(source_timezone="string", time="string", target_timezone="string"),
    ),
    _tool("memory", "read_graph", "Read the whole knowledge graph.", _obj()),
)

MCP_FEW_SHOT = (
    "Examples of good replies:\n"
    'User: show me setup.py\nAssistant: {"tool_calls": [{"name": "mcp__filesystem__read_file", "arguments": {"path": "setup.py"}}]}\n'
    'User: what changed?\nAssistant: {"tool_calls": [{"name": "git_status", "arguments": {"repo_path": "."}}]}\n'
    'User: get example.com\nAssistant: {"tool_calls": [{"name": "fetch.fetch", "arguments": {"url": "https://example.com"}}]}\n'
    'User: what time is it in Tokyo?\nAssistant: {"tool_calls": [{"name": "get_current_time", "arguments": {"timezone": "Asia/Tokyo"}}]}'
)

_FILES = ["main.py", "README.md", "notes.txt", "app/server.py", "data.csv"]
_ZONES = ["Europe/Lisbon", "America/New_York", "Asia/Tokyo"]


def _cases() -> tuple[str, ...]:
    out: list[str] = []
    out += [f"show me {f}" for f in _FILES]
    out += [f"What is in the folder {d}?" for d in ("src", "tests", "docs")]
    out += [f"save hello to {f}" for f in _FILES[:3]]
    out += [
        "what changed?",
        "Show the git log.",
        "Stage main.py.",
        "Commit with message 'fix'.",
        "List the branches.",
    ]
    out += [f"fetch https://{h}" for h in ("example.com", "python.org", "pypi.org")]
    out += [f"What time is it in {z}?" for z in _ZONES]
    out += ["Find all .py files.", "How big is data.csv?", "Rename a.txt to b.txt."]
    return tuple(out)


MCP_CASES = _cases()


if __name__ == "__main__":  # pragma: no cover - manual run: python -m tether.evals.name_fix_mcp
    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.locate import bundled_model_path
    from tether.evals.name_fix import run_name_fix, summary
    from tether.guardrails.names import declared_aliases, resolve_name

    results = run_name_fix(
        LlamaCppEngine(bundled_model_path(), n_ctx=8192),
        cases=MCP_CASES,
        tools=MCP_TOOLS,
        few_shot=MCP_FEW_SHOT,
    )
    print(summary(results))  # noqa: T201
    wrong = results["off"].wrong_names
    offered, aliases = [t.name for t in MCP_TOOLS], declared_aliases(MCP_TOOLS)
    resolved = [w for w in wrong if resolve_name(w, offered, aliases).resolved]
    print(  # noqa: T201
        f"off: {len(resolved)} of {len(wrong)} names not offered resolve by layer 1 (declared aliases and the rest)"
    )
