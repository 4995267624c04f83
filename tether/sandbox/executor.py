"""Running commands: the ``Executor`` protocol and the bubblewrap-backed ``SandboxExecutor``.

A sandboxed run is ``[sh -c 'join cgroup'] bwrap <isolation flags> prlimit
<rlimits> -- argv``. The wall clock is enforced here: on expiry every process
in the sandbox's pid namespace gets SIGTERM, and after ``kill_grace_s`` bwrap
gets SIGKILL, which (``--die-with-parent``) kills the namespace's init and so
every process in it. Output is read incrementally into bounded buffers.

``mode="unsandboxed"`` runs the same rlimits and wall clock on the host in a
new session, without any isolation, and warns on every call.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any, Protocol, runtime_checkable

import structlog

from tether.errors import SandboxError, ToolError
from tether.sandbox.bwrap import SandboxPlan, bwrap_argv, find_prlimit, prepare, rlimit_prefix, sandbox_env
from tether.sandbox.cgroup import RunCgroup
from tether.sandbox.config import ExecResult, SandboxConfig
from tether.sandbox.output import BoundedCapture, drain

__all__ = ["CallableExecutor", "Executor", "SandboxExecutor", "TrustedCallable"]

log = structlog.get_logger(__name__)

_READER_GRACE_S = 1.0


@runtime_checkable
class Executor(Protocol):
    """Anything that runs an argv and reports an ``ExecResult``."""

    async def run(self, argv: Sequence[str], *, stdin: bytes | str | None = None) -> ExecResult: ...


TrustedCallable = Callable[[Sequence[str], bytes | None], Awaitable[ExecResult]]


class CallableExecutor:
    """Dispatches ``argv[0]`` to trusted in-process coroutines; no isolation, for code you wrote."""

    def __init__(self, handlers: Mapping[str, TrustedCallable]) -> None:
        self._handlers = dict(handlers)

    async def run(self, argv: Sequence[str], *, stdin: bytes | str | None = None) -> ExecResult:
        if not argv or argv[0] not in self._handlers:
            name = argv[0] if argv else ""
            return ExecResult(exit_code=127, stdout="", stderr=f"no trusted handler named {name!r}\n")
        data = stdin.encode() if isinstance(stdin, str) else stdin
        return await self._handlers[argv[0]](list(argv), data)


class _Status:
    """Incremental reader of bwrap's ``--json-status-fd`` pipe."""

    def __init__(self, fd: int) -> None:
        self._fd = fd
        self._buf = ""
        self.docs: dict[str, Any] = {}
        os.set_blocking(fd, False)

    def poll(self) -> None:
        while True:
            try:
                chunk = os.read(self._fd, 4096)
            except BlockingIOError:
                break
            if not chunk:
                break
            self._buf += chunk.decode("utf-8", errors="replace")
        decoder = json.JSONDecoder()
        while self._buf.strip():
            try:
                doc, end = decoder.raw_decode(self._buf.lstrip())
            except json.JSONDecodeError:
                break
            self._buf = self._buf.lstrip()[end:]
            if isinstance(doc, dict):
                self.docs.update(doc)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def int_field(self, name: str) -> int | None:
        value = self.docs.get(name)
        return value if isinstance(value, int) and not isinstance(value, bool) else None


def _ns_members(pid_ns: int, exclude: set[int]) -> list[int]:
    """Host pids of the processes in pid namespace ``pid_ns`` (a /proc scan)."""
    target = f"pid:[{pid_ns}]"
    found: list[int] = []
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not entry.name.isdigit() or int(entry.name) in exclude:
                continue
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{entry.name}/ns/pid") == target:
                    found.append(int(entry.name))
    return found


def _signal_name(num: int) -> str:
    try:
        return signal.Signals(num).name
    except ValueError:
        return f"signal {num}"


def _interpret(code: int, *, from_shell_status: bool) -> tuple[int, str | None]:
    """(exit code with signals as negative numbers, killed_by) from a raw status.

    bwrap reports a child killed by signal N as status 128 + N, like a shell.
    """
    sig: int | None = None
    if code < 0:
        sig = -code
    elif from_shell_status and 128 < code < 128 + signal.NSIG:
        sig = code - 128
    if sig is None:
        return code, None
    if sig == signal.SIGXCPU:
        return -sig, "cpu_time"
    if sig == signal.SIGXFSZ:
        return -sig, "file_size"
    return -sig, _signal_name(sig)


