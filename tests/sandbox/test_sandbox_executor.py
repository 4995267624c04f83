"""The executor itself: normal runs, fail-closed refusal, unsandboxed mode, cancellation, config checks."""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Sequence
from pathlib import Path

import pytest
from structlog.testing import capture_logs

from tests.sandbox.conftest import SECRET, ExecutorFactory
from tether.errors import ConfigError, SandboxError, ToolError
from tether.sandbox import CallableExecutor, ExecResult, Executor, Limits, SandboxConfig, SandboxExecutor
from tether.sandbox.output import BoundedCapture

pytestmark = pytest.mark.sandbox


# -- fail closed (runs everywhere, bubblewrap or not) ------------------------------------------


def test_missing_bwrap_refuses(work_dir: Path) -> None:
    with pytest.raises(SandboxError, match="bubblewrap \\(bwrap\\) not found"):
        SandboxExecutor(SandboxConfig(work_dir=work_dir, bwrap_path=str(work_dir / "no-such-bwrap")))


def test_bwrap_refused_namespaces_refuses(work_dir: Path, tmp_path: Path) -> None:
    fake = tmp_path / "bwrap"
    fake.write_text("#!/bin/sh\necho 'bwrap: No permissions to creating new namespace' >&2\nexit 1\n")
    fake.chmod(0o755)
    with pytest.raises(SandboxError, match="No permissions to creating new namespace") as info:
        SandboxExecutor(
            SandboxConfig(work_dir=work_dir, bwrap_path=str(fake), limits=Limits(max_processes=None))
        )
    assert "mode='unsandboxed'" in info.value.message  # the error says how an operator can opt out


def test_bwrap_that_stops_working_fails_the_run(work_dir: Path, tmp_path: Path) -> None:
    """A bwrap that passed the probe but then fails to set up a sandbox raises, never runs unsandboxed."""
    flag = tmp_path / "probed"
    fake = tmp_path / "bwrap"
    fake.write_text(
        f"#!/bin/sh\nif [ -e {flag} ]; then echo 'bwrap: setting up uid map: Permission denied' >&2; exit 1; fi\n"
        f"touch {flag}\nexit 0\n"
    )
    fake.chmod(0o755)
    ex = SandboxExecutor(
        SandboxConfig(work_dir=work_dir, bwrap_path=str(fake), limits=Limits(max_processes=None))
    )
    with pytest.raises(SandboxError, match="uid map"):
        ex.run_sync(["touch", str(work_dir / "ran")])
    assert not (work_dir / "ran").exists()


