"""Starting servers for side-by-side benchmarks (tether vs llama-cpp-python's own server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import httpx

__all__ = ["free_port", "llama_cpp_server", "tether_server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _process(cmd: list[str], health: str) -> Iterator[None]:
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=dict(os.environ))
    try:
        deadline = time.monotonic() + 180
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"server exited early: {' '.join(cmd)}")
            try:
                if httpx.get(health, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"server not healthy: {' '.join(cmd)}")
            time.sleep(0.2)
        yield
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()


@contextmanager
def tether_server(model: str, *, ctx: int, threads: int, extra: list[str] | None = None) -> Iterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tether.cli",
        "serve",
        "--model",
        model,
        "--port",
        str(port),
        "--ctx",
        str(ctx),
        "--threads",
        str(threads),
        *(extra or []),
    ]
    with _process(cmd, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}/v1"


@contextmanager
def llama_cpp_server(model: str, *, ctx: int, threads: int) -> Iterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "llama_cpp.server",
        "--model",
        model,
        "--port",
        str(port),
        "--n_ctx",
        str(ctx),
        "--n_threads",
        str(threads),
        "--n_threads_batch",
        str(threads),
        "--verbose",
        "False",
    ]
    with _process(cmd, f"http://127.0.0.1:{port}/v1/models"):
        yield f"http://127.0.0.1:{port}/v1"
