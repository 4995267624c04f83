"""A throwaway ``redis-server`` for the Redis session-store tests: its own port, its own directory,
no persistence; stopped when the block exits.

``require_redis_server()`` skips a test, with the reason, when ``redis-server`` is not installed
(``scripts/install_redis.sh``, run by ``make setup-test``) — but only outside CI: with ``CI`` set
(as CI services set it) a missing server fails the test, so the Redis tests cannot silently vanish.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
import redis

from tests.support.socket_server import free_port

__all__ = ["in_ci", "redis_process", "redis_server", "require_redis_server"]


def in_ci() -> bool:
    return os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")


def require_redis_server() -> str:
    """The ``redis-server`` binary; skip (fail under CI) when it is not installed."""
    found = shutil.which("redis-server")
    if found is not None:
        return found
    reason = "redis-server is not installed (scripts/install_redis.sh, or make setup-test)"
    if in_ci():
        pytest.fail(f"{reason}; CI must run the Redis session-store tests")
    pytest.skip(reason)


@contextmanager
def redis_server(directory: Path, *, port: int | None = None, persistent: bool = False) -> Iterator[str]:
    """``redis://127.0.0.1:PORT/0`` served by a fresh ``redis-server`` until the block exits
    (:func:`redis_process`)."""
    with redis_process(directory, port=port, persistent=persistent) as (url, _):
        yield url


@contextmanager
def redis_process(
    directory: Path, *, port: int | None = None, persistent: bool = False
) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """The URL and the process of a fresh ``redis-server``, stopped when the block exits (unless a
    test killed it first).

    ``port``: that one (a restart of an earlier server); ``persistent``: every write appended to
    ``directory``'s AOF and fsynced before Redis answers, so a server started again on the same
    directory has everything it acknowledged."""
    binary = require_redis_server()
    directory.mkdir(parents=True, exist_ok=True)
    log_path = directory / "redis.log"
    durable = ["--appendonly", "yes", "--appendfsync", "always"] if persistent else ["--appendonly", "no"]
    for _ in range(3 if port is None else 1):  # a free port may be taken by someone else before redis binds it
        chosen = port if port is not None else free_port()
        args = [binary, "--port", str(chosen), "--bind", "127.0.0.1", "--save", "", *durable]
        with log_path.open("ab") as log:
            proc = subprocess.Popen(
                [*args, "--dir", str(directory), "--daemonize", "no"],
                stdout=log,
                stderr=subprocess.STDOUT,
                cwd=directory,
            )
        if _answers(chosen, proc):
            break
        _stop(proc)
    else:
        raise RuntimeError(f"redis-server did not start; its log:\n{log_path.read_text(errors='replace')}")
    try:
        yield f"redis://127.0.0.1:{chosen}/0", proc
    finally:
        _stop(proc)


def _answers(port: int, proc: subprocess.Popen[bytes]) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and proc.poll() is None:
        client = redis.Redis(port=port, socket_connect_timeout=0.5)
        try:
            if client.ping():
                return True
        except redis.ConnectionError:
            time.sleep(0.02)
        finally:
            client.close()
    return False


def _stop(proc: subprocess.Popen[bytes]) -> None:
    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
