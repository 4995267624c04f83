"""Per-run pids cgroups: the process-count limit that also binds root.

RLIMIT_NPROC is counted per user and ignored for real uid 0, so a sandbox
started by root needs a cgroup ``pids.max`` to stop a fork bomb. This module
finds a writable pids controller (cgroup v1 ``pids`` hierarchy, or a cgroup v2
directory whose subtree has the ``pids`` controller), creates one child cgroup
per run and removes it afterwards. When none is writable it says so and the
executor decides (see ``tether.sandbox.executor``).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import secrets
import signal
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Literal

import structlog

__all__ = ["PidsController", "RunCgroup", "find_pids_controller"]

log = structlog.get_logger(__name__)

_counter = itertools.count()


@dataclass(frozen=True, slots=True)
class RunCgroup:
    """One run's cgroup; the wrapper writes the child's pid to ``procs_file`` before it execs."""

    path: Path
    version: Literal[1, 2]

    @property
    def procs_file(self) -> Path:
        return self.path / "cgroup.procs"

    def pids(self) -> list[int]:
        """Host pids of every process in the cgroup (empty when gone)."""
        try:
            text = self.procs_file.read_text()
        except OSError:
            return []
        return [int(line) for line in text.split() if line.strip().isdigit()]

    def peak(self) -> int | None:
        """Most processes ever in the cgroup, where the kernel reports it."""
        try:
            return int((self.path / "pids.peak").read_text().strip())
        except (OSError, ValueError):
            return None

    def kill_all(self, sig: int = signal.SIGKILL) -> None:
        """Send ``sig`` to every process in the cgroup (``cgroup.kill`` where available)."""
        if sig == signal.SIGKILL and self.version == 2:
            with contextlib.suppress(OSError):
                (self.path / "cgroup.kill").write_text("1")
                return
        for pid in self.pids():
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    async def remove(self, attempts: int = 50) -> None:
        """Kill leftovers and remove the cgroup; retries while exiting processes are reaped."""
        for _ in range(attempts):
            try:
                self.path.rmdir()
                return
            except FileNotFoundError:
                return
            except OSError:
                self.kill_all()
                await asyncio.sleep(0.02)
        log.warning("sandbox_cgroup_not_removed", path=str(self.path))


@dataclass(frozen=True, slots=True)
class PidsController:
    """A cgroup directory under which this process may create children with a ``pids.max``."""

    base: Path
    version: Literal[1, 2]

    def create(self, max_pids: int) -> RunCgroup:
        """Create a run cgroup limited to ``max_pids`` tasks; raises ``OSError`` on failure."""
        name = f"tether-{os.getpid()}-{next(_counter)}-{secrets.token_hex(3)}"
        path = self.base / name
        path.mkdir(mode=0o755)
        try:
            (path / "pids.max").write_text(str(max_pids))
        except OSError:
            with contextlib.suppress(OSError):
                path.rmdir()
            raise
        return RunCgroup(path=path, version=self.version)


def _mountinfo() -> list[tuple[str, str, str, list[str]]]:
    """(root, mountpoint, fstype, super options) of each mount of this process."""
    mounts: list[tuple[str, str, str, list[str]]] = []
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return mounts
    for line in lines:
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        root, mountpoint = (_unescape(fields[3]), _unescape(fields[4]))
        mounts.append((root, mountpoint, tail[0], tail[2].split(",")))
    return mounts


def _unescape(field: str) -> str:
    return field.replace("\\040", " ").replace("\\011", "\t").replace("\\012", "\n").replace("\\134", "\\")


def _own_cgroups() -> dict[str, str]:
    """Controller (``""`` for v2) -> this process's cgroup path."""
    own: dict[str, str] = {}
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return own
    for line in lines:
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        for controller in parts[1].split(",") if parts[1] else [""]:
            own[controller] = parts[2]
    return own


def _candidates(root: str, mountpoint: str, own: str | None) -> list[Path]:
    """Where our own cgroup should appear under this mount, then the mount itself."""
    out: list[Path] = []
    if own is not None:
        rel = own
        if root != "/" and (own == root or own.startswith(root.rstrip("/") + "/")):
            rel = own[len(root.rstrip("/")) :]
        out.append(Path(mountpoint) / rel.lstrip("/"))
    out.append(Path(mountpoint))
    return list(dict.fromkeys(out))


def _usable(controller: PidsController) -> bool:
    try:
        run = controller.create(8)
    except OSError:
        return False
    try:
        run.path.rmdir()
    except OSError:
        return False
    return True


def _v2_enable_pids(base: Path) -> bool:
    try:
        if "pids" not in (base / "cgroup.controllers").read_text().split():
            return False
        if "pids" in (base / "cgroup.subtree_control").read_text().split():
            return True
        (base / "cgroup.subtree_control").write_text("+pids")
        return True
    except OSError:
        return False


def _remove_stale(base: Path) -> None:
    """Remove run cgroups left behind by tether processes that no longer exist (e.g. after a crash)."""
    with contextlib.suppress(OSError):
        for entry in base.iterdir():
            parts = entry.name.split("-")
            if len(parts) != 4 or parts[0] != "tether" or not parts[1].isdigit():
                continue
            if int(parts[1]) != os.getpid() and not Path(f"/proc/{parts[1]}").exists():
                with contextlib.suppress(OSError):
                    entry.rmdir()


@cache
def find_pids_controller() -> PidsController | None:
    """The first writable pids controller (v1 first, then v2), or ``None``; probed once per process."""
    own = _own_cgroups()
    mounts = _mountinfo()
    for root, mountpoint, fstype, options in mounts:
        if fstype == "cgroup" and "pids" in options:
            for base in _candidates(root, mountpoint, own.get("pids")):
                v1 = PidsController(base=base, version=1)
                if base.is_dir() and _usable(v1):
                    _remove_stale(base)
                    return v1
    for root, mountpoint, fstype, _options in mounts:
        if fstype == "cgroup2":
            for base in _candidates(root, mountpoint, own.get("")):
                v2 = PidsController(base=base, version=2)
                if base.is_dir() and _v2_enable_pids(base) and _usable(v2):
                    _remove_stale(base)
                    return v2
    log.info("sandbox_no_pids_cgroup")
    return None
