"""Fixtures for the real-client tests: installed clients, an offline namespace, tether servers.

Run ``scripts/install_clients.sh`` first; without it every test here is skipped
with that instruction. Select them with ``-m clients``.
"""

from __future__ import annotations

import json
import os
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.clients.harness import CLIENTS, Netns, Server

MODEL_NAME = "smollm2-135m-instruct"


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "clients: drives real coding clients (run scripts/install_clients.sh)")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/clients/" in str(item.fspath):
            item.add_marker(pytest.mark.clients)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="session")
def installed() -> dict[str, str]:
    """The client versions ``scripts/install_clients.sh`` recorded; skips when it was not run."""
    marker = CLIENTS / "installed.json"
    if not marker.exists():
        pytest.skip("real clients not installed: run scripts/install_clients.sh (needs node >= 20 and npm)")
    versions: dict[str, str] = json.loads(marker.read_text())
    return versions


@pytest.fixture(scope="session")
def netns(installed: dict[str, str]) -> Iterator[Netns]:
    ns = Netns()
    yield ns
    ns.close()


@pytest.fixture
def workdir(tmp_path: Path) -> dict[str, Path]:
    """A project dir (the client's cwd) and a home dir (its config, caches and state)."""
    dirs = {"project": tmp_path / "project", "home": tmp_path / "home"}
    for path in dirs.values():
        path.mkdir()
    return dirs


@pytest.fixture
def scripted_server(netns: Netns, tmp_path: Path) -> Iterator[Any]:
    """Start a scripted tether server (``tests.clients.scripted_server``) with the given options."""
    servers: list[Server] = []

    def start(*args: str) -> tuple[Server, Path]:
        port = free_port()
        log = tmp_path / f"requests-{len(servers)}.jsonl"
        cmd = [
            sys.executable,
            "-m",
            "tests.clients.scripted_server",
            "--port",
            str(port),
            "--log",
            str(log),
            *args,
        ]
        server = Server(netns, cmd, port, tmp_path / f"scripted-server-{len(servers)}.log")
        servers.append(server)
        server.start(timeout=60)
        return server, log

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def model_server(netns: Netns, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Server]:
    """``tether serve --constrain strict`` on the bundled model (8,192-token context), logging JSON lines."""
    log = tmp_path_factory.mktemp("model-server") / "tether.log"
    port = free_port()
    cmd = [sys.executable, "-m", "tether.cli", "serve", "--port", str(port), "--constrain", "strict"]
    # Repeatable and bounded: greedy sampling, 256 tokens when a client sends no max_tokens (cn, aider).
    env = {**os.environ, "TETHER_TEMPERATURE": "0", "TETHER_MAX_TOKENS": "256"}
    server = Server(netns, cmd, port, log, env=env)
    with server.running():
        yield server
