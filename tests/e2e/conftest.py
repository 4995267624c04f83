"""A real ``tether serve`` process on a free loopback port, on the bundled model.

Parametrized over engines: llama.cpp on the GGUF, and MLX (``--engine mlx``) on the same model
converted once into the MLX cache; the MLX run is skipped where ``mlx``/``mlx-lm`` are not installed
(``scripts/install_mlx.sh``).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator

import httpx
import pytest


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _engine_args(engine: str) -> list[str]:
    if engine == "llama":
        return []
    from tether.engine.locate import bundled_model_path
    from tether.engine.mlx import mlx_available

    if not mlx_available():
        pytest.skip("mlx / mlx-lm are not installed (scripts/install_mlx.sh)")
    from tether.engine.mlx.convert import cached_gguf_to_mlx

    return ["--engine", "mlx", "--model", str(cached_gguf_to_mlx(bundled_model_path()))]


@pytest.fixture(scope="session", params=["llama", "mlx"])
def server(request: pytest.FixtureRequest) -> Iterator[str]:
    port = free_port()
    cmd = [
        sys.executable,
        "-m",
        "tether.cli",
        "serve",
        "--port",
        str(port),
        "--ctx",
        "4096",
        "--constrain",
        "strict",
        *_engine_args(request.param),
    ]
    log = tempfile.TemporaryFile()  # noqa: SIM115 - closed in the finally below
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=log, env={**os.environ, "NO_COLOR": "1"})
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    try:
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
        yield f"{base}/v1"
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
