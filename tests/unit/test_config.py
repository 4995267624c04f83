"""Security defaults close: a public bind needs an API key; the CLI says so in one line."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tests.support.serve import capture_serve
from tether.cli import app
from tether.config import ServerConfig, Settings, is_loopback
from tether.errors import ConfigError


def test_loopback_detection() -> None:
    assert is_loopback("127.0.0.1") and is_loopback("::1") and is_loopback("localhost")
    assert not is_loopback("0.0.0.0") and not is_loopback("192.168.1.5")


def test_public_bind_without_key_is_refused() -> None:
    with pytest.raises(ConfigError, match="API key"):
        Settings(host="0.0.0.0").to_config()
    assert Settings(host="0.0.0.0", api_key="k").to_config().host == "0.0.0.0"


def test_cli_refuses_public_bind_with_one_line() -> None:
    result = CliRunner().invoke(app, ["serve", "--host", "0.0.0.0"])
    assert result.exit_code == 2
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert len(lines) == 1 and "api-key" in lines[0]


def test_cli_bad_option_value() -> None:
    result = CliRunner().invoke(app, ["serve", "--constrain", "sometimes"])
    assert result.exit_code == 2
    assert "constrain" in result.output


def test_help_lists_commands() -> None:
    result = CliRunner().invoke(app, ["--help"])
    assert result.exit_code == 0
    assert "serve" in result.output


# -- every serve option from the environment; the command line wins ---------------------------

ENV_CASES = [
    ("TETHER_CTX", "4096", "n_ctx", 4096),
    ("TETHER_SLOTS", "3", "slots", 3),
    ("TETHER_PORT", "9123", "port", 9123),
    ("TETHER_HOST", "::1", "host", "::1"),
    ("TETHER_QUEUE_LIMIT", "5", "queue_limit", 5),
    ("TETHER_QUEUE_TIMEOUT", "12.5", "queue_timeout_s", 12.5),
    ("TETHER_QUEUE_TIMEOUT", "0", "queue_timeout_s", None),
    ("TETHER_SHUTDOWN_GRACE", "2", "shutdown_grace_s", 2.0),
    ("TETHER_THREADS", "1", "n_threads", 1),
    ("TETHER_TOOL_FORMAT", "hermes", "tool_format", "hermes"),
    ("TETHER_PRESET", "full", "preset", "full"),
    ("TETHER_CONSTRAIN", "off", "constrain", "off"),
    ("TETHER_ENGINE", "llama", "engine", "llama"),
    ("TETHER_MODEL", "/models/x.gguf", "model_path", "/models/x.gguf"),
    ("TETHER_MODEL_ALIAS", "gpt-4o,local", "model_aliases", ("gpt-4o", "local")),
    ("TETHER_PERMISSION", "auto", "permission", "auto"),
    ("TETHER_WORKFLOW", '["a.yaml", "b.yaml"]', "workflows", ("a.yaml", "b.yaml")),
    ("TETHER_COMPACTION", "true", "compaction", True),
    ("TETHER_PREEMPT", "1", "preempt", True),
    ("TETHER_API_KEY", "sekret", "api_key", "sekret"),
    ("TETHER_MAX_TOKENS", "512", "default_max_tokens", 512),
    ("TETHER_TEMPERATURE", "0.2", "default_temperature", 0.2),
    ("TETHER_RESPONSES_STORE", "0", "responses_store", 0),
]


@pytest.fixture
def captured(monkeypatch: pytest.MonkeyPatch) -> list[ServerConfig]:
    """``tether serve`` up to the point where it would load the model: the ``ServerConfig`` it built."""
    seen = capture_serve(monkeypatch)
    for name in {case[0] for case in ENV_CASES} | {"TETHER_SERVER_TOOLS", "TETHER_WORK_DIR"}:
        monkeypatch.delenv(name, raising=False)
    return seen


@pytest.mark.parametrize(("env", "value", "field", "expected"), ENV_CASES)
def test_every_serve_option_comes_from_the_environment(
    captured: list[object],
    monkeypatch: pytest.MonkeyPatch,
    env: str,
    value: str,
    field: str,
    expected: object,
) -> None:
    monkeypatch.setenv(env, value)
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 0, result.output
    assert getattr(captured[0], field) == expected


def test_server_tools_from_the_environment(
    captured: list[object], monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    monkeypatch.setenv("TETHER_SERVER_TOOLS", "read_file, grep")
    monkeypatch.setenv("TETHER_WORK_DIR", str(tmp_path))
    assert CliRunner().invoke(app, ["serve"]).exit_code == 0
    assert captured[0].server_tools == ("read_file", "grep")


def test_command_line_wins_over_the_environment(
    captured: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_CTX", "4096")
    monkeypatch.setenv("TETHER_PRESET", "bare")
    monkeypatch.setenv("TETHER_COMPACTION", "true")
    result = CliRunner().invoke(app, ["serve", "--ctx", "2048", "--preset", "strict", "--no-compaction"])
    assert result.exit_code == 0, result.output
    config = captured[0]
    assert (config.n_ctx, config.preset, config.compaction) == (
        2048,
        "strict",
        False,
    )


def test_defaults_without_environment(captured: list[object]) -> None:
    assert CliRunner().invoke(app, ["serve"]).exit_code == 0
    config = captured[0]
    assert (config.n_ctx, config.slots, config.preset) == (8192, 1, "strict")
    assert config.constrain == "strict"  # the default preset brings its layer-0 mode


def test_bad_environment_value_is_a_one_line_error(
    captured: list[object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_CTX", "lots")
    result = CliRunner().invoke(app, ["serve"])
    assert result.exit_code == 2 and "ctx" in result.output and not captured


def test_a_port_in_use_fails_before_the_model_loads(monkeypatch: pytest.MonkeyPatch) -> None:
    import socket

    import tether.server

    loaded: list[object] = []
    monkeypatch.setattr(tether.server, "build_app", lambda config, **_: loaded.append(config))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = CliRunner().invoke(app, ["serve", "--port", str(port)])
    assert result.exit_code == 2 and not loaded
    assert f"cannot listen on 127.0.0.1:{port}" in result.output and "--port" in result.output


def test_a_file_that_is_not_gguf_is_named_as_such(tmp_path: Path) -> None:
    from tether.engine.llama_cpp import LlamaCppEngine

    fake = tmp_path / "model.safetensors"
    fake.write_bytes(b'{"__metadata__": {}}' + b"\0" * 64)
    with pytest.raises(ConfigError, match="is not a GGUF file"):
        LlamaCppEngine(fake)


def test_version() -> None:
    import tether

    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith(f"tether {tether.__version__}")


def test_the_output_cap_and_temperature_are_flags(captured: list[ServerConfig]) -> None:
    result = CliRunner().invoke(
        app, ["serve", "--max-tokens", "64", "--temperature", "0", "--max-body-mb", "2"]
    )
    assert result.exit_code == 0, result.output
    config = captured[0]
    assert (config.default_max_tokens, config.default_temperature) == (64, 0.0)
    assert config.max_body_bytes == 2 * 1024 * 1024


@pytest.mark.parametrize(
    "command", [["--help"], ["serve", "--help"], ["eval", "--help"], ["launch", "--help"]]
)
def test_help_reads_at_80_columns(command: list[str]) -> None:
    result = CliRunner().invoke(app, command, env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    lines = result.output.splitlines()
    assert all(len(line) <= 80 for line in lines), max(lines, key=len)
    assert "<bool>" not in result.output


def test_serve_help_groups_every_option_under_a_section() -> None:
    from tether.cli_help import SERVE_SECTIONS

    result = CliRunner().invoke(app, ["serve", "--help"], env={"COLUMNS": "80"}, terminal_width=80)
    assert result.exit_code == 0
    headings = [line[:-1] for line in result.output.splitlines() if line and not line[0].isspace()]
    assert headings[1:] == [*SERVE_SECTIONS, "Other options"], headings  # after "Usage: …"
    other = result.output.split("\nOther options:\n", 1)[1]
    assert [line.split()[0] for line in other.splitlines() if line.startswith("  -")] == ["-h,"]
    section = result.output.split("\nRemote backend:\n", 1)[1].split("\n\n", 1)[0]
    assert "--backend-timeout" in section and "--ctx" not in section
