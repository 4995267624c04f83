"""The built-in tools: read_file, write_file, edit_file, list_dir, glob, grep and bash.

File tools run in-process with strict confinement (``tether.sandbox.paths``):
they only ever touch the work dir, and doing them in-process keeps them fast
and independent of bubblewrap. ``grep`` (a user-supplied regex could backtrack
for ever) and ``bash`` run through the executor, i.e. inside the sandbox with
its wall clock and limits. All paths shown to the model are relative to the
work dir.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path
from typing import Any

from tether.errors import ToolError
from tether.sandbox.executor import Executor
from tether.sandbox.globbing import glob_regex
from tether.sandbox.paths import Workspace
from tether.sandbox.permissions import PermissionPolicy, ToolKind
from tether.sandbox.schemas import SCHEMAS
from tether.sandbox.toolbox import Tool, ToolBox, ToolHandler, ToolResult

__all__ = ["BuiltinTools", "make_toolbox"]

_MAX_FILE_BYTES = 10 * 1024 * 1024
_MAX_READ_CHARS = 100_000
_MAX_LIST = 1000
_MAX_GLOB = 500
_MAX_WALK = 50_000
_MAX_LINE = 500


class BuiltinTools:
    """The built-in tools bound to one work dir and one executor."""

    def __init__(self, work_dir: Path, executor: Executor) -> None:
        self.workspace = Workspace(work_dir)
        self.executor = executor

    def tools(self) -> list[Tool]:
        """All seven tools, in a stable order."""
        handlers: dict[str, tuple[ToolKind, ToolHandler]] = {
            "read_file": ("read", self.read_file),
            "list_dir": ("read", self.list_dir),
            "glob": ("read", self.glob),
            "grep": ("read", self.grep),
            "write_file": ("edit", self.write_file),
            "edit_file": ("edit", self.edit_file),
            "bash": ("command", self.bash),
        }
        out: list[Tool] = []
        for name, (kind, handler) in handlers.items():
            description, parameters = SCHEMAS[name]
            out.append(
                Tool(name=name, description=description, parameters=parameters, kind=kind, handler=handler)
            )
        return out

    # -- read ---------------------------------------------------------------

    async def read_file(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.resolve(args["path"])
        data, size = await asyncio.to_thread(self.workspace.read_bytes, path, max_bytes=_MAX_FILE_BYTES)
        if b"\0" in data[:8192]:
            return ToolResult(
                f"{self.workspace.relative(path)} looks like a binary file ({size} bytes)", is_error=True
            )
        lines = data.decode("utf-8", errors="replace").splitlines(keepends=True)
        offset = int(args.get("offset", 1))
        limit = int(args.get("limit", 2000))
        if lines and offset > len(lines):
            return ToolResult(f"offset {offset} is past the end ({len(lines)} lines)", is_error=True)
        chosen = lines[offset - 1 : offset - 1 + limit]
        text = "".join(chosen)
        notes: list[str] = []
        if len(text) > _MAX_READ_CHARS:
            text = text[:_MAX_READ_CHARS]
            notes.append(f"output cut at {_MAX_READ_CHARS} characters")
        if size > len(data):
            notes.append(f"only the first {len(data)} of {size} bytes were read")
        if offset > 1 or offset - 1 + limit < len(lines):
            last = min(len(lines), offset - 1 + limit)
            notes.append(f"showing lines {offset}-{last} of {len(lines)}; use offset/limit for more")
        if not lines:
            return ToolResult(f"{self.workspace.relative(path)} is empty")
        if notes:
            text = text.rstrip("\n") + f"\n[{'; '.join(notes)}]"
        return ToolResult(text)

    def _list(self, path: Path) -> str:
        entries: list[str] = []
        with self.workspace.open_dir(path) as fd, os.scandir(fd) as it:
            for entry in it:
                info = entry.stat(follow_symlinks=False)
                if stat.S_ISLNK(info.st_mode):
                    try:
                        target = os.readlink(entry.name, dir_fd=fd)
                    except OSError:
                        target = "?"
                    entries.append(f"{entry.name}@ -> {target}")
                elif stat.S_ISDIR(info.st_mode):
                    entries.append(f"{entry.name}/")
                else:
                    entries.append(f"{entry.name} ({info.st_size} bytes)")
        entries.sort()
        shown = entries[:_MAX_LIST]
        if len(entries) > _MAX_LIST:
            shown.append(f"[{len(entries) - _MAX_LIST} more entries not shown]")
        return "\n".join(shown) if shown else f"{self.workspace.relative(path)} is empty"

    async def list_dir(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.resolve(args.get("path", "."))
        return ToolResult(await asyncio.to_thread(self._list, path))

    def _glob(self, base: Path, pattern: str) -> str:
        regex = glob_regex(pattern)
        matches: list[str] = []
        seen = 0
        for dirpath, dirnames, filenames, _dirfd in os.fwalk(base, follow_symlinks=False):
            rel_dir = os.path.relpath(dirpath, base)
            prefix = "" if rel_dir == "." else rel_dir + "/"
            dirnames.sort()
            for name in sorted(dirnames + filenames):
                seen += 1
                rel = prefix + name
                if regex.match(rel):
                    matches.append(rel + ("/" if name in dirnames else ""))
            if seen > _MAX_WALK or len(matches) > _MAX_GLOB:
                break
        base_rel = self.workspace.relative(base)
        shown = [m if base_rel == "." else f"{base_rel}/{m}" for m in sorted(matches)[:_MAX_GLOB]]
        if len(matches) > _MAX_GLOB or seen > _MAX_WALK:
            shown.append("[more matches not shown; narrow the pattern or the path]")
        return "\n".join(shown) if shown else f"no paths match {pattern!r}"

    async def glob(self, args: dict[str, Any]) -> ToolResult:
        base = self.workspace.resolve(args.get("path", "."))
        if not base.is_dir():
            raise ToolError(f"{self.workspace.relative(base)} is not a directory")
        return ToolResult(await asyncio.to_thread(self._glob, base, args["pattern"]))

    async def grep(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.resolve(args.get("path", "."))
        max_results = int(args.get("max_results", 100))
        argv = ["grep", "-rnHIE", "--color=never", "-m", str(max_results)]
        if args.get("case_insensitive"):
            argv.append("-i")
        if args.get("include"):
            argv.append(f"--include={args['include']}")
        # cwd is the work dir both in and out of the sandbox, so a relative target works for both.
        argv += ["-e", args["pattern"], "--", self.workspace.relative(path)]
        result = await self.executor.run(argv)
        if result.timed_out or result.killed_by:
            return ToolResult(f"grep was stopped ({result.killed_by}); narrow the pattern or the path", True)
        if result.exit_code == 1:
            return ToolResult(f"no matches for {args['pattern']!r}")
        if result.exit_code != 0 and not result.stdout:
            return ToolResult(f"grep failed: {result.stderr.strip()[:2000]}", is_error=True)
        lines = [line.removeprefix("./") for line in result.stdout.splitlines()]
        shown = [
            line if len(line) <= _MAX_LINE else line[:_MAX_LINE] + " [line cut]"
            for line in lines[:max_results]
        ]
        if len(lines) > max_results or result.truncated:
            shown.append("[more matches not shown; narrow the pattern or the path]")
        return ToolResult("\n".join(shown))

    # -- edit ---------------------------------------------------------------

    async def write_file(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.resolve(args["path"])
        data = args["content"].encode("utf-8")
        created = await asyncio.to_thread(self.workspace.write_bytes, path, data, max_bytes=_MAX_FILE_BYTES)
        verb = "created" if created else "overwrote"
        return ToolResult(f"{verb} {self.workspace.relative(path)} ({len(data)} bytes)")

    def _edit(self, path: Path, old: str, new: str, replace_all: bool) -> int:
        data, size = self.workspace.read_bytes(path, max_bytes=_MAX_FILE_BYTES + 1)
        if size > _MAX_FILE_BYTES:
            raise ToolError(f"{self.workspace.relative(path)} is too large to edit ({size} bytes)")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ToolError(f"{self.workspace.relative(path)} is not UTF-8 text") from exc
        count = text.count(old)
        if count == 0:
            raise ToolError(
                f"old_string was not found in {self.workspace.relative(path)}; read the file and copy the text exactly"
            )
        if count > 1 and not replace_all:
            raise ToolError(
                f"old_string occurs {count} times in {self.workspace.relative(path)}; "
                "add surrounding lines to make it unique, or set replace_all to true"
            )
        updated = text.replace(old, new) if replace_all else text.replace(old, new, 1)
        self.workspace.write_bytes(path, updated.encode("utf-8"), max_bytes=_MAX_FILE_BYTES)
        return count if replace_all else 1

    async def edit_file(self, args: dict[str, Any]) -> ToolResult:
        path = self.workspace.resolve(args["path"])
        old, new = args["old_string"], args["new_string"]
        if old == "":
            raise ToolError("old_string must not be empty; use write_file to create a file")
        if old == new:
            raise ToolError("old_string and new_string are identical; nothing to change")
        count = await asyncio.to_thread(self._edit, path, old, new, bool(args.get("replace_all", False)))
        return ToolResult(
            f"edited {self.workspace.relative(path)}: {count} replacement{'s' if count != 1 else ''}"
        )

    # -- command ------------------------------------------------------------

    async def bash(self, args: dict[str, Any]) -> ToolResult:
        result = await self.executor.run(["bash", "-c", args["command"]])
        parts: list[str] = []
        if result.stdout:
            parts.append(result.stdout.rstrip("\n"))
        if result.stderr:
            parts.append("[stderr]\n" + result.stderr.rstrip("\n"))
        if result.timed_out:
            parts.append(f"[timed out after {result.duration_s:.1f}s; the command was killed]")
        elif result.killed_by:
            parts.append(f"[killed: {result.killed_by}]")
        if result.exit_code != 0 and not result.timed_out:
            parts.append(f"[exit code {result.exit_code}]")
        if result.truncated:
            parts.append("[output was truncated]")
        return ToolResult("\n".join(parts) if parts else "(no output)", is_error=not result.ok)


def make_toolbox(work_dir: Path, executor: Executor, policy: PermissionPolicy | None = None) -> ToolBox:
    """A ``ToolBox`` with every built-in tool; the policy defaults to ``plan`` (read-only)."""
    return ToolBox(BuiltinTools(work_dir, executor).tools(), policy=policy)
