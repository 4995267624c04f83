"""GPU and engine options from the command line, ``TETHER_*`` variables and ``tether.toml`` into
``ServerConfig.llama_options``; bad values are one-line errors; ``tether eval --gpu-layers``."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import tether.server
from tests.support.serve import isolated_serve, serve
from tether.cli import app
from tether.config import ServerConfig, Settings
from tether.engine.llama_options import LlamaOptions
from tether.errors import ConfigError

OPTION_ENV = (
    "TETHER_GPU_LAYERS",
    "TETHER_FLASH_ATTN",
    "TETHER_CACHE_TYPE_K",
    "TETHER_CACHE_TYPE_V",
    "TETHER_MMAP",
    "TETHER_MLOCK",
    "TETHER_ENGINE",
)


@pytest.fixture
def served(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``tether serve`` up to loading the model, in an empty directory with no TETHER_* variables."""
    return isolated_serve(tmp_path, monkeypatch)


def test_defaults_keep_the_cpu_build_behaviour(served: list[ServerConfig]) -> None:
    assert serve() == (0, "")
    assert served[0].llama_options == LlamaOptions() == LlamaOptions(0, None, "f16", "f16", True, False)


def test_every_flag_on_the_command_line(served: list[ServerConfig]) -> None:
    code, output = serve(
        "--gpu-layers", "all", "--flash-attn", "--cache-type-k", "q8_0", "--cache-type-v", "Q4_0",
        "--no-mmap", "--mlock",
    )  # fmt: skip
    assert code == 0, output
    assert served[0].llama_options == LlamaOptions(
        gpu_layers=-1, flash_attn=True, cache_type_k="q8_0", cache_type_v="q4_0", mmap=False, mlock=True
    )
    assert serve("--gpu-layers", "20") == (0, "")
    assert served[1].llama_options.gpu_layers == 20


def test_every_option_from_the_environment(
    served: list[ServerConfig], monkeypatch: pytest.MonkeyPatch
) -> None:
    for name, value in zip(OPTION_ENV, ("ALL", "true", "q5_1", "q8_0", "false", "1"), strict=False):
        monkeypatch.setenv(name, value)
    assert serve() == (0, "")
    assert served[0].llama_options == LlamaOptions(-1, True, "q5_1", "q8_0", False, True)


def test_the_file_the_environment_and_the_command_line(
    served: list[ServerConfig], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tether.toml").write_text(
        'gpu-layers = "all"\nflash_attn = true\ncache_type_k = "q8_0"\ncache-type-v = "q8_0"\nmmap = false\n'
        "[profiles.small]\ngpu_layers = 8\nmlock = true\n"
    )
    assert serve() == (0, "")
    assert served[0].llama_options == LlamaOptions(-1, True, "q8_0", "q8_0", False, False)
    assert serve("--profile", "small") == (0, "")
    assert served[1].llama_options == LlamaOptions(8, True, "q8_0", "q8_0", False, True)
    monkeypatch.setenv("TETHER_GPU_LAYERS", "4")  # env over file, flag over env
    assert serve("--profile", "small", "--mmap", "--cache-type-v", "f16") == (0, "")
    assert served[2].llama_options == LlamaOptions(4, True, "q8_0", "f16", True, True)


def test_config_show_reports_all_and_the_sources(served: list[ServerConfig], tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text("gpu_layers = -1\n")
    result = CliRunner().invoke(app, ["config", "show", "--flash-attn"])
    assert result.exit_code == 0, result.output
    rows = {line.split()[0]: line.split()[1:] for line in result.output.splitlines()[1:]}
    assert rows["gpu_layers"] == ["all", f"file:{tmp_path / 'tether.toml'}"]
    assert rows["flash_attn"] == ["true", "cli"] and rows["cache_type_k"] == ["f16", "default"]


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--gpu-layers", "lots"], "--gpu-layers: Value error, must be 'all' or a number of layers >= 0"),
        (["--gpu-layers", "-3"], "must be 'all' or a number of layers >= 0 (got '-3')"),
        (["--cache-type-k", "q3_k"], "--cache-type-k: Input should be 'f16', 'q8_0', 'q4_0', 'q4_1'"),
        (["--cache-type-v", "q8_0"], "--cache-type-v q8_0 needs --flash-attn"),
        (["--engine", "mlx", "--gpu-layers", "all"], "the MLX engine always runs on the GPU"),
        (
            ["--engine", "mlx", "--cache-type-k", "q8_0"],
            "--cache-type-k q8_0: llama.cpp option(s) the MLX engine",
        ),
    ],
)
def test_bad_values_are_one_line_errors(served: list[ServerConfig], args: list[str], expected: str) -> None:
    code, output = serve(*args)
    lines = [line for line in output.splitlines() if line.strip()]
    assert code == 2 and len(lines) == 1 and expected in lines[0], output
    assert not served


def test_a_bad_value_in_the_file_names_the_file(served: list[ServerConfig], tmp_path: Path) -> None:
    (tmp_path / "tether.toml").write_text('cache_type_v = "q4_0"\n')
    code, output = serve()
    assert code == 2 and "--cache-type-v q4_0 needs --flash-attn" in output and not served
    (tmp_path / "tether.toml").write_text('gpu_layers = "most"\n')
    code, output = serve()
    assert code == 2 and "gpu_layers (from " in output and "tether.toml" in output


def test_settings_refuse_mlx_options_directly() -> None:
    with pytest.raises(ConfigError, match="--no-mmap"):
        Settings(engine="mlx", mmap=False).to_config()
    assert Settings(engine="mlx").to_config().llama_options == LlamaOptions()


# -- tether eval builds its engines with load_engines too -------------------------------------------


def test_eval_passes_gpu_layers_to_the_engines(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[ServerConfig] = []

    def load_engines(config: ServerConfig, **_: object) -> list[object]:
        seen.append(config)
        raise ConfigError("stopped before loading a model")

    monkeypatch.setattr(tether.server, "load_engines", load_engines)
    out = str(tmp_path / "{suite}.{preset}.jsonl")
    args = ["eval", "--suite", "scenarios", "--limit", "1", "--preset", "bare", "--out", out, "--no-progress"]
    result = CliRunner().invoke(app, [*args, "--gpu-layers", "ALL"])
    assert result.exit_code == 2 and "stopped before loading a model" in result.output
    assert seen[0].llama_options == LlamaOptions(gpu_layers=-1)
    result = CliRunner().invoke(app, [*args, "--gpu-layers", "many"])
    assert result.exit_code == 2 and "--gpu-layers must be 'all' or a number" in result.output
    assert len(seen) == 1


def test_the_documented_file_and_commands_work(served: list[ServerConfig], tmp_path: Path) -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "gpu.md").read_text()
    (tmp_path / "tether.toml").write_text(page.split("```toml\n", 1)[1].split("```", 1)[0])
    assert serve() == (0, "") and serve("--profile", "laptop") == (0, "")
    assert served[0].llama_options == LlamaOptions(-1, True, "q8_0", "q8_0")
    assert served[1].llama_options == LlamaOptions(0, True, "q8_0", "q8_0")
    (tmp_path / "tether.toml").unlink()
    commands = [
        line.split("#")[0].split()[2:] for line in page.splitlines() if line.startswith("tether serve")
    ]
    assert len(commands) == 3
    for args in commands:
        code, output = serve(*[arg.replace("big.gguf", str(tmp_path / "big.gguf")) for arg in args])
        assert code == 0, output
    assert served[-1].llama_options.gpu_layers == 20 and served[-1].n_ctx == 32768
