"""A real ``tether serve`` process on a free loopback port, for end-to-end tests.

``wait_healthy`` and ``stop`` are how every server process the tests start (tether, llama-server)
is waited for and ended.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

import httpx

from tests.support.socket_server import free_port

__all__ = ["stop", "tether_serve", "wait_healthy"]


def wait_healthy(
    proc: subprocess.Popen[bytes], url: str, *, name: str, timeout: int, log: IO[bytes], interval: float = 0.2
) -> None:
    """Poll ``url`` until it answers 200; RuntimeError (with the end of ``log``) if ``proc`` exits first
    or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        if proc.poll() is not None:
            log.seek(0)
            raise RuntimeError(f"{name} exited: {log.read().decode(errors='replace')[-2000:]}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline:
            raise RuntimeError(f"{name} did not become healthy in {timeout} s")
        time.sleep(interval)


def stop(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM, then kill if it has not exited within 20 s."""
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


@contextmanager
def tether_serve(
    *args: str, env: dict[str, str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``(http://127.0.0.1:PORT, process)`` once ``/health`` answers; stopped (SIGTERM, then kill) on exit."""
    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--port", str(port), *args]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    environ = {**os.environ, "NO_COLOR": "1", **(env or {})}
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env=environ)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, f"{base}/health", name="tether serve", timeout=120, log=log)
        yield base, proc
    finally:
        stop(proc)
        log.close()
