"""The bundled SmolLM2 model, loaded once per test session."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tether.engine.llama_cpp import LlamaCppEngine
from tether.engine.locate import bundled_model_path


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/model/" in str(item.fspath):
            item.add_marker(pytest.mark.model)


@pytest.fixture(scope="session")
def smollm() -> Iterator[LlamaCppEngine]:
    engine = LlamaCppEngine(bundled_model_path(), n_ctx=4096)
    yield engine
    engine.close()
