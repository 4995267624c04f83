"""Conformance of the closed alias table."""

from __future__ import annotations

import pytest

from tether.guardrails import (
    ALIASES,
    CANONICAL_GROUPS,
    CANONICAL_NAMES,
    Resolution,
    alias_targets,
    resolve_name,
    squash,
)

HARNESS_VOCABULARY = [
    # Claude Code
    "Read", "Write", "Edit", "MultiEdit", "Bash", "Glob", "Grep", "LS", "WebFetch", "WebSearch",
    "TodoWrite", "NotebookEdit",
    # Codex
    "shell", "Shell", "apply_patch",
    # Cline
    "write_to_file", "replace_in_file", "execute_command", "list_files", "search_files",
    # Cursor / Anthropic editor
    "run_terminal_cmd", "view", "str_replace_editor",
]  # fmt: skip


def test_every_target_is_canonical() -> None:
    for alias, targets in ALIASES.items():
        assert targets, alias
        assert set(targets) <= CANONICAL_NAMES, alias


def test_no_alias_key_is_a_canonical_name() -> None:
    assert not set(ALIASES) & CANONICAL_NAMES


def test_alias_keys_are_unique_after_squash() -> None:
    squashed = [squash(a) for a in ALIASES]
    assert len(squashed) == len(set(squashed))


def test_canonical_groups_do_not_overlap() -> None:
    seen: dict[str, str] = {}
    for concept, names in CANONICAL_GROUPS.items():
        for name in names:
            assert name not in seen, (name, concept, seen.get(name))
            seen[name] = concept


@pytest.mark.parametrize("name", HARNESS_VOCABULARY)
def test_harness_vocabulary_is_covered(name: str) -> None:
    assert alias_targets(name)


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_an_offered_alias_name_is_never_redirected(alias: str) -> None:
    # A real tool named like an alias wins, even when a canonical target is offered too.
    offered = [*ALIASES[alias], alias]
    assert resolve_name(alias, offered).name == alias


@pytest.mark.parametrize("alias", sorted(ALIASES))
def test_first_offered_target_wins(alias: str) -> None:
    # Targets spelled like the alias itself ("Bash"/"bash") resolve earlier, by case or squash.
    targets = [t for t in ALIASES[alias] if squash(t) != squash(alias)]
    for i, target in enumerate(targets):
        offered = list(reversed(targets[i:]))  # order of ``offered`` must not matter
        assert resolve_name(alias, offered) == Resolution(target, "alias"), (alias, offered)


def test_alias_spelled_like_a_target_resolves_by_case_first() -> None:
    assert resolve_name("Bash", ["run_command", "bash"]) == Resolution("bash", "case")
    assert resolve_name("Bash", ["run_command"]) == Resolution("run_command", "alias")


def test_lookup_ignores_case_and_separators() -> None:
    assert alias_targets("BASH") == alias_targets("Bash") == alias_targets("bash")
    assert alias_targets("web-fetch") == alias_targets("WebFetch")
    assert alias_targets("not_an_alias") == ()
