"""Running real clients against a tether server with no way out to the internet.

Each test gets a network namespace that has only a loopback interface (``unshare``
as root, entered with ``nsenter``): the tether server and the client run inside
it, so any attempt of a client to reach the internet fails at once instead of
leaking or hanging. Without root (a developer laptop) commands run unwrapped,
with the clients' telemetry and update switches still off.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "CLIENTS",
    "ROOT",
    "ClientRun",
    "Netns",
    "Server",
    "client_env",
    "load_log",
    "run_client",
]

ROOT = Path(__file__).resolve().parents[2]
CLIENTS = ROOT / ".cache" / "clients"

# Telemetry, update checks and downloads off for every client (and anything they spawn).
QUIET_ENV = {
    "DO_NOT_TRACK": "1",
    "NO_UPDATE_NOTIFIER": "1",
    "npm_config_update_notifier": "false",
    "NO_COLOR": "1",
    "OPENCODE_DISABLE_AUTOUPDATE": "1",
    "OPENCODE_DISABLE_MODELS_FETCH": "1",
    "OPENCODE_DISABLE_LSP_DOWNLOAD": "1",
    "OPENCODE_DISABLE_SHARE": "1",
    "OPENCODE_DISABLE_DEFAULT_PLUGINS": "1",
    "OPENCODE_DISABLE_CLAUDE_CODE": "1",
    "OPENCODE_DISABLE_EXTERNAL_SKILLS": "1",
    "CONTINUE_CLI_ENABLE_TELEMETRY": "0",
    "CONTINUE_METRICS_ENABLED": "0",
    "CONTINUE_CLI_AUTO_UPDATED": "true",
    "AIDER_ANALYTICS": "false",
    "AIDER_CHECK_UPDATE": "false",
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_TELEMETRY": "False",
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
}


def client_env(home: Path, **extra: str) -> dict[str, str]:
    """A clean environment: its own HOME and XDG dirs under ``home``, quiet switches, ``extra``."""
    dirs = {
        name: home / sub
        for name, sub in (
            ("XDG_CONFIG_HOME", ".config"),
            ("XDG_DATA_HOME", ".local/share"),
            ("XDG_CACHE_HOME", ".cache"),
            ("XDG_STATE_HOME", ".local/state"),
        )
    }
    for path in dirs.values():
        path.mkdir(parents=True, exist_ok=True)
    env = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "LANG": "C.UTF-8",
        "TERM": "dumb",
        **{k: str(v) for k, v in dirs.items()},
        **QUIET_ENV,
    }
    env.update(extra)
    return env


class Netns:
    """A network namespace holding only loopback; ``wrap`` runs a command inside it."""

    def __init__(self) -> None:
        self.proc: subprocess.Popen[bytes] | None = None
        if os.geteuid() == 0 and shutil.which("unshare") and shutil.which("nsenter") and shutil.which("ip"):
            self.proc = subprocess.Popen(
                ["unshare", "--net", "--", "sh", "-c", "ip link set lo up && exec sleep 100000"],
                stdin=subprocess.DEVNULL,
            )
            deadline = time.monotonic() + 10
            while b"sleep" not in Path(f"/proc/{self.proc.pid}/cmdline").read_bytes():
                if self.proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("could not create a network namespace for the client tests")
                time.sleep(0.01)

    @property
    def isolated(self) -> bool:
        return self.proc is not None

    def wrap(self, cmd: Sequence[str]) -> list[str]:
        if self.proc is None:
            return list(cmd)
        return ["nsenter", "-t", str(self.proc.pid), "-n", "--", *cmd]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()


@dataclass
class Server:
    """A server process inside the namespace, healthy on ``base`` once started."""

    netns: Netns
    cmd: list[str]
    port: int
    log_path: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    proc: subprocess.Popen[bytes] | None = None

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def get(self, path: str, timeout: float = 5) -> tuple[int, str]:
        """GET from inside the namespace: (status, body); status 0 when nothing answered."""
        probe = (
            "import sys, urllib.request\n"
            "try:\n"
            f"    r = urllib.request.urlopen({self.base + path!r}, timeout={timeout})\n"
            "    print(r.status); print(r.read().decode())\n"
            "except Exception:\n"
            "    print(0)\n"
        )
        out = subprocess.run(
            self.netns.wrap([sys.executable, "-c", probe]),
            capture_output=True,
            text=True,
            timeout=timeout + 10,
        ).stdout
        status, _, body = out.partition("\n")
        return int(status or 0), body

    def start(self, timeout: float = 180) -> None:
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen(
                self.netns.wrap(self.cmd),
                stdout=log,
                stderr=log,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=ROOT,
            )
        deadline = time.monotonic() + timeout
        while self.get("/health", timeout=1)[0] != 200:
            if self.proc.poll() is not None:
                raise RuntimeError(f"server exited: {self.log_path.read_text(errors='replace')[-3000:]}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy after {timeout} s")
            time.sleep(0.2)

    def quiet_offset(self, timeout: float = 60) -> int:
        """The log's size once no slot is busy and nothing is queued: a client stopped mid-request
        finishes (and logs) its request here, not inside the next client's window."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status, body = self.get("/health", timeout=2)
            if status == 200:
                scheduler = json.loads(body)["scheduler"]
                if scheduler["busy_slots"] == 0 and scheduler["queue_depth"] == 0:
                    break
            time.sleep(0.2)
        return self.log_path.stat().st_size

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    @contextlib.contextmanager
    def running(self) -> Iterator[Server]:
        self.start()
        try:
            yield self
        finally:
            self.stop()


@dataclass
class ClientRun:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    stopped: bool = False  # ended by ``stop_when``, not by the client itself

    def tail(self, n: int = 3000) -> str:
        return f"exit {self.returncode}; stdout:\n{self.stdout[-n:]}\nstderr:\n{self.stderr[-n:]}"


def run_client(
    netns: Netns,
    cmd: Sequence[str],
    *,
    env: dict[str, str],
    cwd: Path,
    timeout: float,
    stop_when: Callable[[], bool] | None = None,
) -> ClientRun:
    """Run a client to completion (its own process group, killed whole on timeout).

    ``stop_when`` is polled every second; once it is true the client is stopped (``stopped``), which
    bounds an agent loop that a small model never ends by itself.
    """
    started = time.monotonic()
    proc = subprocess.Popen(
        netns.wrap(cmd),
        env=env,
        cwd=cwd,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    timed_out = stopped = False
    deadline = started + timeout
    while True:
        try:
            out, err = proc.communicate(timeout=1.0 if stop_when is not None else timeout)
            break
        except subprocess.TimeoutExpired:
            stopped = stop_when is not None and stop_when()
            timed_out = not stopped and time.monotonic() >= deadline
            if stopped or timed_out:
                os.killpg(proc.pid, signal.SIGKILL)
                out, err = proc.communicate()
                break
    return ClientRun(
        proc.returncode,
        out.decode(errors="replace"),
        err.decode(errors="replace"),
        round(time.monotonic() - started, 2),
        timed_out,
        stopped,
    )


def load_log(path: Path) -> list[dict[str, Any]]:
    """The JSON lines a ``Recorder`` (or a JSON-logging ``tether serve``) wrote."""
    if not path.exists():
        return []
    out: list[dict[str, Any]] = []
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        with contextlib.suppress(ValueError):
            value = json.loads(line)
            if isinstance(value, dict):
                out.append(value)
    return out
