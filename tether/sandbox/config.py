"""Frozen value types of the sandbox: resource limits, executor configuration and run results.

Nothing here starts a process; ``tether.sandbox.executor`` reads these values.
Invalid values raise ``ConfigError`` at construction, so a bad limit can never
silently become "no limit".
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Literal, get_args

from tether.errors import ConfigError

__all__ = ["WORKSPACE", "ExecResult", "Limits", "SandboxConfig", "SandboxMode"]

SandboxMode = Literal["bwrap", "unsandboxed"]

#: Where the work dir appears inside the sandbox.
WORKSPACE = "/workspace"

_MiB = 1024 * 1024


@dataclass(frozen=True, slots=True)
class Limits:
    """Per-run resource limits; every run gets all of them.

    ``max_processes=None`` is an explicit operator opt-out of the process-count
    limit (needed only as root without a writable pids cgroup, see docs/sandbox.md).
    ``max_output_bytes`` applies to stdout and stderr separately.
    """

    wall_time_s: float = 30.0
    cpu_time_s: float = 30.0
    memory_bytes: int = 1024 * _MiB
    max_processes: int | None = 64
    max_output_bytes: int = 64 * 1024
    max_file_bytes: int = 64 * _MiB
    max_open_files: int = 256
    tmpfs_bytes: int = 64 * _MiB
    kill_grace_s: float = 1.0

    def __post_init__(self) -> None:
        for name in ("wall_time_s", "cpu_time_s", "kill_grace_s"):
            value = getattr(self, name)
            if not math.isfinite(value) or value <= 0:
                raise ConfigError(f"sandbox limit {name} must be a positive number, got {value!r}")
        for name in ("memory_bytes", "max_output_bytes", "max_file_bytes", "max_open_files", "tmpfs_bytes"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
                raise ConfigError(f"sandbox limit {name} must be a positive integer, got {value!r}")
        if self.max_processes is not None and (
            isinstance(self.max_processes, bool)
            or not isinstance(self.max_processes, int)
            or self.max_processes < 1
        ):
            raise ConfigError(
                f"sandbox limit max_processes must be a positive integer or None, got {self.max_processes!r}"
            )

    @property
    def cpu_soft_s(self) -> int:
        """RLIMIT_CPU soft value (SIGXCPU); the hard value is one second more (SIGKILL)."""
        return max(1, math.ceil(self.cpu_time_s))


@dataclass(frozen=True, slots=True)
class SandboxConfig:
    """How the executor runs commands.

    ``mode="bwrap"`` (default) runs everything under bubblewrap and refuses to run
    without it. ``mode="unsandboxed"`` runs on the host with only rlimits and a
    wall clock, and logs a warning on every call; an operator must choose it.
    ``ro_binds`` are extra host paths mounted read-only at the same path;
    ``env`` is added to the sandbox's small default environment.
    """

    work_dir: Path
    limits: Limits = field(default_factory=Limits)
    mode: SandboxMode = "bwrap"
    bwrap_path: str | None = None
    ro_binds: tuple[str, ...] = ()
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.mode not in get_args(SandboxMode):
            raise ConfigError(
                f"unknown sandbox mode {self.mode!r}; expected one of {', '.join(get_args(SandboxMode))}"
            )
        if not isinstance(self.limits, Limits):
            raise ConfigError("SandboxConfig.limits must be a Limits instance")
        work_dir = Path(self.work_dir)
        if not work_dir.is_dir():
            raise ConfigError(f"sandbox work dir {str(work_dir)!r} does not exist or is not a directory")
        object.__setattr__(self, "work_dir", work_dir.resolve(strict=True))
        for path in self.ro_binds:
            if not os.path.isabs(path):
                raise ConfigError(f"sandbox ro_binds entries must be absolute paths, got {path!r}")
        for key, value in self.env.items():
            if not key or "=" in key or "\0" in key or "\0" in value:
                raise ConfigError(f"invalid sandbox environment variable {key!r}")
        object.__setattr__(self, "ro_binds", tuple(self.ro_binds))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))


@dataclass(frozen=True, slots=True)
class ExecResult:
    """The outcome of one run.

    ``exit_code`` follows Python's convention: negative for "killed by signal N".
    ``killed_by`` names why the run was cut short: ``"wall_time"``,
    ``"cpu_time"``, ``"file_size"`` or a signal name such as ``"SIGSEGV"``.
    ``truncated`` is true when stdout or stderr exceeded ``max_output_bytes``
    (the middle was dropped and a marker put in its place).
    """

    exit_code: int
    stdout: str
    stderr: str
    timed_out: bool = False
    killed_by: str | None = None
    truncated: bool = False
    duration_s: float = 0.0

    @property
    def ok(self) -> bool:
        """Exited by itself with status 0."""
        return self.exit_code == 0 and not self.timed_out and self.killed_by is None