def test_unknown_mode_is_a_config_error(work_dir: Path) -> None:
    with pytest.raises(ConfigError, match="unknown sandbox mode"):
        SandboxConfig(work_dir=work_dir, mode="none")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "limits",
    [
        {"wall_time_s": 0},
        {"cpu_time_s": -1},
        {"memory_bytes": 0},
        {"max_processes": 0},
        {"max_output_bytes": 1.5},
        {"wall_time_s": float("inf")},
        {"max_processes": True},
    ],
)
def test_bad_limits_are_config_errors(limits: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        Limits(**limits)  # type: ignore[arg-type]


def test_config_checks_work_dir_and_env(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        SandboxConfig(work_dir=tmp_path / "missing")
    with pytest.raises(ConfigError, match="environment variable"):
        SandboxConfig(work_dir=tmp_path, env={"A=B": "x"})
    with pytest.raises(ConfigError, match="absolute"):
        SandboxConfig(work_dir=tmp_path, ro_binds=("relative/path",))


# -- unsandboxed mode: explicit opt-in, warns on every call -------------------------------------


def test_unsandboxed_mode_warns_on_every_call(work_dir: Path) -> None:
    with capture_logs() as logs:
        ex = SandboxExecutor(SandboxConfig(work_dir=work_dir, mode="unsandboxed"))
        first = ex.run_sync(["sh", "-c", "pwd; echo $HOME"])
        second = ex.run_sync(["true"])
    assert first.stdout.split() == [str(work_dir), str(work_dir)]
    assert second.ok
    events = [e["event"] for e in logs if e["log_level"] == "warning"]
    assert events == ["sandbox_disabled", "sandbox_unsandboxed_run", "sandbox_unsandboxed_run"]
    assert ex.isolation == "none (unsandboxed)"


def test_unsandboxed_mode_still_enforces_wall_clock_and_group_kill(work_dir: Path) -> None:
    ex = SandboxExecutor(
        SandboxConfig(work_dir=work_dir, mode="unsandboxed", limits=Limits(wall_time_s=0.5, kill_grace_s=0.3))
    )
    started = time.monotonic()
    result = ex.run_sync(["sh", "-c", "trap '' TERM; sleep 31.77 & sleep 31.77"])
    assert result.timed_out and result.killed_by == "wall_time"
    assert time.monotonic() - started < 3
    leftover = subprocess.run(["pgrep", "-f", "sleep 31.77"], capture_output=True, text=True, check=False)
    assert not [p for p in leftover.stdout.split() if int(p) != os.getpid()]


# -- normal runs -------------------------------------------------------------------------------


def test_exit_codes_output_stdin_and_cwd(executor_factory: ExecutorFactory, work_dir: Path) -> None:
    ex = executor_factory()
    result = ex.run_sync(["sh", "-c", "pwd; cat; echo oops >&2; exit 3"], stdin="from stdin\n")
    assert result.exit_code == 3 and not result.ok
    assert result.stdout == "/workspace\nfrom stdin\n"
    assert result.stderr == "oops\n"
    assert not result.timed_out and result.killed_by is None and not result.truncated
    assert result.duration_s > 0
    assert ex.run_sync(["true"]).ok
    missing = ex.run_sync(["no-such-program"])
    assert missing.exit_code == 127 and "no-such-program" in missing.stderr


def test_signal_death_is_reported(executor_factory: ExecutorFactory) -> None:
    result = executor_factory().run_sync(["sh", "-c", "kill -SEGV $$"])
    assert result.exit_code == -11 and result.killed_by == "SIGSEGV"


def test_environment_is_an_allowlist(executor_factory: ExecutorFactory, fake_home: Path) -> None:
    result = executor_factory().run_sync(["env"])
    names = {line.split("=", 1)[0] for line in result.stdout.splitlines()}
    assert names <= {
        "PATH",
        "HOME",
        "TMPDIR",
        "LANG",
        "LC_ALL",
        "TERM",
        "PYTHONDONTWRITEBYTECODE",
        "PWD",
        "TETHER_TEST_MARKER",
    }
    assert SECRET not in result.stdout


def test_timeout_argument_only_shortens(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(wall_time_s=1.0)
    short = ex.run_sync(["sleep", "5"], timeout_s=0.3)
    assert short.timed_out and short.duration_s < 1.0
    capped = ex.run_sync(["sleep", "5"], timeout_s=100)
    assert capped.timed_out and capped.duration_s < 2.5


def test_concurrent_runs_are_independent(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(max_processes=8)

    async def both() -> list[ExecResult]:
        return list(await asyncio.gather(*(ex.run(["sh", "-c", f"sleep 0.2; echo {i}"]) for i in range(3))))

    results = asyncio.run(both())
    assert [r.stdout for r in results] == ["0\n", "1\n", "2\n"]


def test_cancelling_a_run_kills_it(executor_factory: ExecutorFactory, work_dir: Path) -> None:
    ex = executor_factory()

    async def cancel() -> None:
        task = asyncio.ensure_future(ex.run(["sh", "-c", "sleep 0.6; touch after"]))
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(cancel())
    time.sleep(0.6)
    assert not (work_dir / "after").exists()


def test_empty_argv_is_refused(executor_factory: ExecutorFactory) -> None:
    with pytest.raises(ToolError):
        executor_factory().run_sync([])


def test_run_as_non_root_uses_rlimit_in_user_namespace(bwrap_problem: str | None) -> None:
    """Root is exempt from RLIMIT_NPROC, so as root the cgroup limits processes; check the non-root path too."""
    if bwrap_problem is not None:
        pytest.skip(f"bubblewrap cannot create a sandbox in this environment: {bwrap_problem}")
    if os.geteuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip(
            "needs root and setpriv to switch to an unprivileged uid (non-root runs test this path already)"
        )
    system_py = "/usr/bin/python3"
    probe = subprocess.run(
        [system_py, "-c", "import sys; print(sys.version_info[:2])"],
        capture_output=True,
        text=True,
        check=False,
    )
    if probe.stdout.strip() != str(sys.version_info[:2]):
        pytest.skip("no system python of the same version to run the executor as another user")
    repo = Path(__file__).resolve().parents[2]
    site = next(p for p in sys.path if p.endswith("site-packages"))
    blocked = [
        str(d) for p in (Path(repo), Path(site)) for d in (p, *p.parents) if not d.stat().st_mode & 0o001
    ]
    if blocked:
        # e.g. a checkout under a 0700 mktemp dir: uid 65534 cannot import tether from there at all.
        pytest.skip(f"{blocked[0]} is not searchable by other users, so uid 65534 cannot import tether")
    work = Path(tempfile.mkdtemp(prefix="tether-nobody-"))
    try:
        work.chmod(0o777)
        code = textwrap.dedent(
            """
            import pathlib, sys
            from tether.sandbox import Limits, SandboxConfig, SandboxExecutor
            limits = Limits(max_processes=8, kill_grace_s=2.0)
            ex = SandboxExecutor(SandboxConfig(work_dir=pathlib.Path(sys.argv[1]), limits=limits))
            print("ISOLATION=" + ex.isolation)
            fork = "import os, time\\nn = 0\\nwhile n < 300:\\n    try: pid = os.fork()\\n" \\
                "    except OSError: break\\n    if pid == 0: time.sleep(20); os._exit(0)\\n    n += 1\\nprint(n)"
            print("CHILDREN=" + ex.run_sync(["python3", "-c", fork]).stdout.strip())
            # Without a cgroup, SIGTERM reaches the command through the pid-namespace scan.
            term = ex.run_sync(["bash", "-c", "trap 'echo got-sigterm; exit 0' TERM; sleep 20 & wait"], timeout_s=0.5)
            print("TERM=" + term.stdout.strip() + "/" + str(term.killed_by))
            """
        )
        done = subprocess.run(
            ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", system_py, "-c", code, str(work)],
            env={"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{repo}:{site}"},
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
        if "cannot create a sandbox" in done.stderr:
            pytest.skip("unprivileged user namespaces are not available for non-root users here")
        assert done.returncode == 0, done.stderr
        found = dict(
            line.split("=", 1)
            for line in done.stdout.splitlines()
            if line.startswith(("ISOLATION=", "CHILDREN=", "TERM="))
        )
        assert found["ISOLATION"].endswith("process limit via rlimit"), done.stdout
        assert int(found["CHILDREN"]) < 8, done.stdout
        assert found["TERM"] == "got-sigterm/wall_time", done.stdout
    finally:
        shutil.rmtree(work, ignore_errors=True)


# -- building blocks -------------------------------------------------------------------------


def test_bounded_capture_keeps_head_and_tail() -> None:
    cap = BoundedCapture(10)
    for chunk in (b"abc", b"defgh", b"ijklmnop", b"qrstuvwxyz"):
        cap.feed(chunk)
    assert cap.total == 26 and cap.truncated and cap.dropped == 16
    text = cap.text()
    assert text.startswith("abcde") and text.endswith("vwxyz") and "16 bytes omitted" in text
    small = BoundedCapture(10)
    small.feed(b"short")
    assert small.text() == "short" and not small.truncated


def test_callable_executor_runs_trusted_coroutines() -> None:
    async def echo(argv: Sequence[str], stdin: bytes | None) -> ExecResult:
        return ExecResult(exit_code=0, stdout=" ".join(argv[1:]) + (stdin or b"").decode(), stderr="")

    ex = CallableExecutor({"echo": echo})
    assert isinstance(ex, Executor)
    assert asyncio.run(ex.run(["echo", "a", "b"], stdin="!")).stdout == "a b!"
    assert asyncio.run(ex.run(["rm", "-rf", "/"])).exit_code == 127


def test_run_cgroups_are_removed_and_stale_ones_cleaned(executor_factory: ExecutorFactory) -> None:
    from tether.sandbox.cgroup import find_pids_controller

    controller = find_pids_controller()
    if controller is None:
        pytest.skip("no writable pids cgroup here (the rlimit strategy is in use)")
    ex = executor_factory()
    assert ex.isolation.endswith("process limit via cgroup")
    assert ex.run_sync(["sh", "-c", "sleep 5 & echo started"], timeout_s=0.3).stdout == "started\n"
    mine = [p.name for p in controller.base.iterdir() if p.name.startswith(f"tether-{os.getpid()}-")]
    assert mine == []
    stale = controller.base / "tether-999999999-0-abcdef"  # above pid_max: that process cannot exist
    stale.mkdir()
    find_pids_controller.cache_clear()
    try:
        assert find_pids_controller() == controller
        assert not stale.exists()
    finally:
        if stale.exists():
            stale.rmdir()
