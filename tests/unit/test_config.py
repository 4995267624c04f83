"""Security defaults close: a public bind needs an API key; the CLI says so in one line."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from tether.cli import app
from tether.config import Settings, is_loopback
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
