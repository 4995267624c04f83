"""A tether replica as its own process, over a scripted engine: something the chaos tests can ``kill -9``.

``python -m tests.support.replica --port P [--session-store URL] [--workflow F] [--delay S]`` serves
tether's real app through ``tether.server.run_server`` (uvicorn, tether's logging) on a loopback
port; only the engine is scripted (:func:`agent`, a function of the prompt, so every replica
answers one turn the same way), ``--delay`` seconds per token so a test can catch a stream in flight.
:func:`replica_process` starts one and waits for ``/health``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO

from tests.support.processes import stop, wait_healthy

__all__ = ["SHIP", "agent", "replica_process"]

# An ordered workflow: read the file, run the tests, then submit.
SHIP = "name: ship\ntools: [read_file, run_tests, submit]\nsteps: [read_file, run_tests]\nordered: true\nterminal: submit\n"


def _call(name: str, **args: str) -> str:
    return json.dumps({"tool_calls": [{"name": name, "arguments": args}]})


def agent(prompt: str) -> str:
    """Reads the file, runs the tests, submits: the next step after the last tool result it sees."""
    last = prompt.rsplit("<|im_start|>user\n", 1)[-1]
    if last.startswith("Result of run_tests"):
        return _call("submit", summary="done")
    if last.startswith("Result of read_file"):
        return _call("run_tests")
    if "Not executed" in last:
        return _call("read_file", path="a.txt")
    if last.startswith("Say"):
        return "Hello from a replica. " * 4
    return _call("read_file", path="a.txt")


def main() -> None:
    from tests.support.engines import SlowEngine
    from tether.config import ServerConfig
    from tether.engine.scheduler import Scheduler
    from tether.logging import configure_logging
    from tether.proxy.app import create_app
    from tether.server import run_server

    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--session-store", default="memory")
    parser.add_argument("--workflow", action="append", default=[])
    parser.add_argument("--delay", type=float, default=0.0)
    args = parser.parse_args()
    configure_logging("info")
    config = ServerConfig(
        port=args.port,
        preset="full",
        session_store=args.session_store,
        workflows=tuple(args.workflow),
        shutdown_grace_s=1.0,
    )
    engine = SlowEngine([agent], delay=args.delay)
    run_server(create_app(config, Scheduler([engine], queue_limit=config.queue_limit)), config)


@contextmanager
def replica_process(
    port: int,
    *,
    workdir: Path,
    session_store: str = "memory",
    delay: float = 0.0,
    stderr: IO[bytes] | None = None,
) -> Iterator[subprocess.Popen[bytes]]:
    """A replica on ``port`` with the :data:`SHIP` workflow, until the block exits (or it was killed).
    ``stderr``: where its output goes (default: a temporary file shown if it dies at start)."""
    workflow = workdir / "ship.yaml"
    workflow.write_text(SHIP, encoding="utf-8")
    cmd = [
        sys.executable,
        "-m",
        "tests.support.replica",
        "--port",
        str(port),
        "--session-store",
        session_store,
    ]
    cmd += ["--workflow", str(workflow), "--delay", str(delay)]
    with tempfile.TemporaryFile() as log:
        out = stderr if stderr is not None else log
        proc = subprocess.Popen(cmd, stdout=out, stderr=out, cwd=Path(__file__).resolve().parents[2])
        try:
            wait_healthy(proc, f"http://127.0.0.1:{port}/health", name="replica", timeout=60, log=log)
            yield proc
        finally:
            if proc.poll() is None:
                stop(proc)


if __name__ == "__main__":
    main()
