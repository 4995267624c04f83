"""The engine's side dies or starves: the ``--backend`` llama-server killed and started again under load,
and a disk that fills up under the log and the prefix cache. Real processes, the bundled model.
"""

from __future__ import annotations

import errno
import json
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.support.llama_server import llama_server_binary, llama_server_process
from tests.support.processes import stop, tether_serve, wait_healthy
from tests.support.redis_server import in_ci
from tests.support.socket_server import free_port

pytestmark = pytest.mark.model

MODEL = "smollm2-135m-instruct"
STORY = {"role": "user", "content": "Write a long story about a lighthouse keeper and the sea."}


def _required(found: Any, reason: str) -> Any:
    if not found:
        if in_ci():
            pytest.fail(f"{reason}; CI must run the chaos tests")
        pytest.skip(reason)
    return found


def stream_outcome(base: str, results: list[str], started: threading.Event) -> None:
    """One streamed chat request: how it ended (``done``, ``error``, ``broken`` or ``cut``)."""
    body = {"model": MODEL, "messages": [STORY], "max_tokens": 400, "temperature": 0, "stream": True}
    try:
        with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as r:
            if r.status_code != 200:
                results.append(f"status {r.status_code}")
                return
            for line in r.iter_lines():
                if line.startswith("data: {") and '"error"' in line:
                    results.append("error")
                    return
                if line.startswith("data: {"):
                    started.set()
                if line == "data: [DONE]":
                    results.append("done")
                    return
            results.append("cut")  # the stream ended with neither an error event nor [DONE]
    except httpx.HTTPError:
        results.append("broken")


def test_the_backend_killed_and_started_again_under_load() -> None:
    """Two streams are running through tether when its llama-server is SIGKILLed: each ends with an
    error event, never a hang or a silent cut; once llama-server is back on its port, the next
    requests succeed through the same tether process."""
    binary = _required(llama_server_binary(), "llama-server is not built (scripts/install_llama_server.sh)")
    port = free_port()
    first = llama_server_process(binary, port=port, slots=2)
    url, engine = first.__enter__()
    try:
        with tether_serve("--backend", url, "--slots", "2") as (base, tether):
            results: list[str] = []
            started = [threading.Event(), threading.Event()]
            streams = [threading.Thread(target=stream_outcome, args=(base, results, s)) for s in started]
            for t in streams:
                t.start()
            assert all(s.wait(60) for s in started), "both streams should be generating"
            engine.send_signal(signal.SIGKILL)
            engine.wait(10)
            for t in streams:
                t.join(90)
            assert results == ["error", "error"], results

            down = httpx.post(
                f"{base}/v1/chat/completions",
                json={"model": MODEL, "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8},
                timeout=60,
            )
            assert down.status_code >= 500 and "error" in down.json(), down.text  # a clear error, at once

            first.__exit__(None, None, None)
            first = llama_server_process(binary, port=port, slots=2)
            first.__enter__()
            answered = httpx.post(
                f"{base}/v1/chat/completions",
                json={
                    "model": MODEL,
                    "messages": [{"role": "user", "content": "Say hello."}],
                    "max_tokens": 16,
                },
                timeout=120,
            )
            assert answered.status_code == 200, answered.text
            assert answered.json()["choices"][0]["message"]["content"]
            assert tether.poll() is None  # the same process, never restarted
            assert httpx.get(f"{base}/health", timeout=10).json()["scheduler"]["busy_slots"] == 0
    finally:
        first.__exit__(None, None, None)


def _unshare_works() -> bool:
    unshare = shutil.which("unshare")
    if unshare is None:
        return False
    probe = subprocess.run([unshare, "-rm", "true"], capture_output=True, timeout=10)
    return probe.returncode == 0


def fill(path: Path) -> None:
    """Write zeros to ``path`` until the disk refuses."""
    try:
        with path.open("wb") as f:
            while True:
                f.write(bytes(4096))
                f.flush()
    except OSError as exc:
        assert exc.errno == errno.ENOSPC, exc


def test_a_full_disk_under_the_log_and_the_prefix_cache() -> None:
    """``tether serve`` with its log and its prefix cache on a 1 MiB tmpfs (a private mount in a user
    namespace), filled up once the server is ready (a real ENOSPC): every request is still answered, the cache falls
    back to RAM after one failed write, and ``/health`` counts the log lines the disk refused."""
    _required(_unshare_works(), "unshare -rm is not permitted here (no unprivileged user namespaces)")
    port = free_port()
    with tempfile.TemporaryDirectory() as root:
        disk = Path(root) / "disk"
        disk.mkdir()
        serve = [
            sys.executable, "-m", "tether.cli", "serve", "--port", str(port), "--ctx", "4096",
            "--slots", "1", "--prefix-cache-dir", f"{disk}/cache", "--embedding-model", "off",
        ]  # fmt: skip
        script = f'mount -t tmpfs -o size=1m tmpfs {disk} && mkdir {disk}/cache && exec "$@" >> {disk}/tether.log 2>&1'
        with tempfile.TemporaryFile() as log:
            proc = subprocess.Popen(
                ["unshare", "-rm", "sh", "-c", script, "sh", *serve], stdout=log, stderr=log
            )
            base = f"http://127.0.0.1:{port}"
            try:
                wait_healthy(proc, f"{base}/health", name="tether serve", timeout=120, log=log)
                fill(Path(f"/proc/{proc.pid}/root{disk}") / "filler")  # the server's own view of the mount
                long_prompt = " ".join(f"item{i}" for i in range(300))  # past two 256-token blocks
                statuses = []
                for i in range(8):
                    messages = [{"role": "user", "content": f"{long_prompt}\nSay {i}."}]
                    r = httpx.post(
                        f"{base}/v1/chat/completions",
                        json={"model": MODEL, "messages": messages, "max_tokens": 4},
                        timeout=120,
                    )
                    statuses.append(r.status_code)
                health = httpx.get(f"{base}/health", timeout=10).json()
            finally:
                stop(proc)
        assert statuses == [200] * 8, statuses
        disk_tier = health["prefix_cache"]["disk"]
        assert disk_tier["writable"] is False and disk_tier["errors"] == 1, disk_tier
        assert health["log"]["dropped"] > 0 and "No space left" in health["log"]["last_error"], health.get(
            "log"
        )
        assert health["status"] == "ok"
        json.dumps(health)
