"""The escape battery: every attempt must be contained and the host must stay healthy.

Each test runs real hostile programs under bubblewrap with small limits (the
machine has two shared cores). The ``executor_factory`` fixture checks after
each test that no sandboxed process survived.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import textwrap
import threading
import time
import tracemalloc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.sandbox.conftest import SECRET, ExecutorFactory

pytestmark = pytest.mark.sandbox


def py(code: str) -> list[str]:
    """Run ``code`` with the system Python inside the sandbox."""
    return ["python3", "-c", textwrap.dedent(code)]


@pytest.fixture
def tcp_server() -> Iterator[tuple[int, list[bytes]]]:
    """A TCP server on 127.0.0.1 recording whatever connects to it."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    received: list[bytes] = []
    stop = threading.Event()

    def serve() -> None:
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except (TimeoutError, OSError):
                continue
            with conn:
                conn.settimeout(1)
                try:
                    received.append(conn.recv(100) or b"<connected>")
                except OSError:
                    received.append(b"<connected>")

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1], received
    stop.set()
    thread.join(2)
    server.close()


def test_network_is_unreachable(
    executor_factory: ExecutorFactory, tcp_server: tuple[int, list[bytes]]
) -> None:
    port, received = tcp_server
    # The server really is reachable from the host.
    with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
        s.sendall(b"host")
    ex = executor_factory()
    result = ex.run_sync(
        py(
            f"""
            import socket
            for host in ("127.0.0.1", "localhost", "10.0.2.2", "1.1.1.1"):
                try:
                    socket.create_connection((host, {port}), timeout=1).sendall(b"sandbox")
                    print("CONNECTED", host)
                except OSError as exc:
                    print("blocked", host, type(exc).__name__)
            print(open("/proc/net/dev").read())
            """
        )
    )
    assert result.exit_code == 0, result.stderr
    assert "CONNECTED" not in result.stdout
    assert result.stdout.count("blocked") == 4
    interfaces = [line.split(":")[0].strip() for line in result.stdout.splitlines() if ":" in line]
    assert interfaces == ["lo"], result.stdout
    time.sleep(0.3)
    assert received == [b"host"]


def test_write_outside_work_dir_fails(
    executor_factory: ExecutorFactory, fake_home: Path, work_dir: Path
) -> None:
    target = fake_home / "planted"
    ex = executor_factory()
    script = f"""
        for p in /usr/evil /etc/evil /evil /bin/evil {target} {fake_home}/.secret /proc/evil; do
            if echo pwned > "$p" 2>/dev/null; then echo "WROTE $p"; else echo "denied $p"; fi
        done
        echo ok > /tmp/private-{os.getpid()} && echo tmp-ok
        echo inside > /workspace/allowed && echo work-ok
    """
    result = ex.run_sync(["bash", "-c", script])
    assert "WROTE" not in result.stdout, result.stdout
    assert "tmp-ok" in result.stdout and "work-ok" in result.stdout
    assert not target.exists()
    assert (fake_home / ".secret").read_text() == SECRET
    assert not Path(f"/tmp/private-{os.getpid()}").exists()  # the sandbox's /tmp is private
    assert (work_dir / "allowed").read_text() == "inside\n"
    assert not Path("/usr/evil").exists() and not Path("/evil").exists()


def test_read_planted_secret_fails(executor_factory: ExecutorFactory, fake_home: Path) -> None:
    ex = executor_factory()
    script = f"""
        cat {fake_home}/.secret; cat ~/.secret; cat /root/.bashrc; ls /home /root {fake_home}
        cat /etc/shadow; env; cat /proc/1/environ | tr '\\0' '\\n'
    """
    result = ex.run_sync(["bash", "-c", script])
    assert SECRET not in result.stdout + result.stderr
    assert "TETHER_TEST_HOST_SECRET" not in result.stdout
    assert "HOME=/tmp" in result.stdout


