"""Built-in tools: behaviour and path confinement (``..``, absolute paths, symlinks, swapped parents)."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

import pytest

from tests.sandbox.conftest import SECRET, ExecutorFactory
from tether.errors import ToolError
from tether.sandbox import (
    PermissionMode,
    PermissionPolicy,
    SandboxConfig,
    SandboxExecutor,
    ToolBox,
    ToolResult,
    Workspace,
    make_toolbox,
)
from tether.sandbox.globbing import glob_regex

pytestmark = pytest.mark.sandbox

AUTO = PermissionPolicy(mode=PermissionMode.AUTO)


@pytest.fixture
def unsandboxed(work_dir: Path) -> SandboxExecutor:
    return SandboxExecutor(SandboxConfig(work_dir=work_dir, mode="unsandboxed"))


@pytest.fixture
def box(work_dir: Path, unsandboxed: SandboxExecutor) -> ToolBox:
    """All tools allowed; the executor only matters for grep and bash."""
    return make_toolbox(work_dir, unsandboxed, AUTO)


def call(box: ToolBox, name: str, **args: Any) -> ToolResult:
    return asyncio.run(box.call(name, args))


def test_specs_are_openai_function_tools(box: ToolBox) -> None:
    specs = box.specs()
    assert [s["function"]["name"] for s in specs] == [
        "read_file", "list_dir", "glob", "grep", "write_file", "edit_file", "bash",
    ]  # fmt: skip
    for spec in specs:
        assert spec["type"] == "function"
        params = spec["function"]["parameters"]
        assert params["type"] == "object" and params["additionalProperties"] is False
        assert set(params["required"]) <= set(params["properties"])
        assert spec["function"]["description"]


def test_read_write_roundtrip_and_slicing(box: ToolBox, work_dir: Path) -> None:
    assert not call(box, "write_file", path="a/b/c.txt", content="one\ntwo\nthree\n").is_error
    assert (work_dir / "a/b/c.txt").read_text() == "one\ntwo\nthree\n"
    assert call(box, "read_file", path="a/b/c.txt").content == "one\ntwo\nthree\n"
    part = call(box, "read_file", path="a/b/c.txt", offset=2, limit=1)
    assert part.content.startswith("two\n[showing lines 2-2 of 3")
    past = call(box, "read_file", path="a/b/c.txt", offset=9)
    assert past.is_error and "past the end (3 lines)" in past.content
    assert "overwrote" in call(box, "write_file", path="/workspace/a/b/c.txt", content="x").content
    assert call(box, "read_file", path=str(work_dir / "a/b/c.txt")).content == "x"


def test_read_errors_are_results(box: ToolBox, work_dir: Path) -> None:
    (work_dir / "bin.dat").write_bytes(b"\x00\x01\x02")
    (work_dir / "d").mkdir()
    os.mkfifo(work_dir / "fifo")
    for path, expected in [
        ("missing.txt", "file not found"),
        ("bin.dat", "binary"),
        ("d", "is a directory"),
        ("fifo", "not a regular file"),  # and it does not block
    ]:
        result = call(box, "read_file", path=path)
        assert result.is_error and expected in result.content, result


@pytest.mark.parametrize("tool", ["read_file", "write_file", "edit_file", "list_dir"])
def test_paths_cannot_leave_the_work_dir(box: ToolBox, work_dir: Path, fake_home: Path, tool: str) -> None:
    (work_dir / "link_file").symlink_to(fake_home / ".secret")
    (work_dir / "link_dir").symlink_to(fake_home)
    (work_dir / "loop").symlink_to(work_dir / "loop")
    escapes = [
        "../home/.secret",
        "sub/../../home/.secret",
        str(fake_home / ".secret"),
        "/etc/passwd",
        "/workspace/../etc/passwd",
        "link_file",
        "link_dir/.secret",
        "link_dir/new_file",
        "loop/x",
    ]
    extra: dict[str, Any] = {
        "write_file": {"content": "pwned"},
        "edit_file": {"old_string": SECRET, "new_string": "pwned"},
    }.get(tool, {})
    for path in escapes:
        result = call(box, tool, path=path, **extra)
        assert result.is_error, (path, result)
        assert SECRET not in result.content
    assert (fake_home / ".secret").read_text() == SECRET
    assert sorted(p.name for p in fake_home.iterdir()) == [".secret"]


def test_symlinks_inside_the_work_dir_are_fine(box: ToolBox, work_dir: Path) -> None:
    (work_dir / "real").mkdir()
    (work_dir / "real/f.txt").write_text("inside")
    (work_dir / "alias").symlink_to("real")
    assert call(box, "read_file", path="alias/f.txt").content == "inside"
    assert not call(box, "write_file", path="alias/g.txt", content="g").is_error
    assert (work_dir / "real/g.txt").read_text() == "g"


def test_parent_swapped_for_symlink_after_check_is_refused(work_dir: Path, fake_home: Path) -> None:
    """The O_NOFOLLOW walk catches a symlink planted between resolve() and open()."""
    ws = Workspace(work_dir)
    (work_dir / "sub").mkdir()
    (work_dir / "sub/f").write_text("x")
    target = ws.resolve("sub/new")
    existing = ws.resolve("sub/f")
    (work_dir / "sub/f").unlink()
    (work_dir / "sub").rmdir()
    (work_dir / "sub").symlink_to(fake_home)
    with pytest.raises(ToolError):
        ws.write_bytes(target, b"pwned", max_bytes=100)
    with pytest.raises(ToolError):
        ws.read_bytes(existing, max_bytes=100)
    (work_dir / "sub").unlink()
    (work_dir / "sub").mkdir()
    (work_dir / "sub/f").symlink_to(fake_home / ".secret")  # final component swapped
    with pytest.raises(ToolError):
        ws.read_bytes(existing, max_bytes=100)
    assert sorted(p.name for p in fake_home.iterdir()) == [".secret"]


def test_edit_file_rules(box: ToolBox, work_dir: Path) -> None:
    f = work_dir / "code.py"
    f.write_text("a = 1\nb = 1\nc = 2\n")
    f.chmod(0o751)
    zero = call(box, "edit_file", path="code.py", old_string="z = 9", new_string="z = 0")
    assert zero.is_error and "not found" in zero.content
    many = call(box, "edit_file", path="code.py", old_string="= 1", new_string="= 5")
    assert many.is_error and "occurs 2 times" in many.content
    assert f.read_text() == "a = 1\nb = 1\nc = 2\n"
    one = call(box, "edit_file", path="code.py", old_string="c = 2", new_string="c = 3")
    assert not one.is_error and f.read_text() == "a = 1\nb = 1\nc = 3\n"
    both = call(box, "edit_file", path="code.py", old_string="= 1", new_string="= 5", replace_all=True)
    assert "2 replacements" in both.content and f.read_text() == "a = 5\nb = 5\nc = 3\n"
    assert (f.stat().st_mode & 0o777) == 0o751
    same = call(box, "edit_file", path="code.py", old_string="a", new_string="a")
    assert same.is_error and "identical" in same.content
    assert call(box, "edit_file", path="code.py", old_string="", new_string="x").is_error
    assert not any(p.name.endswith(".tmp") for p in work_dir.iterdir())


def test_list_dir(box: ToolBox, work_dir: Path, fake_home: Path) -> None:
    (work_dir / "dir").mkdir()
    (work_dir / "file.txt").write_text("12345")
    (work_dir / "out").symlink_to(fake_home)
    listing = call(box, "list_dir").content.splitlines()
    assert listing == ["dir/", "file.txt (5 bytes)", f"out@ -> {fake_home}"]
    assert call(box, "list_dir", path="dir").content == "dir is empty"


def test_glob(box: ToolBox, work_dir: Path, fake_home: Path) -> None:
    for rel in ("a.py", "b.ts", "src/c.py", "src/deep/d.py", "src/deep/e.js"):
        (work_dir / rel).parent.mkdir(parents=True, exist_ok=True)
        (work_dir / rel).write_text("")
    (fake_home / "outside.py").write_text("")
    (work_dir / "escape").symlink_to(fake_home)
    assert call(box, "glob", pattern="*.py").content == "a.py"
    assert call(box, "glob", pattern="**/*.py").content.splitlines() == ["a.py", "src/c.py", "src/deep/d.py"]
    assert call(box, "glob", pattern="src/**/*.{py,js}").content.splitlines() == [
        "src/c.py", "src/deep/d.py", "src/deep/e.js",
    ]  # fmt: skip
    assert call(box, "glob", pattern="*.py", path="src").content == "src/c.py"
    assert "outside.py" not in call(box, "glob", pattern="**").content  # symlinked dirs are not followed
    for bad in ("../*", "/etc/*"):
        assert call(box, "glob", pattern=bad).is_error
    assert call(box, "glob", pattern="*", path="..").is_error


def test_glob_regex_translation() -> None:
    assert glob_regex("a/**/b").match("a/b") and glob_regex("a/**/b").match("a/x/y/b")
    assert not glob_regex("*.py").match("src/a.py")
    assert glob_regex("[!a]?.txt").match("bc.txt") and not glob_regex("[!a]?.txt").match("ac.txt")
    assert glob_regex("[[]x].md").match("[x].md")
    with pytest.raises(ToolError):
        glob_regex("a/../b")


def test_grep_unsandboxed_is_confined(box: ToolBox, work_dir: Path, fake_home: Path) -> None:
    (work_dir / "src").mkdir()
    (work_dir / "src/m.py").write_text("def foo():\n    return 'needle'\n")
    (work_dir / "notes.md").write_text("a needle here\n")
    (work_dir / "escape").symlink_to(fake_home)
    (fake_home / "x.txt").write_text("needle outside\n")
    found = call(box, "grep", pattern="need+le")
    assert sorted(found.content.splitlines()) == [
        "notes.md:1:a needle here",
        "src/m.py:2:    return 'needle'",
    ]
    only_py = call(box, "grep", pattern="NEEDLE", include="*.py", case_insensitive=True)
    assert only_py.content == "src/m.py:2:    return 'needle'"
    assert call(box, "grep", pattern="absent").content == "no matches for 'absent'"
    assert call(box, "grep", pattern="needle", path="../home").is_error
    assert call(box, "grep", pattern="needle", path="escape").is_error
    assert call(box, "grep", pattern="-e", path="src").content.startswith("no matches")  # not an option


def test_grep_and_bash_in_the_sandbox(executor_factory: ExecutorFactory, work_dir: Path) -> None:
    ex = executor_factory(wall_time_s=1.0)
    box = make_toolbox(work_dir, ex, AUTO)
    (work_dir / "f.txt").write_text("alpha\nbeta\n")
    assert call(box, "grep", pattern="^b", path="f.txt").content == "f.txt:2:beta"
    ok = call(box, "bash", command="echo hi; echo warn >&2")
    assert not ok.is_error and ok.content == "hi\n[stderr]\nwarn"
    failed = call(box, "bash", command="exit 4")
    assert failed.is_error and "[exit code 4]" in failed.content
    slow = call(box, "bash", command="sleep 5")
    assert slow.is_error and "timed out" in slow.content
    assert call(box, "bash", command="echo made > made.txt; pwd").content == "/workspace"
    assert (work_dir / "made.txt").read_text() == "made\n"
