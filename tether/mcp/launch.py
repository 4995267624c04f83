"""How a stdio MCP server is started: inside bubblewrap, like the built-in tools.

The server sees a read-only root, the work dir (read-write, at ``/workspace``), a private ``/tmp``,
and no network unless the entry grants it. Read-only, it also sees its install (a virtualenv or
``node_modules`` the command lives in, else the command file alone), each file or directory its
arguments name, and its entry's ``readOnlyPaths``; never the host's ``/``, ``/tmp`` or ``/var``
whole, anything in ``/dev``, ``/proc`` or ``/sys``, nor ``$HOME`` itself or a directory above it. Arguments that name the work dir,
or a path inside it, are rewritten to where it appears inside.

The command line is fixed when the server is configured, before any tool has run: a link the model
later makes in the work dir cannot widen what a restarted server sees. Its environment reaches the
sandbox through bwrap's own environment, not its command line, which other users can read.
rlimits bound memory, files and processes; a server's CPU time is a daemon's, so it is not bounded
per call (a call that hangs ends at the entry's ``timeout``, and the server is restarted).
"""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from tether.errors import ConfigError
from tether.mcp.config import McpServerSpec
from tether.sandbox.bwrap import SandboxPlan, bwrap_argv, rlimit_prefix, sandbox_env
from tether.sandbox.config import WORKSPACE, Limits, SandboxConfig

__all__ = ["SERVER_LIMITS", "ServerCommand", "server_command"]

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

_SHOWN = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # the sandbox has these
_NEVER_UNDER = ("/dev", "/proc", "/sys")  # nothing below these: the sandbox has its own
_NEVER = ("/tmp", "/run", "/var", "/var/run", "/var/tmp")  # these whole (a checkout in /tmp is fine)


@dataclass(frozen=True)
class ServerCommand:
    """A stdio server's sandboxed command: ``argv`` (without the cgroup wrapper) and ``env``, the
    environment bwrap passes into the sandbox."""

    argv: tuple[str, ...]
    env: dict[str, str] = field(repr=False)

    def joining(self, procs_file: str | None) -> list[str]:
        """The argv, first joining the pids cgroup of ``procs_file`` where the host has one."""
        join = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', procs_file] if procs_file else []
        return [*join, *self.argv]


def server_command(server: McpServerSpec, plan: SandboxPlan, work_dir: Path) -> ServerCommand:
    """``server``'s command in its sandbox; ConfigError when its command or a path is not usable."""
    command = _resolve(server.command, server.name)
    args = [_inside(a, work_dir, server.name) for a in server.args]
    wanted = [*_install_of(command), *(_named(a, work_dir) for a in server.args)]
    wanted += [str(Path(p).expanduser().resolve()) for p in server.read_only_paths]
    binds: list[str] = []
    for path in dict.fromkeys(p for p in wanted if p):
        if not os.path.exists(path):
            raise ConfigError(f"MCP server {server.name!r}: readOnlyPaths entry {path!r} does not exist")
        if _refused(path):
            raise ConfigError(
                f"MCP server {server.name!r}: {path!r} cannot be shown to the server (the host's root, "
                "/tmp or /var whole, /dev, /proc, /sys, or your home directory or above it); name a "
                "directory inside it"
            )
        binds.append(path)
    config = SandboxConfig(work_dir=work_dir, limits=SERVER_LIMITS, ro_binds=tuple(binds))
    argv = (
        *bwrap_argv(plan, config, status_fd=None, network=server.network, inherit_env=True),
        *rlimit_prefix(plan.prlimit, SERVER_LIMITS, nproc=plan.pids == "rlimit"),
        command,
        *args,
    )
    # The SDK adds the host's USER, LOGNAME and SHELL to what it is given: neutral ones instead.
    neutral = {"USER": "nobody", "LOGNAME": "nobody", "SHELL": "/bin/sh"}
    return ServerCommand(argv, {**sandbox_env(config, home="/tmp"), **neutral, **server.env})


def _resolve(command: str, name: str) -> str:
    found = shutil.which(os.path.expanduser(command))
    if found is None:
        raise ConfigError(f"MCP server {name!r}: command {command!r} not found on PATH")
    return os.path.abspath(found)


def _under(path: str, roots: tuple[str, ...]) -> bool:
    return any(path == root or path.startswith(root + "/") for root in roots)


def _refused(path: str) -> bool:
    home = os.path.realpath(os.path.expanduser("~"))
    above_home = home == path or home.startswith(path.rstrip("/") + "/")
    return path == "/" or path in _NEVER or _under(path, _NEVER_UNDER) or above_home


def _install_of(command: str) -> list[str]:
    """What a command needs from its install, for the command as written and for the file its
    links end at (a virtualenv's interpreter): a virtualenv (``pyvenv.cfg``), a ``node_modules``
    tree or an interpreter's prefix (``bin`` beside ``lib``) whole; else the command file alone."""
    found = []
    for path in dict.fromkeys((command, os.path.realpath(command))):
        if _under(path, _SHOWN):
            continue
        parent = Path(path).parent
        prefix = parent.parent
        if (parent.name == ".bin" and prefix.name == "node_modules") or (
            parent.name == "bin" and ((prefix / "pyvenv.cfg").exists() or (prefix / "lib").is_dir())
        ):
            found.append(str(prefix))
        else:
            found.append(path)
    return found


def _named(arg: str, work_dir: Path) -> str:
    """An absolute path argument outside the work dir that exists: that file or directory."""
    if not os.path.isabs(arg) or _under(os.path.abspath(arg), _SHOWN) or not os.path.exists(arg):
        return ""
    path = os.path.realpath(arg)
    return "" if _under(path, (str(work_dir),)) else path


def _inside(arg: str, work_dir: Path, name: str) -> str:
    """``arg`` as the server sees it: a path in the work dir moves to ``/workspace``. One written
    inside the work dir that leads out of it through a link is refused."""
    if not os.path.isabs(arg):
        return arg
    written = os.path.abspath(arg)
    resolved = os.path.realpath(arg)
    root = str(work_dir)
    if not _under(written, (root,)) and not _under(resolved, (root,)):
        return arg
    if not _under(resolved, (root,)):
        raise ConfigError(f"MCP server {name!r}: argument {arg!r} is in the work dir but links out of it")
    rest = os.path.relpath(resolved, root)
    return WORKSPACE if rest == "." else f"{WORKSPACE}/{rest}"
