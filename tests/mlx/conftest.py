"""MLX engine tests: the bundled SmolLM2 converted once into the MLX cache, next to the llama.cpp engine.

Everything here is marked ``mlx`` and skipped, with the reason, where MLX (``mlx``/``mlx-lm``) or the
converter's ``gguf`` package cannot be imported. The converted directory lives in the tether MLX cache
(``TETHER_MLX_CACHE``, else ``~/.cache/tether/mlx``), so only the first run pays the conversion.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from tether.engine.mlx import mlx_available

if TYPE_CHECKING:
    from tether.engine.llama_cpp import LlamaCppEngine
    from tether.engine.mlx import MlxEngine

N_CTX = 4096
# One BLAS / llama.cpp thread: on a busy 2-core machine spinning worker threads cost far more than they
# give, and results do not depend on the thread count. Set before MLX (and so OpenBLAS) is loaded.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
THREADS = 1


def _skip_reason() -> str | None:
    if not mlx_available():
        return "mlx / mlx-lm are not importable here (pip install 'tether[mlx]'; on Linux: mlx[cpu])"
    if importlib.util.find_spec("gguf") is None:
        return "the gguf package (needed to convert the bundled model) is not installed"
    return None


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "mlx: uses the MLX engine (mlx-lm) on the converted bundled model")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    reason = _skip_reason()
    for item in items:
        if "tests/mlx/" in str(item.fspath):
            item.add_marker(pytest.mark.mlx)
            item.add_marker(pytest.mark.model)  # the bundled model: `make test-fast` leaves these out
            if reason is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


@pytest.fixture(scope="session")
def gguf_path() -> Path:
    from tether.engine.locate import bundled_model_path

    return bundled_model_path()


@pytest.fixture(scope="session")
def mlx_dir(gguf_path: Path) -> Path:
    """The bundled model as an MLX directory (float32), converted once into the cache."""
    from tether.engine.mlx.convert import cached_gguf_to_mlx

    return cached_gguf_to_mlx(gguf_path)


@pytest.fixture(scope="session")
def mlx_engine(mlx_dir: Path) -> Iterator[MlxEngine]:
    from tether.engine.mlx import MlxEngine

    engine = MlxEngine(mlx_dir, n_ctx=N_CTX)
    yield engine
    engine.close()


@pytest.fixture(scope="session")
def llama_engine(gguf_path: Path) -> Iterator[LlamaCppEngine]:
    if importlib.util.find_spec("llama_cpp") is None:
        pytest.skip("llama-cpp-python is not installed: the parity tests need the reference engine")
    from tether.engine.llama_cpp import LlamaCppEngine

    engine = LlamaCppEngine(gguf_path, n_ctx=N_CTX, n_threads=THREADS)
    yield engine
    engine.close()
