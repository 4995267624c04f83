"""A real llama-server on the bundled model, for the remote-backend tests and benchmarks.

The binary is the one ``scripts/install_llama_server.sh`` builds from the llama.cpp source
vendored in the pinned llama-cpp-python sdist (``make setup-test`` runs it). Without it the
tests skip locally and fail in CI.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from tests.support.processes import stop, wait_healthy
from tests.support.socket_server import free_port
from tether.engine.locate import bundled_model_path

__all__ = ["llama_server_binary", "llama_server_process", "running_llama_server"]

ROOT = Path(__file__).resolve().parents[2]


def llama_server_binary() -> Path | None:
    """The built llama-server, or None when ``scripts/install_llama_server.sh`` has not run."""
    where = subprocess.run(
        ["bash", str(ROOT / "scripts" / "install_llama_server.sh"), "--where"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    path = Path(where)
    return path if path.is_file() and os.access(path, os.X_OK) else None


@contextmanager
def running_llama_server(
    binary: Path, *, slots: int = 2, ctx_per_slot: int = 4096, extra: tuple[str, ...] = ()
) -> Iterator[str]:
    """``http://127.0.0.1:PORT`` of a llama-server on the bundled model until the block exits."""
    with llama_server_process(binary, slots=slots, ctx_per_slot=ctx_per_slot, extra=extra) as (url, _):
        yield url


@contextmanager
def llama_server_process(
    binary: Path,
    *,
    port: int | None = None,
    slots: int = 2,
    ctx_per_slot: int = 4096,
    extra: tuple[str, ...] = (),
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The URL and process of a llama-server on the bundled model (on ``port``: a restart), stopped
    when the block exits unless a test killed it first."""
    port = port if port is not None else free_port()
    threads = os.environ.get("TETHER_TEST_THREADS") or str(min(os.cpu_count() or 2, 4))
    cmd = [
        str(binary),
        "-m",
        str(bundled_model_path()),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "-np",
        str(slots),
        "-c",
        str(ctx_per_slot * slots),
        "-t",
        threads,
        "--no-webui",
        *extra,
    ]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed below
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_healthy(proc, f"{base}/health", name="llama-server", timeout=60, log=log, interval=0.1)
        yield base, proc
    finally:
        if proc.poll() is None:
            stop(proc)
        log.close()
