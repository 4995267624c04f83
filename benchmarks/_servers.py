"""Starting servers for side-by-side benchmarks (tether vs llama-cpp-python's own server)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

__all__ = ["free_port", "llama_cpp_server", "llama_server", "tether_backend_server", "tether_server"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def _process(cmd: list[str], health: str) -> Iterator[None]:
    # TETHER_BENCH_LOGS=DIR keeps each server's output (DIR/<port>.log), to see why one died.
    logs = os.environ.get("TETHER_BENCH_LOGS")
    sink: Any = subprocess.DEVNULL
    if logs:
        os.makedirs(logs, exist_ok=True)
        sink = open(os.path.join(logs, f"{health.split(':')[2].split('/')[0]}.log"), "wb")  # noqa: SIM115
    proc = subprocess.Popen(cmd, stdout=sink, stderr=subprocess.STDOUT, env=dict(os.environ))
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
        if sink is not subprocess.DEVNULL:
            sink.close()


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


@contextmanager
def llama_server(binary: str, model: str, *, ctx: int, threads: int, slots: int = 1) -> Iterator[str]:
    """llama.cpp's own server (scripts/install_llama_server.sh); yields its base URL (no /v1)."""
    port = free_port()
    cmd = [binary, "-m", model, "--host", "127.0.0.1", "--port", str(port), "-np", str(slots)]
    cmd += ["-c", str(ctx * slots), "-t", str(threads), "--no-webui"]
    with _process(cmd, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}"


@contextmanager
def tether_backend_server(backend: str, *, slots: int = 1, extra: list[str] | None = None) -> Iterator[str]:
    """``tether serve --backend URL``; yields its /v1 base URL."""
    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--backend", backend, "--port", str(port)]
    cmd += ["--slots", str(slots), *(extra or [])]
    with _process(cmd, f"http://127.0.0.1:{port}/health"):
        yield f"http://127.0.0.1:{port}/v1"
