"""``--batching`` and ``--speculate``: from flags, ``TETHER_*`` and ``tether.toml`` into ``ServerConfig``,
refused where they cannot apply, and which engine ``load_engines`` builds for them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

import tether.engine.llama_cpp
import tether.server
from tests.support.serve import isolated_serve, serve
from tether.config import ServerConfig, Settings
from tether.errors import ConfigError


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``tether serve`` up to loading the model, in an empty directory with no TETHER_* variables."""
    return isolated_serve(tmp_path, monkeypatch)


def test_defaults_flags_environment_and_file(
    served: list[ServerConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert serve("--slots", "8") == (0, "")
    assert (served[-1].batching, served[-1].speculate) == ("auto", True)
    assert serve("--batching", "off", "--no-speculate") == (0, "")
    assert (served[-1].batching, served[-1].speculate) == ("off", False)
    monkeypatch.setenv("TETHER_BATCHING", "on")
    assert serve() == (0, "") and served[-1].batching == "on"
    monkeypatch.delenv("TETHER_BATCHING")
    (tmp_path / "tether.toml").write_text('batching = "off"\nspeculate = false\n')
    assert serve() == (0, "")
    assert (served[-1].batching, served[-1].speculate) == ("off", False)


def test_a_bad_value_is_a_one_line_error(served: list[ServerConfig]) -> None:
    code, output = serve("--batching", "maybe")
    lines = [line for line in output.splitlines() if line.strip()]
    assert (
        code == 2 and len(lines) == 1 and "--batching" in lines[0] and "'auto', 'on' or 'off'" in lines[0]
    ), output
    assert not served


def test_batching_on_is_refused_in_front_of_a_backend() -> None:
    with pytest.raises(ConfigError, match="--batching"):
        Settings(backend="http://127.0.0.1:8080", batching="on").to_config()
    assert Settings(backend="http://127.0.0.1:8080").to_config().batching == "auto"


class _Loaded:
    def __init__(self, kind: str, **kwargs: Any) -> None:
        self.kind, self.kwargs = kind, kwargs


def _engines(monkeypatch: pytest.MonkeyPatch, config: ServerConfig) -> list[Any]:
    """What ``load_engines`` builds, with the two llama.cpp loaders recording instead of loading."""
    monkeypatch.setattr(
        tether.engine.llama_cpp, "LlamaCppEngine", lambda path, **kw: _Loaded("context", **kw)
    )
    monkeypatch.setattr(
        tether.server,
        "_batched_slots",
        lambda cfg, path, progress: [_Loaded("sequence") for _ in range(cfg.slots)],
    )
    return tether.server.load_engines(config)


def test_load_engines_batches_slots_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    assert [e.kind for e in _engines(monkeypatch, ServerConfig(slots=1))] == ["sequence"]  # a lone user too
    assert [e.kind for e in _engines(monkeypatch, ServerConfig(slots=3))] == ["sequence"] * 3
    assert [e.kind for e in _engines(monkeypatch, ServerConfig(slots=1, batching="on"))] == ["sequence"]
    assert [e.kind for e in _engines(monkeypatch, ServerConfig(slots=2, batching="off"))] == ["context"] * 2
    assert [e.kind for e in _engines(monkeypatch, ServerConfig(slots=1, batching="off"))] == ["context"]


def test_batching_on_is_refused_for_mlx(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="--batching on"):
        _engines(monkeypatch, ServerConfig(engine="mlx", batching="on", model_path=str(tmp_path)))
