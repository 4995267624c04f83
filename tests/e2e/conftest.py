"""A real ``tether serve`` process on a free loopback port, on the bundled model.

Parametrized over engines: llama.cpp on the GGUF, and MLX (``--engine mlx``) on the same model
converted once into the MLX cache; the MLX run is skipped where ``mlx``/``mlx-lm`` are not installed
(``scripts/install_mlx.sh``).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.support.processes import tether_serve


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if "tests/e2e/" in str(item.fspath):
            item.add_marker(pytest.mark.e2e)


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
    with tether_serve("--ctx", "4096", "--constrain", "strict", *_engine_args(request.param)) as (base, _):
        yield f"{base}/v1"
