"""One llama-server on the bundled model for the whole module set, and tether in front of it.

Every test here is a real-model test (marker ``model``) and needs the llama-server binary
(marker ``backend``); without it they skip locally and fail in CI.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.backends.checks import remote_engines, tether_in_front
from tests.support.llama_server import llama_server_binary, running_llama_server
from tests.support.redis_server import in_ci
from tether.engine.remote import LlamaServerEngine


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/backends/" in str(item.fspath):
            item.add_marker(pytest.mark.model)
            item.add_marker(pytest.mark.backend)


@pytest.fixture(scope="session")
def llama_server_bin() -> Path:
    found = llama_server_binary()
    if found is None:
        reason = "llama-server is not built (scripts/install_llama_server.sh, or make setup-test)"
        if in_ci():
            pytest.fail(f"{reason}; CI must run the remote-backend tests")
        pytest.skip(reason)
    return found


@pytest.fixture(scope="session")
def llama_server(llama_server_bin: Path) -> Iterator[str]:
    with running_llama_server(llama_server_bin, slots=2) as url:
        yield url


@pytest.fixture(scope="session")
def backend_engines(llama_server: str) -> Iterator[list[LlamaServerEngine]]:
    with remote_engines(llama_server, LlamaServerEngine) as engines:
        yield engines


@pytest.fixture
def tether_url(backend_engines: list[LlamaServerEngine]) -> Iterator[str]:
    """tether in front of the llama-server, on a real socket (default preset: strict)."""
    with tether_in_front(backend_engines) as url:
        yield url