def test_symlink_escape_fails(executor_factory: ExecutorFactory, fake_home: Path, work_dir: Path) -> None:
    (work_dir / "to_secret").symlink_to(fake_home / ".secret")
    (work_dir / "to_home").symlink_to(fake_home)
    (work_dir / "to_root").symlink_to("/")
    ex = executor_factory()
    script = f"""
        cat to_secret; cat to_home/.secret; cat to_root{fake_home}/.secret
        echo pwned > to_home/created; ln -s {fake_home} made_inside; cat made_inside/.secret
        echo pwned > made_inside/created2
    """
    result = ex.run_sync(["bash", "-c", script])
    assert SECRET not in result.stdout + result.stderr
    assert not (fake_home / "created").exists() and not (fake_home / "created2").exists()
    assert sorted(p.name for p in fake_home.iterdir()) == [".secret"]


def test_dotdot_traversal_fails(executor_factory: ExecutorFactory, fake_home: Path) -> None:
    ex = executor_factory()
    rel = "../" * 12 + str(fake_home).lstrip("/") + "/.secret"
    result = ex.run_sync(["bash", "-c", f"cat {rel}; cd ../../..; pwd; ls -a; cat .{fake_home}/.secret"])
    assert SECRET not in result.stdout + result.stderr
    listing = set(result.stdout.split())
    assert "home" not in listing and "root" not in listing and "work" not in listing


