"""Layer 1 name resolution: each stage, ambiguity, and the never-outside-offered property."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.guardrails import ALIASES, CANONICAL_NAMES, Resolution, resolve_name, strip_namespace

LOCAL = ["read_file", "write_file", "run_command", "list_dir", "grep"]
MCP = ["mcp__github__create_issue", "mcp__fs__read_file", "search"]


@pytest.mark.parametrize(
    ("written", "offered", "name", "method"),
    [
        # exact
        ("read_file", LOCAL, "read_file", "exact"),
        ("Read", ["Read", "read_file"], "Read", "exact"),  # an offered name always wins over aliases
        # case-insensitive, unique hit only
        ("READ_FILE", LOCAL, "read_file", "case"),
        ("grep", ["Grep", "read_file"], "Grep", "case"),
        # namespace prefixes, stripped once, then exact / case
        ("functions.read_file", LOCAL, "read_file", "namespace"),
        ("functions__read_file", LOCAL, "read_file", "namespace"),
        ("tools.write_file", LOCAL, "write_file", "namespace"),
        ("tools__write_file", LOCAL, "write_file", "namespace"),
        ("tool.run_command", LOCAL, "run_command", "namespace"),
        ("tool__run_command", LOCAL, "run_command", "namespace"),
        ("default_api.list_dir", LOCAL, "list_dir", "namespace"),
        ("mcp__filesystem__read_file", LOCAL, "read_file", "namespace"),
        ("mcp__my_server__write_file", LOCAL, "write_file", "namespace"),
        ("Functions.READ_FILE", LOCAL, "read_file", "namespace"),
        # the model dropped the MCP prefix of an offered tool
        ("create_issue", MCP, "mcp__github__create_issue", "namespace"),
        # separator squash
        ("WriteFile", LOCAL, "write_file", "squash"),
        ("write-file", LOCAL, "write_file", "squash"),
        ("write file", LOCAL, "write_file", "squash"),
        ("Write.File", LOCAL, "write_file", "squash"),
        ("functions.WriteFile", LOCAL, "write_file", "squash"),
        ("CreateIssue", MCP, "mcp__github__create_issue", "squash"),
        # closed alias table, first offered target wins
        ("Read", LOCAL, "read_file", "alias"),
        ("Read", ["cat", "view_file"], "view_file", "alias"),
        ("Bash", LOCAL, "run_command", "alias"),
        ("Shell", LOCAL, "run_command", "alias"),
        ("shell", ["bash"], "bash", "alias"),
        ("execute_command", LOCAL, "run_command", "alias"),
        ("run_terminal_cmd", LOCAL, "run_command", "alias"),
        ("write_to_file", LOCAL, "write_file", "alias"),
        ("LS", LOCAL, "list_dir", "alias"),
        ("list_files", LOCAL, "list_dir", "alias"),
        ("Grep", ["search_text"], "search_text", "alias"),
        ("search_files", LOCAL, "grep", "alias"),
        ("str_replace_editor", ["edit_file"], "edit_file", "alias"),
        ("view", LOCAL, "read_file", "alias"),
        ("functions.Bash", LOCAL, "run_command", "alias"),
        ("Read", MCP, "mcp__fs__read_file", "alias"),
        # split: the name carries other text
        ("functions.read_file:0", LOCAL, "read_file", "split"),
        ("read_file()", LOCAL, "read_file", "split"),
        ('read_file(path="a.txt")', LOCAL, "read_file", "split"),
        ("to=functions.write_file", LOCAL, "write_file", "split"),
        ("<run_command>", LOCAL, "run_command", "split"),
        ("call list_dir now", LOCAL, "list_dir", "split"),
    ],
)
def test_resolves(written: str, offered: list[str], name: str, method: str) -> None:
    assert resolve_name(written, offered) == Resolution(name, method)


@pytest.mark.parametrize(
    ("written", "offered", "candidates"),
    [
        ("READ", ["Read", "read"], ("Read", "read")),  # case: two hits
        ("writefile", ["write_file", "write-file"], ("write_file", "write-file")),  # squash: two hits
        ("read_file, write_file", LOCAL, ("read_file", "write_file")),  # split: two tools named
        ("Read", ["mcp__a__read_file", "mcp__b__read_file"], ("mcp__a__read_file", "mcp__b__read_file")),
        (
            "search_issue",
            ["mcp__a__search_issue", "mcp__b__search_issue"],
            ("mcp__a__search_issue", "mcp__b__search_issue"),
        ),
    ],
)
def test_ambiguity_stays_unresolved(written: str, offered: list[str], candidates: tuple[str, ...]) -> None:
    res = resolve_name(written, offered)
    assert res.name is None and res.method is None
    assert res.candidates == candidates
    assert not res.resolved


@pytest.mark.parametrize(
    ("written", "offered"),
    [
        ("nope", LOCAL),
        ("", LOCAL),
        ("   ", LOCAL),
        ("read_file", []),
        ("Edit", LOCAL),  # alias exists, but no edit tool is offered
        ("apply_patch", ["edit_file"]),  # patch text is not old/new strings: no cross-meaning alias
        ("MultiEdit", ["edit_file"]),
        ("read", ["read_file_v2"]),
        ("functions.", LOCAL),
        ("mcp____", LOCAL),
    ],
)
def test_unresolved_without_candidates(written: str, offered: list[str]) -> None:
    assert resolve_name(written, offered) == Resolution(None)


def test_ambiguous_case_stage_stops_the_cascade() -> None:
    # "READ" is ambiguous between two offered spellings; the alias stage must not then pick read_file.
    res = resolve_name("READ", ["Read", "read", "read_file"])
    assert res.name is None and res.candidates == ("Read", "read")


@pytest.mark.parametrize(
    ("name", "stripped"),
    [
        ("functions.a", "a"),
        ("TOOLS__a", "a"),
        ("default_api.x_y", "x_y"),
        ("mcp__srv__tool", "tool"),
        ("mcp__my_srv__do__thing", "do__thing"),
        ("plain", None),
        ("functions.", None),
    ],
)
def test_strip_namespace(name: str, stripped: str | None) -> None:
    assert strip_namespace(name) == stripped


NAME = st.text(alphabet="abcdefRWX_-. :()rl", min_size=0, max_size=14)
KNOWN = st.sampled_from([*ALIASES, *CANONICAL_NAMES, "functions.read_file", "mcp__s__grep", "ReadFile"])


@settings(max_examples=300, deadline=None)
@given(written=st.one_of(NAME, KNOWN), offered=st.lists(st.one_of(NAME, KNOWN), max_size=6, unique=True))
def test_never_returns_a_name_outside_offered(written: str, offered: list[str]) -> None:
    res = resolve_name(written, offered)
    assert res.name is None or res.name in offered
    assert set(res.candidates) <= set(offered)
    assert not (res.name is not None and res.candidates)
    if written in offered:
        assert res == Resolution(written, "exact")


@settings(max_examples=100, deadline=None)
@given(offered=st.lists(st.one_of(NAME, KNOWN), min_size=1, max_size=6, unique=True), data=st.data())
def test_offered_names_resolve_to_themselves(offered: list[str], data: st.DataObject) -> None:
    name = data.draw(st.sampled_from(offered))
    assert resolve_name(name, offered) == Resolution(name, "exact")
