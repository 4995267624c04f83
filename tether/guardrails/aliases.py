"""The closed alias table: tool names of common agent harnesses mapped to local tool names.

Small models are trained on transcripts from Claude Code, Codex, opencode, Cline,
Continue and Cursor, so they often call ``Read`` or ``execute_command`` when the
tools on offer are ``read_file`` and ``run_command``. This table lists, for each
such harness name (the *alias*), an ordered tuple of *canonical* local names; name
resolution takes the first canonical name that is actually offered.

Rules the conformance tests enforce:

* every target is in :data:`CANONICAL_NAMES` (the table never invents names);
* no alias key is itself a canonical name, so an alias never stands in for a real
  tool (an exact match of an offered name is tried long before aliases anyway);
* alias keys are unique after :func:`squash` (case and ``_-. `` ignored), because
  lookups are made by squashed key: ``Shell``, ``shell`` and ``SHELL`` are one alias.

Only names with the same meaning are grouped: ``apply_patch`` (a patch text) does
not map to ``edit_file`` (old/new strings), and ``MultiEdit`` only maps to a
multi-edit tool. Argument validation still runs on the resolved tool.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from types import MappingProxyType

__all__ = [
    "ALIASES",
    "CANONICAL_GROUPS",
    "CANONICAL_NAMES",
    "alias_targets",
    "squash",
]

_SEPARATORS = re.compile(r"[_\-. ]")


def squash(name: str) -> str:
    """``name`` lowercased with ``_``, ``-``, ``.`` and spaces removed: ``Write-File`` → ``writefile``."""
    return _SEPARATORS.sub("", name).lower()


#: concept -> canonical local names, in order of preference.
CANONICAL_GROUPS: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {
        "read": ("read_file", "read", "view_file", "cat_file", "cat"),
        "write": ("write_file", "write", "create_file"),
        "edit": ("edit_file", "edit", "str_replace"),
        "multi_edit": ("multi_edit",),
        "patch": ("patch", "apply_diff"),
        "shell": (
            "run_command",
            "bash",
            "run_shell_command",
            "shell_command",
            "exec_command",
            "terminal",
        ),
        "glob": ("glob", "find_files", "file_search"),
        "grep": ("grep", "search_text", "search_code", "ripgrep"),
        "list": ("list_directory", "list_dir", "ls"),
        "fetch": ("web_fetch", "fetch_url", "fetch"),
        "web_search": ("web_search", "search_web"),
        "todo": ("todo_write", "write_todos", "update_todos"),
        "notebook": ("notebook_edit", "edit_notebook"),
    }
)

#: every name an alias may resolve to.
CANONICAL_NAMES: frozenset[str] = frozenset(n for group in CANONICAL_GROUPS.values() for n in group)

# alias -> concept; the comment names the harness vocabulary it comes from.
_ALIAS_CONCEPTS: dict[str, str] = {
    # Claude Code
    "Read": "read",
    "Write": "write",
    "Edit": "edit",
    "MultiEdit": "multi_edit",
    "Bash": "shell",
    "Glob": "glob",
    "Grep": "grep",
    "LS": "list",
    "WebFetch": "fetch",  # also opencode's ``webfetch`` (same squashed key)
    "WebSearch": "web_search",
    "TodoWrite": "todo",  # also opencode's ``todowrite``
    "NotebookEdit": "notebook",
    # Codex (``shell`` also covers ``Shell``)
    "shell": "shell",
    "apply_patch": "patch",
    "update_plan": "todo",
    "grep_files": "grep",
    # opencode
    "list": "list",
    # Cline (its ``read_file`` is already canonical)
    "write_to_file": "write",
    "replace_in_file": "edit",
    "execute_command": "shell",
    "list_files": "list",
    "search_files": "grep",
    # Continue
    "create_new_file": "write",
    "edit_existing_file": "edit",
    "run_terminal_command": "shell",
    "file_glob_search": "glob",
    "grep_search": "grep",  # also Cursor
    "fetch_url_content": "fetch",
    # Cursor
    "run_terminal_cmd": "shell",
    # Anthropic text editor / OpenHands / SWE-agent
    "view": "read",
    "str_replace_editor": "edit",
    "str_replace_based_edit_tool": "edit",
    "execute_bash": "shell",
    # Gemini CLI
    "search_file_content": "grep",
    "google_web_search": "web_search",
}

#: alias -> canonical targets in order of preference (the first offered one wins).
ALIASES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {alias: CANONICAL_GROUPS[concept] for alias, concept in _ALIAS_CONCEPTS.items()}
)

_BY_SQUASHED: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {squash(alias): targets for alias, targets in ALIASES.items()}
)


def alias_targets(name: str) -> tuple[str, ...]:
    """Canonical targets for ``name`` looked up by squashed key; ``()`` when it is no alias."""
    return _BY_SQUASHED.get(squash(name), ())