def test_host_processes_and_privileges_are_hidden(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory()
    result = ex.run_sync(
        [
            "bash",
            "-c",
            "echo $(ls /proc | grep -E '^[0-9]+$'); grep -E 'CapEff|NoNewPrivs' /proc/self/status; id -u",
        ]
    )
    lines = result.stdout.split("\n")
    pids = [int(p) for p in lines[0].split()]
    # Only the sandbox's own pid namespace: bwrap's init (1), bash and its pipeline; nothing of the host.
    assert 1 in pids and len(pids) <= 6 and max(pids) < 50, pids
    assert os.getpid() not in pids or os.getpid() < 50
    assert "CapEff:\t0000000000000000" in result.stdout
    assert "NoNewPrivs:\t1" in result.stdout
    assert lines[-2] == "65534"


def test_fork_bomb_is_bounded_and_killed(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(max_processes=16, wall_time_s=2.0, cpu_time_s=2.0)
    # First prove the cap: fork until the kernel refuses, report how many children we got.
    counted = ex.run_sync(
        py(
            """
            import os, time
            n = 0
            while n < 1000:
                try:
                    pid = os.fork()
                except OSError as exc:
                    print(n, exc.errno)
                    break
                if pid == 0:
                    time.sleep(30)
                    os._exit(0)
                n += 1
            """
        )
    )
    children, errno = (int(x) for x in counted.stdout.split())
    assert children < 16, counted
    assert errno == 11  # EAGAIN
    # Then the classic bomb: contained by the cap, ended by the wall clock.
    started = time.monotonic()
    bomb = ex.run_sync(["bash", "-c", ":(){ :|:& };:; sleep 30"])
    elapsed = time.monotonic() - started
    assert bomb.timed_out and bomb.killed_by == "wall_time"
    assert elapsed < 2.0 + 0.5 + 2.0
    # The host can still fork.
    assert subprocess.run(["true"], check=False).returncode == 0


def test_memory_bomb_hits_address_space_limit(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(memory_bytes=256 * 1024 * 1024)
    result = ex.run_sync(py("chunks = []\nwhile True: chunks.append(bytearray(32 * 1024 * 1024))"))
    assert result.exit_code != 0
    assert "MemoryError" in result.stderr
    assert not result.timed_out


def test_tmpfs_cannot_eat_host_memory(executor_factory: ExecutorFactory) -> None:
    """File pages in tmpfs escape RLIMIT_AS, so every writable tmpfs is size-limited (and /dev read-only)."""
    ex = executor_factory(tmpfs_bytes=4 * 1024 * 1024)
    script = """
        for p in /tmp/fill /dev/shm/fill /dev/fill /fill; do
            if head -c 20000000 /dev/zero > "$p" 2>/dev/null; then echo "FILLED $p"; else echo "stopped $p"; fi
        done
        du -b /tmp/fill /dev/shm/fill
    """
    result = ex.run_sync(["bash", "-c", script])
    assert "FILLED" not in result.stdout, result.stdout
    sizes = [int(line.split()[0]) for line in result.stdout.splitlines() if line.split()[0].isdigit()]
    assert sizes and all(size <= 4 * 1024 * 1024 for size in sizes)


def test_infinite_loop_hits_cpu_limit(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(cpu_time_s=1.0, wall_time_s=8.0)
    result = ex.run_sync(py("while True: pass"))
    assert result.killed_by == "cpu_time"  # by RLIMIT_CPU, long before the 8 s wall clock
    assert not result.timed_out


def test_sleeping_loop_hits_wall_clock(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(wall_time_s=1.0)
    result = ex.run_sync(["bash", "-c", "while true; do sleep 0.2; done"])
    assert result.timed_out and result.killed_by == "wall_time"
    assert 1.0 <= result.duration_s < 1.0 + 0.5 + 1.0


def test_huge_output_is_truncated_with_bounded_memory(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(max_output_bytes=64 * 1024)
    tracemalloc.start()
    try:
        result = ex.run_sync(
            ["bash", "-c", "head -c 100000000 /dev/zero | tr '\\0' a; head -c 50000000 /dev/zero >&2"]
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.exit_code == 0
    assert result.truncated
    assert "output truncated by tether" in result.stdout
    assert "99934464 bytes omitted" in result.stdout  # 100 MB minus the 64 KiB kept
    assert len(result.stdout) < 64 * 1024 + 200 and len(result.stderr) < 64 * 1024 + 200
    assert result.stdout.startswith("a" * 1000) and result.stdout.endswith("a" * 1000)
    assert peak < 16 * 1024 * 1024, f"peak traced memory {peak} bytes"


def test_sigterm_is_sent_first(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(wall_time_s=1.0, kill_grace_s=2.0)
    result = ex.run_sync(["bash", "-c", "trap 'echo got-sigterm; exit 0' TERM; sleep 30 & wait"])
    assert result.timed_out and result.killed_by == "wall_time"
    assert "got-sigterm" in result.stdout
    assert result.duration_s < 2.5  # exited on SIGTERM, long before the grace ran out


def test_sigterm_ignoring_process_is_killed_after_grace(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(wall_time_s=1.0, kill_grace_s=0.5)
    result = ex.run_sync(
        py(
            """
            import signal, time
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            print("ignoring", flush=True)
            while True:
                time.sleep(0.05)
            """
        )
    )
    assert result.timed_out and result.killed_by == "wall_time"
    assert result.exit_code == -9
    assert "ignoring" in result.stdout
    assert 1.5 <= result.duration_s < 3.5


def test_limits_cannot_be_raised(executor_factory: ExecutorFactory) -> None:
    ex = executor_factory(memory_bytes=512 * 1024 * 1024, cpu_time_s=5.0)
    result = ex.run_sync(
        py(
            """
            import resource as r
            for name in ("RLIMIT_AS", "RLIMIT_CPU", "RLIMIT_NOFILE", "RLIMIT_FSIZE", "RLIMIT_NPROC"):
                res = getattr(r, name)
                soft, hard = r.getrlimit(res)
                try:
                    r.setrlimit(res, (r.RLIM_INFINITY, r.RLIM_INFINITY))
                    print("RAISED", name)
                except (ValueError, OSError):
                    print("refused", name, soft, hard)
            """
        )
    )
    assert "RAISED" not in result.stdout, result.stdout
    assert f"refused RLIMIT_AS {512 * 1024 * 1024} {512 * 1024 * 1024}" in result.stdout
    assert "refused RLIMIT_CPU 5 6" in result.stdout
    shell = ex.run_sync(
        ["bash", "-c", "ulimit -v unlimited && echo RAISED; prlimit --pid $$ --as=unlimited && echo RAISED2"]
    )
    assert "RAISED" not in shell.stdout


def test_file_size_limit(executor_factory: ExecutorFactory, work_dir: Path) -> None:
    ex = executor_factory(max_file_bytes=1024 * 1024)
    result = ex.run_sync(["bash", "-c", "head -c 5000000 /dev/zero > big"])
    assert result.killed_by == "file_size" or result.exit_code != 0
    assert (work_dir / "big").stat().st_size <= 1024 * 1024


def test_host_survives_the_battery() -> None:
    """Runs last in this module: the test process is intact and can still start processes."""
    assert (
        subprocess.run([sys.executable, "-c", "print(1)"], capture_output=True, check=True).stdout == b"1\n"
    )
