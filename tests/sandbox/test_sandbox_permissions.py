"""Permission modes, allow/deny lists, the approval callback and the ToolBox's error handling."""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from tether.sandbox import (
    Decision,
    PermissionMode,
    PermissionPolicy,
    SandboxConfig,
    SandboxExecutor,
    Tool,
    ToolBox,
    ToolKind,
    ToolResult,
    make_toolbox,
    parse_mode,
)

pytestmark = pytest.mark.sandbox

KINDS: tuple[ToolKind, ...] = ("read", "edit", "command")


def decide(
    policy: PermissionPolicy, name: str, kind: ToolKind, args: Mapping[str, Any] | None = None
) -> Decision:
    return asyncio.run(policy.check(name, kind, args or {}))


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("plan", PermissionMode.PLAN),
        ("ask", PermissionMode.ASK),
        ("accept-edits", PermissionMode.ACCEPT_EDITS),
        ("ACCEPT_EDITS", PermissionMode.ACCEPT_EDITS),
        ("acceptEdits", PermissionMode.ACCEPT_EDITS),
        (" Auto ", PermissionMode.AUTO),
        (PermissionMode.AUTO, PermissionMode.AUTO),
    ],
)
def test_parse_valid_modes(value: object, expected: PermissionMode) -> None:
    with capture_logs() as logs:
        assert parse_mode(value) is expected
    assert logs == []


@pytest.mark.parametrize("value", [None, "", "yolo", "bypass", "autoo", 1, True, ["auto"]])
def test_invalid_or_missing_mode_falls_back_to_plan_with_warning(value: object) -> None:
    with capture_logs() as logs:
        assert parse_mode(value) is PermissionMode.PLAN
    assert [(e["event"], e["log_level"], e["fallback"]) for e in logs] == [
        ("permission_mode_invalid", "warning", "plan")
    ]


def test_policy_built_from_bad_settings_is_read_only() -> None:
    with capture_logs():
        policy = PermissionPolicy.from_settings("full-access", allow=["bash"])
    assert policy.mode is PermissionMode.PLAN
    assert not decide(policy, "bash", "command").allowed
    assert PermissionPolicy(mode="garbage").mode is PermissionMode.PLAN  # type: ignore[arg-type]


# mode -> allowed kinds when there is no approval callback
MATRIX: dict[PermissionMode, set[str]] = {
    PermissionMode.PLAN: {"read"},
    PermissionMode.ASK: {"read"},
    PermissionMode.ACCEPT_EDITS: {"read", "edit"},
    PermissionMode.AUTO: {"read", "edit", "command"},
}


@pytest.mark.parametrize("mode", list(PermissionMode))
@pytest.mark.parametrize("kind", KINDS)
def test_mode_matrix_without_approver(mode: PermissionMode, kind: ToolKind) -> None:
    decision = decide(PermissionPolicy(mode=mode), "tool", kind)
    assert decision.allowed is (kind in MATRIX[mode])
    if not decision.allowed and mode is not PermissionMode.PLAN:
        assert "no approver is configured" in decision.reason


def test_ask_uses_the_callback_and_only_true_approves() -> None:
    seen: list[tuple[str, dict[str, Any]]] = []

    def approver(answer: object) -> Any:
        async def approve(name: str, args: Mapping[str, Any]) -> bool:
            seen.append((name, dict(args)))
            return answer  # type: ignore[return-value]

        return approve

    assert decide(
        PermissionPolicy(mode=PermissionMode.ASK, approve=approver(True)),
        "bash",
        "command",
        {"command": "ls"},
    ).allowed
    assert seen == [("bash", {"command": "ls"})]
    for answer in (False, None, "yes", 1):
        decision = decide(
            PermissionPolicy(mode=PermissionMode.ASK, approve=approver(answer)), "bash", "command"
        )
        assert not decision.allowed
    no = decide(PermissionPolicy(mode=PermissionMode.ASK, approve=approver(False)), "bash", "command")
    assert "declined" in no.reason
    # reads never ask
    seen.clear()
    assert decide(
        PermissionPolicy(mode=PermissionMode.ASK, approve=approver(False)), "read_file", "read"
    ).allowed
    assert seen == []


def test_accept_edits_asks_for_commands_only() -> None:
    asked: list[str] = []

    async def approve(name: str, args: Mapping[str, Any]) -> bool:
        asked.append(name)
        return False

    policy = PermissionPolicy(mode=PermissionMode.ACCEPT_EDITS, approve=approve)
    assert decide(policy, "write_file", "edit").allowed
    assert not decide(policy, "bash", "command").allowed
    assert asked == ["bash"]


def test_failing_approver_denies() -> None:
    async def broken(name: str, args: Mapping[str, Any]) -> bool:
        raise RuntimeError("ui went away")

    with capture_logs() as logs:
        decision = decide(PermissionPolicy(mode=PermissionMode.ASK, approve=broken), "bash", "command")
    assert not decision.allowed and "failed" in decision.reason
    assert logs[0]["event"] == "permission_approval_failed"


def test_deny_wins_and_allow_skips_asking_but_not_plan() -> None:
    both = PermissionPolicy(mode=PermissionMode.AUTO, allow=frozenset({"bash"}), deny=frozenset({"bash"}))
    assert not decide(both, "bash", "command").allowed
    assert not decide(
        PermissionPolicy(mode=PermissionMode.AUTO, deny=frozenset({"read_file"})), "read_file", "read"
    ).allowed
    allowed = PermissionPolicy(mode=PermissionMode.ASK, allow=frozenset({"bash"}))
    assert decide(allowed, "bash", "command").allowed
    assert not decide(allowed, "write_file", "edit").allowed
    plan = PermissionPolicy(mode=PermissionMode.PLAN, allow=frozenset({"bash"}))
    assert not decide(plan, "bash", "command").allowed
    assert PermissionPolicy(allow="bash").allow == frozenset({"bash"})  # type: ignore[arg-type]


