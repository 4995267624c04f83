"""Bubblewrap command lines and the start-up check that bubblewrap really works here.

``SandboxPlan`` is what the executor needs to start a sandboxed run: the
``bwrap`` binary, the ``prlimit`` wrapper that applies rlimits inside the
sandbox, and how the process count is bounded. ``prepare`` builds it once and
runs a trivial command through the exact flags used for real runs; any failure
(missing binary, user namespaces refused, seccomp blocking ``clone``) raises
``SandboxError``, so the executor fails closed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass
from typing import Literal

import structlog

from tether.errors import SandboxError
from tether.sandbox.cgroup import PidsController, find_pids_controller
from tether.sandbox.config import WORKSPACE, Limits, SandboxConfig

__all__ = [
    "SANDBOX_UID",
    "SandboxPlan",
    "bwrap_argv",
    "find_prlimit",
    "prepare",
    "rlimit_prefix",
    "sandbox_env",
]

log = structlog.get_logger(__name__)

#: uid/gid the command sees inside the sandbox (``nobody``); it maps to the invoking user outside.
SANDBOX_UID = 65534

PidsStrategy = Literal["cgroup", "rlimit", "none"]

# The minimal /etc: the dynamic linker's cache, alternatives (awk, editor links),
# user/group names for ``id``/``ls``, and the time zone. No shadow, no ssh, no ssl keys.
_ETC = (
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/passwd",
    "/etc/group",
    "/etc/nsswitch.conf",
    "/etc/localtime",
)
_ROOT_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_PROBE_TIMEOUT_S = 15.0
_HINT = (
    "see docs/sandbox.md ('When bubblewrap cannot create namespaces'); "
    "or set SandboxConfig(mode='unsandboxed') to run commands WITHOUT isolation"
)


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    """Everything fixed about sandboxed runs on this host."""

    bwrap: str
    prlimit: str
    pids: PidsStrategy
    controller: PidsController | None

    def describe(self) -> str:
        """One line for logs and ``/health``: how isolation and the process limit are enforced."""
        return f"bwrap ({self.bwrap}), process limit via {self.pids}"


def find_prlimit() -> str | None:
    """util-linux ``prlimit`` under /usr or /bin (those are visible inside the sandbox)."""
    for path in ("/usr/bin/prlimit", "/bin/prlimit", "/usr/sbin/prlimit", "/sbin/prlimit"):
        if os.access(path, os.X_OK):
            return path
    return None


def sandbox_env(config: SandboxConfig, *, home: str) -> dict[str, str]:
    """The whole environment of a command: a small fixed allowlist plus ``config.env``."""
    env = {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": "/tmp",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "TERM": "dumb",
        "PYTHONDONTWRITEBYTECODE": "1",
    }
    env.update(config.env)
    return env


def rlimit_prefix(prlimit: str, limits: Limits, *, nproc: bool) -> list[str]:
    """``prlimit`` argv that sets soft = hard for every limit, then execs the command."""
    soft = limits.cpu_soft_s
    argv = [
        prlimit,
        f"--as={limits.memory_bytes}",
        f"--cpu={soft}:{soft + 1}",
        f"--fsize={limits.max_file_bytes}",
        f"--nofile={limits.max_open_files}",
        "--core=0",
    ]
    if nproc and limits.max_processes is not None:
        argv.append(f"--nproc={limits.max_processes}")
    argv.append("--")
    return argv


def _root_layout() -> list[str]:
    """/usr read-only, and /bin, /lib* as the same symlinks (or read-only dirs) as on the host."""
    args = ["--ro-bind", "/usr", "/usr"]
    for path in _ROOT_DIRS:
        if os.path.islink(path):
            args += ["--symlink", os.readlink(path), path]
        elif os.path.isdir(path):
            args += ["--ro-bind", path, path]
    for path in _ETC:
        args += ["--ro-bind-try", path, path]
    return args


# What a process with the network needs to resolve names and check certificates.
_NET_ETC = ("/etc/resolv.conf", "/etc/hosts", "/etc/ssl", "/etc/ca-certificates")


def bwrap_argv(
    plan: SandboxPlan,
    config: SandboxConfig,
    *,
    status_fd: int | None,
    network: bool = False,
    inherit_env: bool = False,
) -> list[str]:
    """The bwrap command line up to (not including) the ``prlimit`` wrapper and the command.
    ``network``: share the host's network (an MCP server its configuration grants it); else none.
    ``inherit_env``: the command gets bwrap's own environment, which the caller sets whole (values
    on a command line are readable by every user: an MCP server's tokens go this way); else
    :func:`sandbox_env`, set on the command line."""
    limits = config.limits
    argv = [
        plan.bwrap,
        "--unshare-all",  # user, ipc, pid, net, uts, cgroup: no network at all
        *(["--share-net"] if network else []),
        "--unshare-user",
        "--disable-userns",  # no nested user namespaces to regain capabilities
        "--uid",
        str(SANDBOX_UID),
        "--gid",
        str(SANDBOX_UID),
        "--hostname",
        "sandbox",
        "--die-with-parent",  # killing bwrap kills the pid namespace's init, hence everything
        "--new-session",  # no TIOCSTI into the caller's terminal
        "--cap-drop",
        "ALL",
        *_root_layout(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        # /dev and /dev/shm would otherwise be unbounded tmpfs: memory that RLIMIT_AS does not count.
        "--size",
        str(limits.tmpfs_bytes),
        "--tmpfs",
        "/dev/shm",
        "--remount-ro",
        "/dev",
        "--size",
        str(limits.tmpfs_bytes),
        "--tmpfs",
        "/tmp",
        "--bind",
        str(config.work_dir),
        WORKSPACE,
    ]
    for path in config.ro_binds:
        argv += ["--ro-bind", path, path]
    for path in _NET_ETC if network else ():
        argv += ["--ro-bind-try", path, path]
    argv += ["--remount-ro", "/", "--chdir", WORKSPACE]
    if not inherit_env:
        argv.append("--clearenv")
        for key, value in sandbox_env(config, home="/tmp").items():
            argv += ["--setenv", key, value]
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    return argv


_probed: dict[tuple[object, ...], SandboxPlan] = {}


def _pids_strategy(limits: Limits) -> tuple[PidsStrategy, PidsController | None]:
    if limits.max_processes is None:
        return "none", None
    controller = find_pids_controller()
    if controller is not None:
        return "cgroup", controller
    if os.geteuid() != 0:
        # Inside the sandbox's own user namespace RLIMIT_NPROC counts only that namespace's processes.
        return "rlimit", None
    raise SandboxError(
        "cannot bound the number of sandboxed processes: running as root (the kernel ignores "
        "RLIMIT_NPROC for uid 0) and no writable pids cgroup was found. Run tether as a non-root "
        "user, give it a writable pids cgroup, or set Limits(max_processes=None) to accept no "
        f"process limit; {_HINT}"
    )


def prepare(config: SandboxConfig) -> SandboxPlan:
    """Find bwrap and prlimit, choose the process-limit strategy and prove a sandbox starts."""
    bwrap = config.bwrap_path or shutil.which("bwrap")
    if not bwrap or not os.access(bwrap, os.X_OK):
        raise SandboxError(
            f"bubblewrap (bwrap) not found{f' at {config.bwrap_path}' if config.bwrap_path else ''}; "
            f"install it with scripts/install_bwrap.sh; {_HINT}"
        )
    prlimit = find_prlimit()
    if prlimit is None:
        raise SandboxError(f"util-linux prlimit not found under /usr/bin or /bin; {_HINT}")
    for path in config.ro_binds:
        if not os.path.exists(path):
            raise SandboxError(f"sandbox ro_binds path {path!r} does not exist")
    pids, controller = _pids_strategy(config.limits)
    key = (bwrap, prlimit, os.geteuid(), pids, config.ro_binds)
    cached = _probed.get(key)
    if cached is not None:
        return cached
    plan = SandboxPlan(bwrap=bwrap, prlimit=prlimit, pids=pids, controller=controller)
    argv = [
        *bwrap_argv(plan, config, status_fd=None),
        *rlimit_prefix(prlimit, config.limits, nproc=pids == "rlimit"),
        "/bin/sh",
        "-c",
        "exit 0",
    ]
    try:
        done = subprocess.run(
            argv,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            timeout=_PROBE_TIMEOUT_S,
            env={"PATH": "/usr/bin:/bin"},
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise SandboxError(f"bubblewrap could not be started: {exc}; {_HINT}") from exc
    if done.returncode != 0:
        detail = (
            done.stderr.decode("utf-8", errors="replace").strip()[:500] or f"exit status {done.returncode}"
        )
        raise SandboxError(f"bubblewrap cannot create a sandbox here: {detail}; {_HINT}")
    _probed[key] = plan
    log.info("sandbox_ready", isolation=plan.describe())
    return plan