async def _feed(writer: asyncio.StreamWriter | None, data: bytes) -> None:
    if writer is None:
        return
    with contextlib.suppress(BrokenPipeError, ConnectionResetError):
        writer.write(data)
        await writer.drain()
    with contextlib.suppress(OSError):
        writer.close()


class SandboxExecutor:
    """Runs argvs under bubblewrap with the limits of ``config`` (see the module docstring)."""

    def __init__(self, config: SandboxConfig) -> None:
        self._config = config
        self._plan: SandboxPlan | None = None
        self._prlimit: str | None = None
        if config.mode == "bwrap":
            self._plan = prepare(config)
            self._prlimit = self._plan.prlimit
        else:
            self._prlimit = find_prlimit()
            log.warning("sandbox_disabled", mode=config.mode, work_dir=str(config.work_dir))

    @property
    def config(self) -> SandboxConfig:
        return self._config

    @property
    def isolation(self) -> str:
        """How runs are isolated, in words (for logs and health output)."""
        return self._plan.describe() if self._plan else "none (unsandboxed)"

    def run_sync(
        self, argv: Sequence[str], *, stdin: bytes | str | None = None, timeout_s: float | None = None
    ) -> ExecResult:
        """``run`` for synchronous callers; not usable inside a running event loop."""
        return asyncio.run(self.run(argv, stdin=stdin, timeout_s=timeout_s))

    async def run(
        self, argv: Sequence[str], *, stdin: bytes | str | None = None, timeout_s: float | None = None
    ) -> ExecResult:
        """Run ``argv`` (inside the sandbox, cwd = the work dir) and wait for it, its limits or the clock.

        ``timeout_s`` can only shorten the configured wall time. Raises
        ``SandboxError`` when the sandbox itself cannot be set up; a failing
        command is a normal result.
        """
        args = [str(a) for a in argv]
        if not args or not args[0] or any("\0" in a for a in args):
            raise ToolError("a command needs a non-empty argv without NUL bytes")
        limits = self._config.limits
        wall = limits.wall_time_s if timeout_s is None else max(0.001, min(timeout_s, limits.wall_time_s))
        data = stdin.encode() if isinstance(stdin, str) else stdin
        cgroup: RunCgroup | None = None
        status: _Status | None = None
        status_w: int | None = None
        if self._plan is None:
            log.warning("sandbox_unsandboxed_run", argv0=args[0], work_dir=str(self._config.work_dir))
            prefix = rlimit_prefix(self._prlimit, limits, nproc=False) if self._prlimit else []
            full = [*prefix, *args]
            env = sandbox_env(self._config, home=str(self._config.work_dir))
            cwd = str(self._config.work_dir)
        else:
            status_r, status_w = os.pipe()
            status = _Status(status_r)
            full = [
                *bwrap_argv(self._plan, self._config, status_fd=status_w),
                *rlimit_prefix(self._plan.prlimit, limits, nproc=self._plan.pids == "rlimit"),
                *args,
            ]
            if self._plan.controller is not None and limits.max_processes is not None:
                try:
                    # +2: bwrap's monitor process and the namespace's init.
                    cgroup = self._plan.controller.create(limits.max_processes + 2)
                except OSError as exc:
                    status.close()
                    os.close(status_w)
                    raise SandboxError(f"cannot create the run's pids cgroup: {exc}") from exc
                full = ["/bin/sh", "-c", 'echo $$ > "$0" && exec "$@"', str(cgroup.procs_file), *full]
            env = {"PATH": "/usr/bin:/bin"}
            cwd = "/"
        started = time.monotonic()
        try:
            proc = await asyncio.create_subprocess_exec(
                *full,
                stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=env,
                cwd=cwd,
                start_new_session=True,
                pass_fds=(status_w,) if status_w is not None else (),
            )
        except OSError as exc:
            if status is not None:
                status.close()
            if cgroup is not None:
                await cgroup.remove()
            raise SandboxError(f"cannot start {full[0]}: {exc}") from exc
        finally:
            if status_w is not None:
                os.close(status_w)
        try:
            return await self._supervise(proc, args, data, wall, started, status, cgroup)
        finally:
            if proc.returncode is None:  # cancelled: no grace
                self._kill_now(proc, status, cgroup)
                with contextlib.suppress(ProcessLookupError):
                    await asyncio.shield(proc.wait())
            if cgroup is not None:
                await cgroup.remove()
            if status is not None:
                status.close()

    async def _supervise(
        self,
        proc: asyncio.subprocess.Process,
        args: list[str],
        data: bytes | None,
        wall: float,
        started: float,
        status: _Status | None,
        cgroup: RunCgroup | None,
    ) -> ExecResult:
        limits = self._config.limits
        out, err = BoundedCapture(limits.max_output_bytes), BoundedCapture(limits.max_output_bytes)
        tasks = [
            asyncio.ensure_future(drain(proc.stdout, out)),
            asyncio.ensure_future(drain(proc.stderr, err)),
        ]
        if data is not None:
            tasks.append(asyncio.ensure_future(_feed(proc.stdin, data)))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(proc.wait(), wall)
            except TimeoutError:
                timed_out = True
                await self._terminate(proc, status, cgroup)
            # Stragglers would hold the pipes open: the process group in unsandboxed mode, the
            # cgroup in sandbox mode (bwrap's init exiting already killed its pid namespace).
            if status is None:
                self._signal_all(proc, status, cgroup, signal.SIGKILL)
            elif cgroup is not None:
                cgroup.kill_all()
            _done, pending = await asyncio.wait(tasks, timeout=_READER_GRACE_S)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        if pending:
            log.warning("sandbox_output_abandoned", argv0=args[0])
        duration = time.monotonic() - started
        returncode = proc.returncode if proc.returncode is not None else -signal.SIGKILL
        raw, shell_status = returncode, False
        if status is not None:
            status.poll()
            if status.int_field("child-pid") is None:
                raise SandboxError(
                    "bubblewrap failed to set up the sandbox: "
                    + (err.text().strip()[:500] or f"exit status {returncode}")
                )
            exit_code = status.int_field("exit-code")
            raw, shell_status = (exit_code, True) if exit_code is not None else (returncode, False)
        code, killed_by = _interpret(raw, from_shell_status=shell_status)
        if timed_out:
            killed_by = "wall_time"
        result = ExecResult(
            exit_code=code,
            stdout=out.text(),
            stderr=err.text(),
            timed_out=timed_out,
            killed_by=killed_by,
            truncated=out.truncated or err.truncated,
            duration_s=round(duration, 4),
        )
        log.debug(
            "sandbox_run_done",
            argv0=args[0],
            exit_code=code,
            killed_by=killed_by,
            duration_s=result.duration_s,
        )
        return result

    def _members(
        self, proc: asyncio.subprocess.Process, status: _Status | None, cgroup: RunCgroup | None
    ) -> list[int]:
        """Host pids of the sandboxed command and its descendants (not bwrap's own processes)."""
        if status is None:
            return []
        status.poll()
        init = status.int_field("child-pid")
        exclude = {proc.pid} | ({init} if init is not None else set())
        if cgroup is not None:
            return [pid for pid in cgroup.pids() if pid not in exclude]
        pid_ns = status.int_field("pid-namespace")
        return _ns_members(pid_ns, exclude) if pid_ns is not None else []

    def _signal_all(
        self, proc: asyncio.subprocess.Process, status: _Status | None, cgroup: RunCgroup | None, sig: int
    ) -> None:
        if status is None:  # unsandboxed: the whole session's process group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, sig)
            return
        for pid in self._members(proc, status, cgroup):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    def _kill_now(
        self, proc: asyncio.subprocess.Process, status: _Status | None, cgroup: RunCgroup | None
    ) -> None:
        """SIGKILL everything of this run that may still exist."""
        self._signal_all(proc, status, cgroup, signal.SIGKILL)
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
        if cgroup is not None:
            cgroup.kill_all()

    async def _terminate(
        self, proc: asyncio.subprocess.Process, status: _Status | None, cgroup: RunCgroup | None
    ) -> None:
        """SIGTERM, ``kill_grace_s`` to exit, then SIGKILL (bwrap dying takes the namespace with it)."""
        self._signal_all(proc, status, cgroup, signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), self._config.limits.kill_grace_s)
            return
        except TimeoutError:
            pass
        log.info("sandbox_kill_after_grace", pid=proc.pid)
        self._kill_now(proc, status, cgroup)
        await proc.wait()
