"""How a stdio MCP server is started: inside bubblewrap, like the built-in tools.

The server sees a read-only root, the work dir (read-write, at ``/workspace``), its own install and
the paths its entry lists (read-only), a private ``/tmp``, and no network unless the entry grants it.
Arguments that name the work dir, or a path inside it, are rewritten to where it appears inside.
rlimits bound memory, files and processes; a server's CPU time is a daemon's, so it is not bounded
per call (a call that hangs ends at the entry's ``timeout``, and the server is restarted).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from tether.errors import ConfigError
from tether.mcp.config import McpServerSpec
from tether.sandbox.bwrap import SandboxPlan, bwrap_argv, rlimit_prefix
from tether.sandbox.config import WORKSPACE, Limits, SandboxConfig

__all__ = ["SERVER_LIMITS", "server_argv"]

#: A long-lived server's limits: V8 and CPython reserve address space freely, and a daemon's CPU
#: time adds up over hours.
SERVER_LIMITS = Limits(
    wall_time_s=86_400.0,
    cpu_time_s=86_400.0,
    memory_bytes=8 * 1024**3,
    max_processes=64,
    max_file_bytes=256 * 1024**2,
    max_open_files=1024,
)

_VISIBLE = ("/usr/", "/bin/", "/lib", "/sbin/", "/etc/")


def server_argv(
    server: McpServerSpec, plan: SandboxPlan, work_dir: Path, *, procs_file: str | None = None
) -> list[str]:
    """The whole argv that starts ``server`` in its sandbox; ConfigError when its command is not found.
    ``procs_file``: the pids cgroup the server joins before bwrap starts (where the plan has one)."""
    command = _resolve(server.command, server.name)
    args = [_inside(a, work_dir) for a in server.args]
    binds = dict.fromkeys(
        [
            *_install_of(command),
            *(_readable(a) for a in server.args if _readable(a) and not _under(Path(a), work_dir)),
            *(str(Path(p).expanduser().resolve()) for p in server.read_only_paths),
        ]
    )
    for path in binds:
        if not os.path.exists(path):
            raise ConfigError(f"MCP server {server.name!r}: readOnlyPaths entry {path!r} does not exist")
    config = SandboxConfig(
        work_dir=work_dir, limits=SERVER_LIMITS, ro_binds=tuple(p for p in binds if p), env=server.env
    )
    join = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs_file] if procs_file else []
    return [
        *join,
        *bwrap_argv(plan, config, status_fd=None, network=server.network),
        *rlimit_prefix(plan.prlimit, SERVER_LIMITS, nproc=plan.pids == "rlimit"),
        command,
        *args,
    ]


def _resolve(command: str, name: str) -> str:
    found = shutil.which(os.path.expanduser(command))
    if found is None:
        raise ConfigError(f"MCP server {name!r}: command {command!r} not found on PATH")
    return os.path.abspath(found)


def _install_of(command: str) -> list[str]:
    """The directories a command's install lives in, where the sandbox would not see them: a ``bin``
    or ``.bin`` directory's parent (a virtualenv, ``node_modules``), else the command's own directory;
    for the command as written and for the file its links end at (a virtualenv's interpreter)."""
    found = []
    for path in dict.fromkeys((command, os.path.realpath(command))):
        if path.startswith(_VISIBLE):
            continue
        parent = Path(path).parent
        found.append(str(parent.parent if parent.name in ("bin", ".bin") else parent))
    return found


def _readable(arg: str) -> str:
    """An absolute path argument that exists: the directory to show (a file's is its parent)."""
    if not os.path.isabs(arg) or arg.startswith(_VISIBLE) or not os.path.exists(arg):
        return ""
    path = Path(arg).resolve()
    return str(path if path.is_dir() else path.parent)


def _under(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root)
    except (ValueError, OSError):
        return False
    return True


def _inside(arg: str, work_dir: Path) -> str:
    """``arg`` as the server sees it: a path in the work dir moves to ``/workspace``."""
    if not os.path.isabs(arg) or not _under(Path(arg), work_dir):
        return arg
    rest = Path(arg).resolve().relative_to(work_dir)
    return WORKSPACE if str(rest) == "." else f"{WORKSPACE}/{rest}"
