"""The bundled SmolLM2 model, loaded once per test session."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest

from tests.support.engines import bundled_batched
from tests.support.socket_server import serving
from tether.config import ServerConfig
from tether.engine.batch import BatchedLlama
from tether.engine.embedding import LlamaEmbedder
from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.locate import bundled_embedding_model_path, bundled_model_path
from tether.engine.scheduler import Scheduler
from tether.proxy.app import create_app


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/model/" in str(item.fspath):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def smollm() -> Iterator[LlamaCppEngine]:
    # TETHER_TEST_THREADS=1 when another llama.cpp process shares the cores: two 2-thread processes on
    # 2 cores spin against each other and both slow down tens of times; one thread each does not.
    threads = int(os.environ.get("TETHER_TEST_THREADS", "0")) or None
    engine = LlamaCppEngine(bundled_model_path(), n_ctx=4096, n_threads=threads)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def batched() -> Iterator[BatchedLlama]:
    """The bundled model as 8 batched sequences of 2,048 tokens (one context; docs/batching.md)."""
    with bundled_batched(8, 2048) as engine:
        yield engine


@pytest.fixture(scope="module")
def served_as_serve(smollm: LlamaCppEngine) -> Iterator[str]:
    """The bundled model served as ``tether serve`` serves it, with the bundled embedding model
    (relevance in meaning, the invented-result check), over a real socket: its base URL."""
    embedder = LlamaEmbedder(bundled_embedding_model_path(), n_threads=1)
    app = create_app(ServerConfig(), Scheduler([smollm]), embedder=embedder)
    with serving(app) as url:
        yield url
    embedder.close()
