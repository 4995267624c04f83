"""A real ``tether serve`` process on a free loopback port, for end-to-end tests."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

from tests.support.socket_server import free_port

__all__ = ["tether_serve"]


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
        deadline = time.monotonic() + 120
        while True:
            if proc.poll() is not None:
                log.seek(0)
                raise RuntimeError(f"tether serve exited: {log.read().decode(errors='replace')[-2000:]}")
            try:
                if httpx.get(f"{base}/health", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError("tether serve did not become healthy in 120 s")
            time.sleep(0.2)
        yield base, proc
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
        proc.wait()
        log.close()