@pytest.fixture
def executor(work_dir: Path) -> SandboxExecutor:
    return SandboxExecutor(SandboxConfig(work_dir=work_dir, mode="unsandboxed"))


def test_plan_mode_toolbox_offers_and_runs_reads_only(work_dir: Path, executor: SandboxExecutor) -> None:
    box = make_toolbox(work_dir, executor)  # default policy: plan
    assert [s["function"]["name"] for s in box.specs()] == ["read_file", "list_dir", "glob", "grep"]
    result = asyncio.run(box.call("write_file", {"path": "x.txt", "content": "x"}))
    assert result.is_error and result.content.startswith("permission denied") and "plan" in result.content
    assert not (work_dir / "x.txt").exists()
    result = asyncio.run(box.call("bash", '{"command": "touch y"}'))
    assert result.is_error and not (work_dir / "y").exists()
    assert not asyncio.run(box.call("list_dir", {})).is_error


def test_ask_mode_toolbox_with_and_without_approver(work_dir: Path, executor: SandboxExecutor) -> None:
    denied = make_toolbox(work_dir, executor, PermissionPolicy(mode=PermissionMode.ASK))
    assert "write_file" in [s["function"]["name"] for s in denied.specs()]
    result = asyncio.run(denied.call("write_file", {"path": "x.txt", "content": "x"}))
    assert result.is_error and "needs approval" in result.content
    assert not (work_dir / "x.txt").exists()

    async def yes(name: str, args: Mapping[str, Any]) -> bool:
        return name == "write_file" and args["path"] == "x.txt"

    approved = make_toolbox(work_dir, executor, PermissionPolicy(mode=PermissionMode.ASK, approve=yes))
    assert not asyncio.run(approved.call("write_file", {"path": "x.txt", "content": "x"})).is_error
    assert (work_dir / "x.txt").read_text() == "x"


def test_denied_tools_are_not_offered(work_dir: Path, executor: SandboxExecutor) -> None:
    box = make_toolbox(
        work_dir, executor, PermissionPolicy(mode=PermissionMode.AUTO, deny=frozenset({"bash"}))
    )
    assert "bash" not in [s["function"]["name"] for s in box.specs()]
    assert "deny list" in asyncio.run(box.call("bash", {"command": "true"})).content


@pytest.mark.parametrize(
    ("name", "arguments", "expected"),
    [
        ("nope", {}, "unknown tool 'nope'"),
        ("read_file", "{not json", "not valid JSON"),
        ("read_file", "[1, 2]", "must be a JSON object"),
        ("read_file", {}, "'path' is a required property"),
        ("read_file", {"path": "a", "mode": "rb"}, "Additional properties"),
        ("read_file", {"path": 5}, "path: 5 is not of type 'string'"),
        ("edit_file", {"path": "a", "old_string": "", "new_string": "b"}, "old_string"),
    ],
)
def test_bad_calls_become_error_results(
    work_dir: Path, executor: SandboxExecutor, name: str, arguments: Any, expected: str
) -> None:
    box = make_toolbox(work_dir, executor, PermissionPolicy(mode=PermissionMode.AUTO))
    result = asyncio.run(box.call(name, arguments))
    assert result.is_error and expected in result.content, result


def test_crashing_custom_tool_becomes_error_result() -> None:
    async def boom(args: dict[str, Any]) -> ToolResult:
        raise KeyError("internal")

    tool = Tool(name="boom", description="d", parameters={"type": "object"}, kind="read", handler=boom)
    box = ToolBox([tool])
    with capture_logs() as logs:
        result = asyncio.run(box.call("boom", None))
    assert result.is_error and "KeyError" in result.content
    assert logs[0]["event"] == "tool_call_crashed"
    with pytest.raises(ValueError, match="already registered"):
        box.register(tool)


def test_a_group_of_tools_with_broken_schemas_keeps_the_good_ones_and_never_raises() -> None:
    async def ok(args: dict[str, Any]) -> ToolResult:
        return ToolResult("ran")

    def tool(name: str, parameters: dict[str, Any]) -> Tool:
        return Tool(name=name, description="d", parameters=parameters, kind="read", handler=ok)

    box = ToolBox([tool("builtin", {"type": "object"})])
    problems = box.replace_group(
        "mcp:x",
        [
            tool("x_good", {"type": "object"}),
            tool("x_bad_meta", {"type": "object", "$schema": {}}),
            tool("x_dangling", {"type": "object", "properties": {"a": {"$ref": "#/$defs/missing"}}}),
            tool("builtin", {"type": "object"}),  # a name another tool has
        ],
    )
    assert [p.split(":")[0] for p in problems] == ["x_bad_meta", "builtin"]
    assert asyncio.run(box.call("x_good", {})).content == "ran"
    dangling = asyncio.run(box.call("x_dangling", {"a": 1}))
    assert dangling.is_error and "schema cannot be checked" in dangling.content
    assert box.replace_group("mcp:x", [tool("x_new", {"type": "object"})]) == []
    assert sorted(box.names()) == ["builtin", "x_new"]  # the group's old tools are gone, the others stay
