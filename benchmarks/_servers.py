"""Starting servers for side-by-side benchmarks (tether vs llama-cpp-python's own server)."""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO

from tests.support.processes import stop, wait_healthy
from tests.support.socket_server import free_port

__all__ = [
    "free_port",
    "llama_cpp_server",
    "llama_server",
    "tether_backend_server",
    "tether_process",
    "tether_server",
]


@contextmanager
def _process(cmd: list[str], health: str) -> Iterator[subprocess.Popen[bytes]]:
    """Run ``cmd`` until the block exits, once ``health`` answers 200 (the tests' own helpers)."""
    # TETHER_BENCH_LOGS=DIR keeps each server's output (DIR/<port>.log), to see why one died.
    logs = os.environ.get("TETHER_BENCH_LOGS")
    if logs:
        os.makedirs(logs, exist_ok=True)
        log: IO[bytes] = open(os.path.join(logs, f"{health.split(':')[2].split('/')[0]}.log"), "w+b")  # noqa: SIM115
    else:
        log = tempfile.TemporaryFile()  # noqa: SIM115 - its end is shown if the server dies
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=dict(os.environ))
    try:
        wait_healthy(proc, health, name=" ".join(cmd[:3]), timeout=180, log=log)
        yield proc
    finally:
        stop(proc)
        log.close()


@contextmanager
def tether_server(model: str, *, ctx: int, threads: int, extra: list[str] | None = None) -> Iterator[str]:
    """``tether serve`` on ``model``; yields its /v1 base URL."""
    with tether_process(model, ctx=ctx, threads=threads, extra=extra) as (base, _):
        yield f"{base}/v1"


@contextmanager
def tether_process(
    model: str, *, ctx: int | None, threads: int, extra: list[str] | None = None
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """``tether serve`` on ``model`` (``ctx`` None: its default window); yields its base URL (no /v1)
    and its process, for benchmarks that watch the process itself."""
    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--model", model, "--port", str(port)]
    cmd += [*(["--ctx", str(ctx)] if ctx is not None else []), "--threads", str(threads), *(extra or [])]
    with _process(cmd, f"http://127.0.0.1:{port}/health") as proc:
        yield f"http://127.0.0.1:{port}", proc


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
